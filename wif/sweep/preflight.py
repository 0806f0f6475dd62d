"""Every job of a multirun composed and checked before the first one starts.

One bad value used to surface hours into a 330-job sweep. Now `refuse_bad_jobs` composes, types and validates
each job as Hydra will, under any sweeper. If any cannot run, the sweep stops with exit 2 before any run,
one line per reason naming its jobs. Jobs that choose the same group options share one composition, and
Hydra's own code applies each job's plain values to a copy. Where that fails, the job is composed in full.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from wif.config import Config, ConfigError, DataConfig, DataSource, validate
from wif.config.engine_checks import validate_dali_driver
from wif.config.exits import EXIT_BAD_SETTING, one_line
from wif.config.targets import typed
from wif.run.targets import check_user_code

log = logging.getLogger("wif")

JOBS_NAMED = 5  # jobs named per reason in the refusal; the rest are counted
Job = Sequence[str]  # a job's overrides, as the sweeper hands them to the launcher
_COMPOSED: Dict[Tuple[str, ...], Config] = {}  # each job's config as checked: a budgeted sweep prices them
_LATE: Optional[Tuple[DictConfig, "_Composer"]] = None  # composes the jobs the checks did not: a race's own keys


class _Composer:
    """Each job's typed config as Hydra's launcher would compose it."""

    def __init__(self, master: DictConfig) -> None:
        self.master = master
        self.loader = GlobalHydra.instance().config_loader()
        self.parser = OverridesParser.create(config_loader=self.loader)
        self.bases: Dict[Tuple[str, ...], Any] = {}

    def config(self, job: Job) -> Config:
        """The job's typed config; ConfigError with Hydra's own message when it cannot be composed."""
        try:
            return self._shared(job)
        except (HydraException, OmegaConfBaseException, AttributeError, ValueError):
            pass  # not a job the shortcut can compose: Hydra composes it in full, and says what is wrong
        try:
            return _typed(self.loader.load_sweep_config(self.master, list(job)))
        except (HydraException, OmegaConfBaseException) as err:
            raise ConfigError(one_line(err)) from None

    def _shared(self, job: Job) -> Config:
        """The job composed from the shared composition of its config-group choices."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl  # Hydra 1.3: how it applies values

        parsed = self.parser.parse_overrides(list(job))
        is_group = [
            self.loader.repository.group_exists(o.key_or_group) and not isinstance(o.value(), dict) for o in parsed
        ]
        groups = tuple(o.input_line for o, g in zip(parsed, is_group) if g)
        base = _once(
            self.bases,
            groups,
            lambda: _without_hydra(self.loader.load_sweep_config(self.master, list(groups))),
            errors=(HydraException, OmegaConfBaseException),
        )
        cfg = copy.deepcopy(base)
        ConfigLoaderImpl._apply_overrides_to_config(
            [o for o, g in zip(parsed, is_group) if not g and not o.is_hydra_override()], cfg
        )
        return typed(cfg)


def _once(cache: Dict[Any, Any], key: Any, find: Callable[[], Any], errors: Tuple[type, ...] = (ConfigError,)) -> Any:
    """`find()`'s answer, found once per key; an error among `errors` is kept and raised again each time."""
    if key not in cache:
        try:
            cache[key] = find()
        except errors as err:
            cache[key] = err
    if isinstance(cache[key], errors):
        raise cache[key]
    return cache[key]


def _without_hydra(cfg: DictConfig) -> DictConfig:
    """The config less its `hydra` node."""
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra", None)  # as Hydra hands a job its config
    return cfg


def _typed(cfg: DictConfig) -> Config:
    """The typed config of a composed one."""
    return typed(_without_hydra(cfg))


