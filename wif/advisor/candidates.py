"""A candidate loader setting, the configurations of its runs, and the settings worth trying.

`Candidate` is a setting: the keys it sets, and what the prediction needs of it. `training`, `raced` and
`loader_only` configure its runs. Each worker count has persistent workers, so a kept worker costs nothing per
epoch. `extras` adds the other knobs at the best count, and a script gets `script_extras`, DataLoader's own.
No preload is tried for `data=encoded`. On a GPU, `resident` removes the loader's work beside the step.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from wif.config import Config, ConfigError, DataSource, TrainerMode, TransferKind, validate
from wif.data.loaders import TAKES_IN_ORDER
from wif.dataloader_args import default_threads
from wif.measure.sysinfo import usable_cores
from wif.tools.tune import WORKER_ONLY


@dataclass
class Candidate:
    """A loader setting: the keys it sets (as train.py overrides) and what the prediction needs of it."""

    name: str
    keys: Dict[str, Any]  # dotted config key -> value, e.g. {"loader.num_workers": 4}
    workers: int = 0
    persistent: bool = False
    prefetch: int = 2
    copy_hidden: bool = False

    def overrides(self) -> List[str]:
        """Its keys as train.py overrides, `key=value`."""
        return [f"{k}={_text(v)}" for k, v in self.keys.items()]


def _text(value: Any) -> str:
    """A value as a train.py override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(getattr(value, "value", value))


def apply(base: Config, cand: Candidate) -> Config:
    """The base configuration with the candidate's keys set; worker-only keys neutral at 0 workers."""
    conf = copy.deepcopy(base)
    for key, value in cand.keys.items():
        group, name = key.split(".", 1)
        node = getattr(conf, group)
        old = getattr(node, name)
        setattr(
            node, name, type(old)(value) if old is not None and value is not None and hasattr(old, "value") else value
        )
    if conf.loader.num_workers == 0:
        for key, neutral in WORKER_ONLY:
            setattr(conf.loader, key, neutral)
    return conf


def training(base: Config, cand: Candidate, epochs: int) -> Config:
    """A candidate's training run of `epochs` fixed epochs (the first is warm-up)."""
    conf = apply(base, cand)
    conf.trainer.mode, conf.trainer.epochs = TrainerMode.train, epochs
    return conf


def raced(base: Config, cand: Candidate, max_epochs: int) -> Config:
    """A candidate's run in the race: trainer.epochs=auto, capped at `max_epochs`."""
    conf = apply(base, cand)
    tr = conf.trainer
    tr.mode, tr.epochs, tr.max_epochs = TrainerMode.train, "auto", min(tr.max_epochs, max_epochs)
    tr.min_epochs = min(tr.min_epochs, tr.max_epochs)
    return conf


def loader_only(base: Config, cand: Candidate, batches: int, epochs: int) -> Config:
    """A candidate's loader-only trial: `batches` batches an epoch, no model."""
    conf = apply(base, cand)
    tr = conf.trainer
    tr.mode, tr.epochs, tr.max_batches = TrainerMode.loader_only, epochs, batches
    return conf


def current(base: Config, cuda: bool) -> Candidate:
    """The configured setting, as it is."""
    lo = base.loader
    return Candidate(
        name="current",
        keys={},
        workers=lo.num_workers,
        persistent=lo.persistent_workers,
        prefetch=lo.prefetch_factor or base.engine.prefetch_factor,
        copy_hidden=_hidden(base, cuda, lo.pin_memory),
    )


def _hidden(base: Config, cuda: bool, pin: bool) -> bool:
    """Whether the copy overlaps the step: pinned memory, copied non-blocking or on a stream, on a GPU."""
    t = base.transfer
    return cuda and pin and (t.non_blocking or t.kind is TransferKind.stream)


def workers(base: Config, count: int, cuda: bool) -> Candidate:
    """`count` persistent workers, the rest of the configured setting kept."""
    hidden = _hidden(base, cuda, base.loader.pin_memory)
    if count == 0:
        return Candidate(name="w0", keys={"loader.num_workers": 0}, copy_hidden=hidden)
    return Candidate(
        name=f"w{count}",
        keys={"loader.num_workers": count, "loader.persistent_workers": True},
        workers=count,
        persistent=True,
        prefetch=base.loader.prefetch_factor or base.engine.prefetch_factor,
        copy_hidden=hidden,
    )


