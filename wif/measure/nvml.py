"""GPU memory and utilization from NVML (`nvidia-ml-py`), read from the supervising process.

A run's device memory is what NVML lists for its processes, context included. Where it lists none, as in a
container, the figure is the device's used memory over a baseline read before the fork. `cuda_present` asks
NVML too: a process that forks runs must never hold a CUDA context. `resolve_device` resolves device=auto.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from wif.config import ConfigError, Device
from wif.measure import names

PER_PROCESS = "per_process"
FALLBACK = "device_minus_baseline"
# Why the fallback was taken (wif.vram_fallback), one constant each:
FOREIGN_PIDS = "pid_namespace"  # the listed PIDs are not this PID namespace's: a container
NOT_LISTED = "not_listed"  # the run's processes are not among those listed
NONE_LISTED = "none_listed"  # NVML listed no process at all
NO_FIGURE = "no_figure"  # the run's processes are listed without a figure


def cuda_present() -> bool:
    """Ask NVML, not the CUDA runtime: this process forks runs and must never hold a CUDA context."""
    import torch

    if not torch.backends.cuda.is_built():
        return False
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return torch.cuda.is_available()


def resolve_device(requested: Device) -> str:
    """The device a run gets: "cuda" where asked for or auto and present, else "cpu"."""
    cuda = cuda_present()
    if requested is Device.cuda and not cuda:
        raise ConfigError(
            "device=cuda, but this machine has no usable CUDA device (or this torch build has no "
            "CUDA). Use device=auto or device=cpu."
        )
    return "cuda" if requested is not Device.cpu and cuda else "cpu"


def nvml_names(uuid: str) -> List[str]:
    """The UUIDs NVML may know a device by: torch's bare UUID as `GPU-...` or `MIG-...`, never `GPU-` for a MIG."""
    if uuid.startswith(("GPU-", "MIG-")):
        return [uuid]
    return [f"GPU-{uuid}", f"MIG-{uuid}"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def memory_baselines() -> Dict[str, int]:
    """Used bytes of every device NVML lists, MIG instances too, by UUID; {} without NVML. Read before a run forks."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no GPU, no library: no baseline
        return {}
    out: Dict[str, int] = {}
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            out[_text(pynvml.nvmlDeviceGetUUID(handle))] = pynvml.nvmlDeviceGetMemoryInfo(handle).used
            for mig in _mig_devices(pynvml, handle):
                out[_text(pynvml.nvmlDeviceGetUUID(mig))] = pynvml.nvmlDeviceGetMemoryInfo(mig).used
    except pynvml.NVMLError:
        pass
    finally:
        pynvml.nvmlShutdown()
    return out


def _mig_devices(pynvml: Any, handle: Any) -> List[Any]:
    try:
        if not pynvml.nvmlDeviceGetMigMode(handle)[0]:
            return []
        count = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except pynvml.NVMLError:  # not a MIG-capable GPU
        return []
    migs = []
    for j in range(count):
        try:
            migs.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j))
        except pynvml.NVMLError:  # an empty slot
            continue
    return migs


def vram_reading(
    listed: Sequence[Tuple[int, Optional[int]]], pids: set, used: int, baseline: int, exists: Callable[[int], bool]
) -> Tuple[float, str]:
    """The bytes the run's tree holds on the device: its listed processes' sum, else the rise over the baseline.

    Args:
        listed: NVML's (pid, used bytes or None) of every process on the device.
        pids: the run's processes.
        used: the device's used bytes.
        baseline: its used bytes before the run.
        exists: whether a PID is a process of this machine's view; in a container, host PIDs are not.
    """
    mine = [used_bytes for pid, used_bytes in listed if pid in pids]
    figures = [b for b in mine if b is not None]
    if figures:
        return float(sum(figures)), PER_PROCESS
    if mine:
        reason = NO_FIGURE
    elif not listed:
        reason = NONE_LISTED
    else:
        reason = NOT_LISTED if any(exists(pid) for pid, _ in listed) else FOREIGN_PIDS
    return float(max(used - baseline, 0)), reason


def source_tags(sources: Counter, baseline_late: bool) -> Dict[str, str]:
    """How `vram_peak_device_mb` was read, as tags: per process where listed, else the most telling reason."""
    if not sources:
        return {}
    if PER_PROCESS in sources:
        return {names.TAG_VRAM_SOURCE: PER_PROCESS}
    reason = next(r for r in (FOREIGN_PIDS, NOT_LISTED, NO_FIGURE, NONE_LISTED) if r in sources)
    tags = {names.TAG_VRAM_SOURCE: FALLBACK, "wif.vram_fallback": reason}
    if baseline_late:
        tags["wif.vram_baseline"] = "late: read after the run's CUDA context existed"
    return tags


def _exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


class GpuProbe:
    """NVML reads for one device, never a CUDA context; a baseline missing from `baselines` is read now, late."""

    def __init__(self, uuid: str, baselines: Optional[Dict[str, int]] = None) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle, self.uuid = None, uuid
        for name in nvml_names(uuid):
            try:
                self.handle, self.uuid = pynvml.nvmlDeviceGetHandleByUUID(name), name
                break
            except pynvml.NVMLError:
                continue
        if self.handle is None:
            pynvml.nvmlShutdown()
            raise LookupError(f"NVML lists no device {' or '.join(nvml_names(uuid))}")
        early = (baselines or {}).get(self.uuid)
        self.baseline = early if early is not None else pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.baseline_late = early is None
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        self.driver = pynvml.nvmlSystemGetDriverVersion()
        self.sources: Counter = Counter()  # how each memory sample was read

    def memory(self, pids: set) -> float:
        """Bytes the tree holds on the device; else the rise over the baseline, counted in `sources`."""
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        listed = [(p.pid, p.usedGpuMemory) for p in procs]
        used = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
        value, source = vram_reading(listed, pids, used=used, baseline=self.baseline, exists=_exists)
        self.sources[source] += 1
        return value

    def utilization(self) -> Optional[float]:
        """None where the device has no utilization counter (a MIG instance)."""
        try:
            return float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        except self.nvml.NVMLError:
            return None

    def tags(self) -> Dict[str, str]:
        return source_tags(self.sources, self.baseline_late)

    def close(self) -> None:
        self.nvml.nvmlShutdown()
