"""Each job of a sweep composed once, not twice: the sweeper's check that a batch composes, kept for the launcher.

Hydra's basic sweeper composes every job of a batch to see that it can (`Sweeper.validate_batch_is_legal`),
throws those configs away, and its basic launcher composes each job again when it runs it: ~0.1 s a job
here, twice. wif's sweepers (hydra_plugins/wif_sweeper) keep what the check composed when the launcher runs
the jobs in this process, and the launcher is handed it back. What a composition reads (Hydra 1.3's
`ConfigLoaderImpl.load_sweep_config`): the master config's name and Hydra overrides, the job's overrides
(the key here), the config files, the working directory and the `hydra.job.env_copy` variables; a kept
config whose files, directory or variables changed since is composed again, and the master's resolver
cache is copied onto it as Hydra copies it. A config is kept pickled (about 23 KB) and handed out once.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

Key = Tuple[str, Tuple[str, ...], Tuple[str, ...]]
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"  # runs each job in this process
MAX_FILES = 2000  # a search path folder with more files than this (--config-dir .): its configs are composed again


# Each kept job's config, pickled, and what its composition read (`_inputs`): by the sweeper's check, or by the
# sweep's preflight (wif.sweep.preflight) for a job it composed in full anyway. Handed out once.
_KEPT: Dict[Key, Tuple[bytes, Optional[tuple]]] = {}


def forget() -> None:
    """A new sweep's check: what an earlier sweep in this process kept and never launched goes."""
    _KEPT.clear()


def compose_and_keep(loader: Any, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
    """The job composed in full as the launcher will compose it (raising what Hydra raises), kept for it."""
    cfg = loader.load_sweep_config(master_config, sweep_overrides)
    _KEPT[_key(master_config, sweep_overrides)] = (pickle.dumps(cfg), _inputs(cfg))
    return cfg


def _still_valid(key: Key) -> Optional[DictConfig]:
    kept = _KEPT.get(key)
    if kept is None or kept[1] is None:
        return None
    cfg = pickle.loads(kept[0])
    return cfg if _inputs(cfg) == kept[1] else None


class ComposedOnce:
    """A config loader for a sweeper and an in-process launcher: Hydra's own (`inner`) for everything, with
    `keep` for the sweeper's check and `load_sweep_config` handing a kept job's config back once."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def keep(self, master_config: DictConfig, sweep_overrides: List[str]) -> None:
        """Compose the job as the launcher will and keep it, unless the preflight kept it and nothing changed."""
        if _still_valid(_key(master_config, sweep_overrides)) is None:
            compose_and_keep(self._inner, master_config, sweep_overrides)

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: List[str]) -> DictConfig:
        key = _key(master_config, sweep_overrides)
        cfg = _still_valid(key)
        _KEPT.pop(key, None)
        if cfg is None:
            return self._inner.load_sweep_config(master_config, sweep_overrides)
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)  # as load_sweep_config does
        return cfg


def _key(master_config: DictConfig, sweep_overrides: Sequence[str]) -> Key:
    hydra = master_config.hydra
    return str(hydra.job.config_name), tuple(hydra.overrides.hydra), tuple(sweep_overrides)


def _inputs(cfg: DictConfig) -> Optional[tuple]:
    """What else the composition read: the working directory, the copied environment variables, and each
    config file's size and modification time in the file sources of the search path."""
    job = cfg.hydra.job
    env = tuple((k, os.environ.get(k)) for k in job.env_copy)
    files = []
    for source in cfg.hydra.runtime.config_sources:
        if source.schema == "file" and Path(source.path).is_dir():
            for folder, _, names in sorted(os.walk(source.path)):
                for name in sorted(names):
                    stat = os.stat(os.path.join(folder, name))
                    files.append((folder, name, stat.st_size, stat.st_mtime_ns))
                    if len(files) > MAX_FILES:
                        return None
    return os.getcwd(), env, tuple(files)


def _named(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class KeepsComposedJobs:
    """Mixed into a subclass of Hydra's BasicSweeper: with the basic launcher (jobs run in this process) the
    batch check keeps each job's config and the launcher takes it; other launchers compose on their own."""

    hydra_context: HydraContext
    launcher: Any
    config: DictConfig

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)  # type: ignore[misc]
        if _named(type(self.launcher)) == BASIC_LAUNCHER:  # Hydra imports plugins apart: the class, not by identity
            loader = ComposedOnce(hydra_context.config_loader)
            self.hydra_context = HydraContext(config_loader=loader, callbacks=hydra_context.callbacks)  # type: ignore[arg-type]
            self.launcher.hydra_context = self.hydra_context
        else:
            _KEPT.clear()  # the launcher composes each job where it runs it

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        loader = self.hydra_context.config_loader
        if not isinstance(loader, ComposedOnce):
            return super().validate_batch_is_legal(batch)  # type: ignore[misc]
        for overrides in batch:
            loader.keep(self.config, list(overrides))
