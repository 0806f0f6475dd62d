"""data=custom: the user's own map-style Dataset, from the factory named by `data._target_`.

The factory returns a Dataset of `(input, label)`, or a dict of `train` and optionally `val` and `test`. The
study's rules apply unchanged. `data.fraction` and `data.val_split` cut it, unless a `val` set is given. The
validation split stands in for a missing test set.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from torch.utils.data import Dataset, Subset

from wif.config import ConfigError, DataConfig, UserCodeError
from wif.config.targets import factory_failure, importable
from wif.data.datasets import Datasets, split_indices

PARTS = ("train", "val", "test")


def _is_map_style(ds: Any) -> bool:
    return hasattr(ds, "__getitem__") and hasattr(ds, "__len__")


def custom_sets(cfg: DataConfig) -> Dict[str, Optional[Dataset]]:
    """Call the factory; UserCodeError unless it returns a map-style Dataset of (input, label) or a dict of them."""
    factory = importable("data._target_", str(cfg._target_))
    try:
        made = factory(**cfg.kwargs)
    except Exception as err:  # the user's code: one line naming the key, its traceback in the job's log
        raise UserCodeError(factory_failure("data._target_", cfg._target_, err)) from err
    sets: Dict[str, Any] = dict(made) if isinstance(made, dict) else {"train": made}
    extra = set(sets) - set(PARTS)
    if extra or "train" not in sets:
        raise UserCodeError(
            f"data._target_={cfg._target_} returned a dict with keys {sorted(sets)}: expected "
            "'train' and optionally 'val' and 'test'."
        )
    for part in PARTS:
        ds = sets.get(part)
        if ds is None:
            continue
        if not _is_map_style(ds):
            raise UserCodeError(
                f"data._target_={cfg._target_} returned a {type(ds).__name__} for {part}, not a "
                "map-style Dataset (one with __getitem__ and __len__) of (input, label)."
            )
        if len(ds) == 0:
            raise UserCodeError(f"data._target_={cfg._target_}: its {part} Dataset is empty.")
        sample = ds[0]
        if not (isinstance(sample, (tuple, list)) and len(sample) == 2):
            raise UserCodeError(
                f"data._target_={cfg._target_}: {part}[0] is a {type(sample).__name__}, not an (input, label) pair."
            )
    return {part: sets.get(part) for part in PARTS}


def num_classes_of(train: Any, default: int) -> int:
    """`len(dataset.classes)` where the Dataset says (as torchvision's do), else data.num_classes."""
    classes = getattr(train, "classes", None)
    return len(classes) if classes is not None and len(classes) >= 2 else default


def subset(ds: Dataset, indices: Any) -> Subset:
    return Subset(ds, [int(i) for i in indices])


def custom_datasets(cfg: DataConfig) -> Datasets:
    """The factory's sets cut as the study cuts its own: a seeded `fraction` of train, then its validation."""
    sets = custom_sets(cfg)
    train = sets["train"]
    train_idx, val_idx = split_indices(
        len(train), cfg.fraction, 0.0 if sets["val"] is not None else cfg.val_split, cfg.seed
    )
    if len(train_idx) == 0:
        raise ConfigError(
            f"data.fraction={cfg.fraction} of the {len(train)} samples of data._target_="
            f"{cfg._target_} leaves an empty training split. Raise data.fraction."
        )
    val = sets["val"] if sets["val"] is not None else subset(train, val_idx)
    test = sets["test"] if sets["test"] is not None else val
    return Datasets(
        train=subset(train, train_idx), val=val, test=test, num_classes=num_classes_of(train, cfg.num_classes)
    )
