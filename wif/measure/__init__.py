"""How a run is observed and recorded. Imports only `wif.config`.

`epochs` holds one account of an epoch: its figures, the warm-up rule and the run's steady summary.
`timing` holds clocks that time an asynchronous device right.
`sampler` samples the memory and CPU of a run's whole process tree; `epochs` cuts its samples into windows.
`proctree`, `nvml` and `contention` read the tree, the GPUs and the other processes on the machine.
`sysinfo` describes the machine a run ran on.
`pagecache` evicts and reads the page cache without root.
`tracking` writes to the MLflow store, and sends a watched script's epochs within a share of a core.
`lifetime` keeps the process tree whole and ends it with its owner.
`names` writes each name of a run's metrics, tags and cells once.

Nothing is imported here. DataLoader workers import `lifetime` alone. The report imports `tracking` and
`names` alone, without torch or the sampler.
"""
