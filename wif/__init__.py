"""Who is Faster: which PyTorch data-loading and host-to-GPU transfer settings train fastest, and what
each costs in VRAM and RAM.

The packages, bottom to top; each imports only from those below it (tests/test_layout.py checks):

    config   what a run is: typed schema, checks, composition for the tools, exit codes
    measure  how a run is observed and recorded: an epoch's account, clocks, memory sampler, NVML,
             contention, host facts, MLflow tracking, process lifetime
    decide   deciding from few repeats: the model, the verdict, the race's rules (beside data: it
             imports measure's names alone)
    data     where batches come from: data sources and their cache, image folders, datasets, loaders,
             transfer to the device, loader engines
    run      one run: model, epoch loop, training, the supervised child process
    sweep    many runs: the Hydra job, the sweep's callback and tally, preflight, blocks, the race's
             record, cluster and GPU placement
    tools    wif-tune, wif-batch-size, wif-bandwidth, wif-pack and the in-process API (import run and
             below, never sweep)
    watcher  wif.watch in a user's own loop, and the orders wif-advise gives it (imports run and below)
    advisor  wif-advise: the bottleneck found, candidates predicted and raced (imports tools, watcher and
             below)

`commands` (the `wif` command: the list of commands) imports none of them. `dataloader_args`, the one table of
DataLoader's keyword arguments (their defaults, the proof's reading, the lines to paste), lies below them all and
imports only the standard library. `report` stands beside them: it reads the MLflow store (and
`measure.tracking` for its address), decides with `decide`, and never imports torch or the training code.

From a user's own script: `wif.watch(loader)` (the one line in the loop: each pass timed and logged as an
epoch; wif.watcher.watch), `wif.tune_workers(dataset, ...)` and `wif.time_epochs(loader, step, epochs)`
(wif.tools.api; imported on first use, so `import wif` stays free of torch), and `wif.advise(overrides)`
(wif-advise: the bottleneck found and the fix raced; wif.advisor.advise_cli.advise_overrides), and
`worker_init_fn=wif.limit_worker_threads(n)` (each worker's OpenCV and BLAS threads at n; wif.data.worker_threads).
"""

# NOTE [ Module state ]
# A global written at run time is kept only where no object can carry it. Each, and why:
#   wif.sweep.callback.TALLY, LOST  Hydra makes the callback, the sweeper, the launcher and the job function
#                                   apart; in one process they talk only through these. Reset in place per sweep.
#   wif.watcher.hook (ORIGINAL, HELD), origin.MADE_AT, proof.STARTED   the import hooks patch torch's
#                                   DataLoader class for the whole process: what they patched and saw is too.
#   wif.watcher.claim (_seen, _undo)   torch's backward and optimizer-step hooks are process-wide: so is their count.
#   wif.watcher.watch._sessions, claim.CLAIMED, claim.DROPPED   `wif.watch(loader)` is a function the loop calls
#                                   anew each epoch, and a hooked epoch has no caller of wif's: one loop's watch,
#                                   and the one training loader, outlive each call.
#   wif.measure.timing._ACTIVE      the epoch's copy clock, read by a transfer called from inside the user's step.
#   wif.run.forking._PARENT_THREADS, wif.advisor.warm._preload, warm_preload.REGISTERED   what this process
#                                   was before it forked: its children inherit it.
# Caches beside them (preflight._COMPOSED and _LATE, job_record._TRACKERS, gpus._CLAIM, lmdb_format._OPEN,
# targets._SEEN) hold what is the same for the whole process: a composition, a store, a claimed GPU, an open file.

from typing import Any

API = ("tune_workers", "time_epochs", "WorkerPick", "EpochTimes")


def __getattr__(name: str) -> Any:
    if name == "advise":
        from wif.advisor.advise_cli import advise_overrides

        return advise_overrides
    if name in API:
        from wif.tools import api

        return getattr(api, name)
    if name == "limit_worker_threads":  # the worker_threads option in one's own DataLoader: stdlib only
        from wif.data.worker_threads import limit_worker_threads

        return limit_worker_threads
    if name == "watch":
        from wif.watcher.watch import watch

        return watch
    raise AttributeError(f"module 'wif' has no attribute {name!r}")
