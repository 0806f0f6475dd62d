"""A candidate loader setting, and the configurations of its runs: training, raced, loader-only and the bound."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from wif.config import Augment, Config, DataSource, PageCache, TrainerMode
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


def bound(base: Config, epochs: int, n_train: int) -> Optional[Config]:
    """data=fixed at the configured model, step, batch and image size, `n_train` items an epoch.

    `n_train` is the measured run's: the same batches an epoch as the workload it stands for, whatever
    data.num_train says. None where it cannot stand for the data: with data=custom, your Dataset decides the
    inputs' shape.
    """
    if base.data.source is DataSource.custom:
        return None
    conf = apply(base, Candidate(name="bound", keys={"loader.num_workers": 0}))
    d = conf.data
    d.source, d.format, d.preload, d.augment, d.page_cache = DataSource.fixed, None, False, Augment.none, PageCache.warm
    d.num_train, d.fraction, d.val_split = max(n_train, 1), 1.0, 0.0
    conf.transfer.uint8 = False
    conf.trainer.mode, conf.trainer.epochs = TrainerMode.train, epochs
    return conf
