"""Who is Faster: which PyTorch data-loading and host-to-GPU transfer settings train fastest, at what memory cost.

The packages, bottom to top. Each imports only from those below it (tests/test_layout.py checks). Each
package's `__init__` says what lives in it.

    `config`: what a run is: typed schema, checks, composition for the tools, exit codes.
    `measure`: how a run is observed and recorded: clocks, memory, NVML, host facts, MLflow.
    `decide`: deciding from few repeats. It sits beside data and imports measure's names alone.
    `data`: where batches come from: datasets, loaders, transfer to the device, loader engines.
    `run`: one run: model, epoch loop, training, the supervised child process.
    `sweep`: many runs: the Hydra job, the sweep's callback, preflight, the race, placement.
    `tools`: wif-tune, wif-batch-size, wif-bandwidth, wif-pack and the in-process API (run and below).
    `watcher`: wif.watch in a user's own loop, and the orders wif-advise gives it (run and below).
    `advisor`: wif-advise, the bottleneck found and the fix raced (tools, watcher and below).

`commands`, the `wif` command that lists the commands, imports none of them. `dataloader_args` is the one
table of DataLoader's keyword arguments. It lies below them all and imports only the standard library.
`report` stands beside them. It reads the MLflow store and decides with `decide`, never importing torch.

From a user's own script, imported on first use:
    `wif.watch(loader)`: the one line in the loop; each pass is timed as an epoch.
    `wif.tune_workers(dataset, ...)` and `wif.time_epochs(loader, step, epochs)`: see wif.tools.api.
    `wif.advise(overrides)`: wif-advise, the bottleneck found and the fix raced.
    What wif-advise's lines to paste call (wif.dataloader_args.PUBLIC): a `worker_init_fn` limiting threads.
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
#   wif.run.forking._PARENT_THREADS, wif.advisor.script.warm._preload, warm_preload.REGISTERED   what this process
#                                   was before it forked: its children inherit it.
# Caches beside them (preflight._COMPOSED and _LATE, job_record._TRACKERS, gpus._CLAIM, lmdb_format._OPEN,
# targets._SEEN, tracking._SILENT) hold what is the same for the whole process: a composition, a store, a claimed
# GPU, an open file, a tracking server that gave no answer.

from typing import Any

API = ("tune_workers", "time_epochs", "WorkerPick", "EpochTimes")


def __getattr__(name: str) -> Any:
    if name == "advise":
        from wif.advisor.advise_cli import advise_overrides

        return advise_overrides
    if name in API:
        from wif.tools import api

        return getattr(api, name)
    if name == "watch":
        from wif.watcher.watch import watch

        return watch
    from wif.dataloader_args import PUBLIC  # what a line to paste calls in one's own DataLoader: stdlib only

    if name in PUBLIC:
        return PUBLIC[name]
    raise AttributeError(f"module 'wif' has no attribute {name!r}")
