"""Command-line tools beside the study, and wif from a user's own script.

    `tune`: `wif-tune`, the loader's worker count searched.
    `worker_search`: its search, with no I/O; also `wif.tune_workers`' and wif-advise's.
    `tune_trials`: its trials, one recorded loader-only run per worker count and pin setting. Also
        `run_recorded`: one supervised run with its own MLflow record, as wif-tune and wif-advise run it.
    `batch_size`: `wif-batch-size`, the largest batch inside a VRAM budget.
    `batch_probe`: one of its probes, in a fresh spawned process.
    `bandwidth`: `wif-bandwidth`, the host-device copy rates.
    `pack`: `wif-pack`, an image source packed into LMDB or tar shards up front.
    `api`: `wif.tune_workers` and `wif.time_epochs`, in the caller's process.

Import `wif.run` and below; never the sweep. The watch, `wif.watch`, is a package of its own: `wif.watcher`.
"""
