"""How a run is observed and recorded: one account of an epoch, its figures, the warm-up rule and the run's
steady summary (epochs); clocks that time an asynchronous device right (timing); the memory and CPU of its
whole process tree (sampler, series, proctree, nvml, contention); the machine it ran on (sysinfo); the page
cache, evicted and read without root (pagecache); the MLflow store (tracking) and epochs sent to it off the
measured thread within a share of a core (paced); the process lifetime that keeps that tree whole
(lifetime); the host-device copy rates every setting is bound by (bandwidth); and the names of a run's
metrics, tags and cells, each written once (names).

Imports only `wif.config`. Nothing is imported here: DataLoader workers import `lifetime` alone, and the
report `tracking` and `names` alone, without torch or the sampler.
"""
