"""How a run is observed and recorded: clocks that time an asynchronous device right (timing), the memory
and CPU of its whole process tree (sampler, proctree, nvml, contention), the machine it ran on (sysinfo),
the MLflow store (tracking), and the process lifetime that keeps that tree whole (lifetime).

Imports only `wif.config`. Nothing is imported here: DataLoader workers import `lifetime` alone, and the
report `tracking` alone, without torch or the sampler.
"""
