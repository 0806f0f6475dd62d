"""Who is Faster: which PyTorch data-loading and host-to-GPU transfer settings train fastest, and what
each costs in VRAM and RAM.

The packages, bottom to top; each imports only from those below it (tests/test_layout.py checks):

    config   what a run is: typed schema, checks, composition for the tools, exit codes
    measure  how a run is observed and recorded: an epoch's account, clocks, memory sampler, NVML,
             contention, host facts, MLflow tracking, process lifetime
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
imports only the standard library. `report` stands beside them: it reads the MLflow store (and `measure.tracking`
for its address) and never imports torch or the training code; the sweep uses its pure race rules.

From a user's own script: `wif.watch(loader)` (the one line in the loop: each pass timed and logged as an
epoch; wif.watcher.watch), `wif.tune_workers(dataset, ...)` and `wif.time_epochs(loader, step, epochs)`
(wif.tools.api; imported on first use, so `import wif` stays free of torch), and `wif.advise(overrides)`
(wif-advise: the bottleneck found and the fix raced; wif.advisor.advise_cli.advise_overrides).
"""

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
    raise AttributeError(f"module 'wif' has no attribute {name!r}")
