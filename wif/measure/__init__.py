"""How a run is observed and recorded: clocks that time an asynchronous device right (timing), the memory
and CPU of its whole process tree (sampler, series, proctree, nvml, contention), the machine it ran on (sysinfo),
the MLflow store (tracking), the process lifetime that keeps that tree whole (lifetime), and the host-device
copy rates every setting is bound by (bandwidth).

Imports only `wif.config`. Nothing is imported here: DataLoader workers import `lifetime` alone, and the
report `tracking` alone, without torch or the sampler.
"""
