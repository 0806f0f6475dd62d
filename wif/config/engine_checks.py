"""Settings a pipeline engine cannot take, and a missing extra: part of `wif.config.validate`.

They live beside the schema, not beside the engines, so that checking a config never imports a data pipeline.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from typing import Optional, Tuple

from wif.config.schema import Config, DataSource, EngineName, TransferKind, require

# The module each engine other than DataLoader imports: found or not, without importing it
ENGINE_MODULES = {
    EngineName.spdl: "spdl.pipeline",
    EngineName.nodes_threads: "torchdata.nodes",
    EngineName.nodes_procs: "torchdata.nodes",
    EngineName.dali: "nvidia.dali",
}
# The extra that installs each engine's package
ENGINE_EXTRAS = {EngineName.dali: "dali"}
# The oldest NVIDIA driver each DALI wheel's CUDA runs on (DALI's installation guide: its CUDA 12.0 and 13.0 builds
# run on drivers 525.60 and 580 or later); an older one fails inside DALI's first GPU pipeline, saying little
DALI_DRIVERS = {"nvidia-dali-cuda130": (580,), "nvidia-dali-cuda120": (525, 60), "nvidia-dali-cuda110": (450, 80)}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def validate_engine(cfg: Config) -> None:
    """Refuse, in one line each, what the configured engine cannot take, and a missing extra."""
    engine, lo = cfg.engine.name, cfg.loader
    require(cfg.engine.prefetch_factor > 0, f"engine.prefetch_factor={cfg.engine.prefetch_factor} must be at least 1.")
    if engine is EngineName.dataloader:
        return
    name = f"engine={engine.value}"
    require(
        cfg.data.source is not DataSource.fixed and cfg.transfer.kind is not TransferKind.resident,
        f"{name} builds batches on the host, but data=fixed and loader=gpu_resident make none there. "
        "Use engine=dataloader with them.",
    )
    require(
        not lo.background,
        f"{name} prefetches itself; loader.background=true (BackgroundGenerator) on top of "
        "it is not supported. Use a loader option without bg, or engine=dataloader.",
    )
    require(
        not lo.persistent_workers,
        f"{name} has no persistent workers (torchdata.nodes 0.11 starts its workers "
        "at every epoch; SPDL and DALI build their pipeline, threads and all, at every epoch). "
        "Set loader.persistent_workers=false.",
    )
    require(
        lo.num_workers > 0 or engine is EngineName.nodes_threads,
        f"{name} needs at least one worker: loader.num_workers=0 has no meaning for it "
        "(engine=nodes_threads runs inline at 0 workers). Set loader.num_workers>=1.",
    )
    require(
        lo.multiprocessing_context is None or engine is EngineName.nodes_procs,
        f"{name} runs its workers on threads; loader.multiprocessing_context starts processes. "
        "Set loader.multiprocessing_context=null, or use engine=nodes_procs.",
    )
    if engine is EngineName.dali:
        _validate_dali(cfg)
    module, extra = ENGINE_MODULES[engine], ENGINE_EXTRAS.get(engine, "pipelines")
    require(
        installed(module),
        f'{name} needs the {module.split(".")[0]} package, which is not installed: pip install -e ".[{extra}]"',
    )


def _validate_dali(cfg: Config) -> None:
    """DALI decodes encoded images itself, on threads of its own, and hands batches over in order."""
    d = cfg.data
    require(
        d.source is DataSource.encoded or (d.source is DataSource.folder and not d.preload),
        f"engine=dali decodes the images itself, but data.source={d.source.value}"
        f"{' with data.preload=true' if d.preload else ''} holds decoded tensors. "
        "Use data=encoded or data=folder (data.preload=false), or another engine.",
    )
    require(
        cfg.loader.in_order,
        "engine=dali hands batches over in order; loader.in_order=false has no meaning "
        "for it. Set loader.in_order=true.",
    )


def validate_dali_driver(cfg: Config, device: str) -> None:
    """Refuse engine=dali on a GPU whose driver (from NVML) is older than the DALI wheel's CUDA needs."""
    if cfg.engine.name is EngineName.dali and device == "cuda":
        refusal = dali_driver_refusal(dali_wheel(), nvidia_driver())
        require(refusal is None, str(refusal))


def dali_driver_refusal(wheel: Optional[str], driver: Optional[str]) -> Optional[str]:
    """Why this DALI wheel cannot run on this driver version ("580.65.06"), or None when it can or either is
    unknown."""
    need = DALI_DRIVERS.get(wheel or "")
    if need is None or driver is None or _version(driver) >= need:
        return None
    return (
        f"engine=dali on the GPU: {wheel} needs NVIDIA driver {'.'.join(map(str, need))} or newer, and this "
        f"machine's is {driver}. Update the driver, install the DALI wheel of an older CUDA (e.g. "
        "nvidia-dali-cuda120 on drivers from 525.60), or run engine=dali with device=cpu."
    )


def _version(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def dali_wheel() -> Optional[str]:
    """The installed DALI distribution (its name says its CUDA), or None."""
    for name in DALI_DRIVERS:
        try:
            importlib.metadata.distribution(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def nvidia_driver() -> Optional[str]:
    """The driver's version as NVML says it ("580.65.06"; NVML never initializes CUDA), or None without one."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no NVML library: nothing to compare
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