class _Checks:
    """What a job needs beyond its own config, found once per device setting and per image folder."""

    def __init__(self) -> None:
        self.devices: Dict[Any, Any] = {}
        self.folders: Dict[Tuple[str, str], Any] = {}
        self.storages: Dict[tuple, Any] = {}

    def storage(self, data: DataConfig) -> None:
        """ConfigError when the data's storage cannot be prepared; once per storage."""
        from wif.data.formats.splits import preflight_storage

        key = (data.source, data.root, data.path, data.cache_dir, data.format, data.page_cache)
        _once(self.storages, key, lambda: preflight_storage(data))

    def device(self, conf: Config) -> None:
        """ConfigError when the device cannot be used; once per device setting."""
        from wif.measure.nvml import resolve_device

        validate_dali_driver(conf, _once(self.devices, conf.device, lambda: resolve_device(conf.device)))

    def folder(self, data: DataConfig, here: bool) -> None:
        """Elsewhere (SLURM) a folder this machine sees is on a shared disk: checked once here all the same."""
        from wif.data.folder_check import check_folder

        if data.source is not DataSource.folder or not (here or Path(str(data.root)).expanduser().is_dir()):
            return
        verdict = _once(self.folders, (str(data.root), str(data.cache_dir)), lambda: check_folder(data))
        if verdict.bad and not data.skip_bad:
            raise ConfigError(verdict.message())


def _key(job: Job) -> Tuple[str, ...]:
    """The job's overrides, sorted, as a price sees them."""
    return tuple(sorted(o for o in job if not o.startswith("race.id=")))  # the race's id changes no price


def composed(master: DictConfig, job: Job) -> Config:
    """The job's typed config, as the checks composed it (composed now if they did not)."""
    global _LATE
    if _key(job) not in _COMPOSED:
        if _LATE is None or _LATE[0] is not master:  # one composer a sweep: its shared compositions are kept
            _LATE = (master, _Composer(master))
        _COMPOSED[_key(job)] = _LATE[1].config(job)
    return _COMPOSED[_key(job)]


def runs_here(master: DictConfig) -> bool:
    """Whether jobs run on this machine (not under SLURM); elsewhere only what needs no machine is checked."""
    return not str(master.hydra.launcher.get("_target_", "")).endswith("SlurmLauncher")


def bad_jobs(master: DictConfig, jobs: Sequence[Job]) -> List[Tuple[Job, str]]:
    """Every job that cannot run, with the reason, in the sweep's order."""
    composer, checks, here = _Composer(master), _Checks(), runs_here(master)
    bad = []
    for job in jobs:
        try:
            conf = _COMPOSED[_key(job)] = composer.config(job)
            validate(conf, here)
            if here:
                checks.device(conf)
                check_user_code(conf)  # each distinct factory once, in a forked process
            checks.folder(conf.data, here)
            if here:
                checks.storage(conf.data)  # whether a cold page cache can evict where the data is
        except ConfigError as err:
            bad.append((job, str(err)))
    return bad


def job_names(jobs: Sequence[Job]) -> List[str]:
    """Each job named by the overrides that tell it apart from the sweep's other jobs."""
    values: Dict[str, set] = defaultdict(set)
    for job in jobs:
        for item in job:
            key, _, value = item.partition("=")
            values[key].add(value)
    varying = {key for key, seen in values.items() if len(seen) > 1}
    return [" ".join(item for item in job if item.partition("=")[0] in varying) or " ".join(job) for job in jobs]


def refuse_bad_jobs(master: DictConfig, jobs: Sequence[Job]) -> None:
    """Check every job; if any cannot run, say why and exit 2 (a callback's exception would be only a warning)."""
    t0 = time.perf_counter()
    bad = bad_jobs(master, jobs)
    seconds = time.perf_counter() - t0
    if not bad:
        log.info("All %d jobs of the sweep checked in %.1f s.", len(jobs), seconds)
        return
    names = dict(zip(map(tuple, jobs), job_names(jobs)))
    by_reason: Dict[str, List[str]] = defaultdict(list)
    for job, reason in bad:
        by_reason[reason].append(names[tuple(job)])
    log.error(
        "Bad setting: %d of %d jobs of this sweep cannot run, so none was started (checked in %.1f s):",
        len(bad),
        len(jobs),
        seconds,
    )
    for reason, named in by_reason.items():
        more = f" and {len(named) - JOBS_NAMED} more" if len(named) > JOBS_NAMED else ""
        log.error("  %s%s: %s", ", ".join(named[:JOBS_NAMED]), more, reason)
    raise SystemExit(EXIT_BAD_SETTING)
