"""GPU memory and utilization from NVML (`nvidia-ml-py`), read from the supervising process."""

from __future__ import annotations


class GpuProbe:
    """NVML reads for one device. NVML is not CUDA: using it never initializes a CUDA context here."""

    def __init__(self, uuid: str) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        self.driver = pynvml.nvmlSystemGetDriverVersion()

    def memory(self, pids: set) -> float:
        """Bytes the tree holds on the device; where a container hides host PIDs, the rise over start."""
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        mine = [p.usedGpuMemory for p in procs if p.pid in pids and p.usedGpuMemory is not None]
        if mine:
            return float(sum(mine))
        return float(max(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used - self.baseline, 0))

    def utilization(self) -> float:
        return float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def close(self) -> None:
        self.nvml.nvmlShutdown()
