"""What the advice is about: the data it uses, the line that says so, and whether others disturbed its runs.

With `data=folder` it uses the whole folder unless told otherwise: NOTE [ The user's data, whole ].
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional, Sequence

from wif.advisor.predict import batch_sizes
from wif.advisor.runner import Measured
from wif.config import Config, DataSource
from wif.data.datasets import split_indices
from wif.data.folder import folder_files

# NOTE [ The user's data, whole ]
# Advice about the user's data uses the user's data. With `data=folder`, `wif-advise` trains on every image of
# `train/`, `data.fraction=1.0`, and cuts no validation split from it, `data.val_split=0`. The run evaluates on
# the folder's own held-out split: `test/`, `val/` or `validation/`. The command line may set either. Its
# `Use it:` line carries both, so the line pasted trains the workload measured. train.py keeps the study's
# defaults: a 10% subset, 20% of it for validation.
WHOLE_FOLDER = {"data.fraction": 1.0, "data.val_split": 0.0}
ALSO_SETS = {"data.fraction": ("data_fraction",)}  # a config group that sets the same key


def whole_folder(base: Config, overrides: Sequence[str]) -> List[str]:
    """data=folder: all of train/ for training, none cut for validation, unless overridden; the overrides set.

    See NOTE [ The user's data, whole ].
    """
    said = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if base.data.source is not DataSource.folder or base.data.path is not None:
        return []
    added = []
    for key, value in WHOLE_FOLDER.items():
        if not said & {key, *ALSO_SETS.get(key, ())}:
            setattr(base.data, key.split(".")[1], value)
            added.append(f"{key}={value:g}")
    return added


def training_items(base: Config) -> Optional[int]:
    """The images a training epoch takes; None where only the run can count them (data=custom, a pack's data.path)."""
    d = base.data
    if d.source is DataSource.folder and d.path is None:
        total = len(folder_files(d)[0]["train_paths"])
    elif d.source in (DataSource.synthetic, DataSource.encoded):
        total = d.num_train
    else:
        return None
    return len(split_indices(total, d.fraction, d.val_split, d.seed)[0])


def data_line(base: Config, items: Optional[int]) -> str:
    """The data the advice uses, said before anything runs: images, batches an epoch, image size, source."""
    d = base.data
    if d.source is DataSource.folder and d.path is None:
        files, _ = folder_files(d)
        where = (
            f"data=folder {Path(str(d.root)).expanduser()}: {len(files['train_paths']):,} images in train/, "
            f"data.fraction={d.fraction:g}, data.val_split={d.val_split:g}; held out: "
            f"{files['held_out']}/ ({len(files['test_paths']):,})"
        )
    else:
        where = f"data={d.source.value}, data.fraction={d.fraction:g}, data.val_split={d.val_split:g}"
    size = f"{d.image_size} px" if d.source is not DataSource.custom else "the size your Dataset makes"
    if items is None:
        return f"data: counted by the first run ({where}), batches of {d.batch_size}, {size}"
    return (
        f"data: {items:,} training images an epoch, {len(batch_sizes(items, d.batch_size))} batches of "
        f"{d.batch_size}, {size} ({where})"
    )


def contention_line(runs: Sequence[Measured], threshold_pct: float, reruns: int) -> str:
    """Whether other processes disturbed the advice's runs, with the figure: the study's host_other_cpu_pct."""
    figures = [m.other_pct for m in runs if m.other_pct is not None and not math.isnan(m.other_pct)]
    if not figures:
        return "Other processes: not measured (no /proc/stat, or no run finished its measured epochs)."
    hit = [m for m in runs if m.contended and not m.replaced]
    if not hit:
        used = [m.other_pct for m in runs if not m.replaced and m.other_pct is not None and not math.isnan(m.other_pct)]
        again = sum(m.replaced for m in runs)
        return (
            f"Other processes: at most {max(used or figures):.0f}% of a core during the measured epochs of "
            f"{len(used)} runs (contended above {threshold_pct:g}%, measure.contended_pct): not disturbed"
            + (f"; {again} contended run(s) were run again, undisturbed, and only those are used." if again else ".")
        )
    return (
        f"Other processes: DISTURBED: they used {min(m.other_pct for m in hit):.0f}-"
        f"{max(m.other_pct for m in hit):.0f}% of a core during the measured epochs of {len(hit)} of "
        f"{len(figures)} runs (contended above {threshold_pct:g}%, measure.contended_pct); {reruns} contended "
        "run(s) run again where the time allowed, and a race looks at undisturbed blocks only. The epoch "
        "times of the disturbed runs are slower than this machine alone gives."
    )