def extras(base: Config, best: Candidate, cuda: bool, ram_free_bytes: Optional[float], items: int) -> List[Candidate]:
    """The other knobs at the best worker count, those the configuration accepts.

    Args:
        base: the configuration.
        best: the best worker count's candidate.
        cuda: whether the step runs on a GPU.
        ram_free_bytes: the RAM free for a preloaded dataset; None: not known.
        items: the images an epoch takes, as the measuring run counted them.
    """
    out = _deeper(best)
    if best.workers > 0:
        if importlib.util.find_spec("torchdata") is not None and base.engine.name.value == "dataloader":
            out.append(_more(best, "threads", {"engine.name": "nodes_threads"}))
    if cuda and not (base.loader.pin_memory and base.transfer.non_blocking):
        out.append(_more(best, "pin_nb", {"loader.pin_memory": True, "transfer.non_blocking": True}, copy_hidden=True))
    d = base.data
    if d.source is DataSource.folder and not d.preload and d.format is None and ram_free_bytes:
        need = items * 3 * d.image_size**2  # uint8 decoded images at image_size
        if need < 0.5 * ram_free_bytes:
            out.append(_more(best, "preload", {"data.preload": True}))
    return [c for c in out if _accepted(base, c)]


def resident(base: Config, cuda: bool) -> List[Candidate]:
    """On a GPU, the whole dataset on the device (`gpu_resident`): no loader works beside the step.

    A dataset that does not fit fails its run at once (wif.run.training._to_device), and the candidate drops out.
    """
    if not cuda or base.transfer.kind is TransferKind.resident:
        return []
    keys = {
        "loader.name": "gpu_resident",
        "loader.num_workers": 0,
        "loader.pin_memory": False,
        "loader.background": False,
        "transfer.kind": "resident",
        "transfer.non_blocking": False,
    }
    cand = Candidate(name="gpu_resident", keys=keys, copy_hidden=True)
    return [cand] if _accepted(base, cand) else []


def script_extras(
    base: Config, best: Candidate, cuda: bool, ram_free_bytes: Optional[float], items: int, threaded: bool = False
) -> List[Candidate]:
    """The other knobs at the best count for a user's script, DataLoader's own, its threads limited where needed."""
    out = _deeper(best)
    if best.workers > 0 and TAKES_IN_ORDER and base.loader.in_order:
        out.append(_more(best, "unordered", {"loader.in_order": False}))
    out += _limited_threads(base, best, cuda) if threaded else []
    if cuda and not base.loader.pin_memory:
        out.append(_more(best, "pin", {"loader.pin_memory": True}))
    return out


def _limited_threads(base: Config, best: Candidate, cuda: bool) -> List[Candidate]:
    """Each worker's OpenCV and BLAS threads at its share of the cores, where its workers' threads pass them.

    Oversubscribed cores slow every count with workers, so the limit goes at the script's own count where none is best.
    """
    anchor = best if best.workers > 0 else workers(base, base.loader.num_workers, cuda)
    cores = usable_cores()
    if anchor.workers == 0 or base.loader.worker_threads is not None or anchor.workers * default_threads() <= cores:
        return []
    n = max(1, cores // anchor.workers)  # a thread per core in each worker, as OpenCV and BLAS start, is too many
    return [_more(anchor, f"wthreads{n}", {"loader.worker_threads": n})]


def _deeper(best: Candidate) -> List[Candidate]:
    """Twice the default batches in flight per worker, where there are workers."""
    return [_more(best, "pf4", {"loader.prefetch_factor": 4}, prefetch=4)] if best.workers > 0 else []


def _more(best: Candidate, suffix: str, keys: dict, **changes) -> Candidate:
    """`best` with more `keys` set, named with `suffix`; `changes`: its other fields that differ."""
    fields = dict(
        workers=best.workers, persistent=best.persistent, prefetch=best.prefetch, copy_hidden=best.copy_hidden
    )
    fields.update(changes)
    return Candidate(name=f"{best.name}-{suffix}", keys={**best.keys, **keys}, **fields)


def _accepted(base: Config, cand: Candidate) -> bool:
    """Whether the configuration with the candidate's keys is valid."""
    try:
        validate(apply(base, cand))
    except ConfigError:
        return False
    return True
