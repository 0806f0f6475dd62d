"""What a budgeted sweep's jobs evaluate: data.val_images and data.test_images, where the user left them null.

A budgeted job is for its training epochs, which the race compares. Its validation each epoch and its test
pass are checks that it trained: `sweep.eval_images` images tell a broken loader from a working one, and a
3-minute CPU sweep spent about 2 s of each 8-s job testing 10,000. The overrides join the job's command
line, so its record and its launch line say them.
"""

from __future__ import annotations

from typing import List, Sequence

from omegaconf import DictConfig, OmegaConf

EVAL_KEYS = ("data.val_images", "data.test_images")


def eval_overrides(cfg: DictConfig, arguments: Sequence[str]) -> List[str]:
    """The overrides a budgeted sweep adds to every job: each key of EVAL_KEYS set nowhere else.

    None where sweep.eval_images is null, or the sweep is not budgeted.
    """
    size = OmegaConf.select(cfg, "sweep.eval_images")
    budgeted = OmegaConf.select(cfg, "sweep.budget_min") is not None or bool(cfg.sweep.get("probe_only"))
    if size is None or not budgeted:
        return []
    given = {a.partition("=")[0].lstrip("+~") for a in arguments}
    return [f"{k}={size}" for k in EVAL_KEYS if k not in given and OmegaConf.select(cfg, k) is None]
