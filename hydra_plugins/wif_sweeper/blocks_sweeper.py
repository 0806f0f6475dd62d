"""`hydra/sweeper=blocks` (wif's default): Hydra's basic sweeper, with cells shuffled within each block.

It expands the grid exactly as the basic sweeper does (so every launcher, basic, local_gpus or slurm,
gets the same jobs), then reorders them with `wif.sweep.blocks.shuffle_within_blocks` unless the task config
says `sweep.shuffle=false`. Hydra finds it in the `hydra_plugins` namespace package, as it finds the
Optuna and Ax sweepers.
"""

import itertools
from dataclasses import dataclass
from typing import Any, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override

from wif.sweep.blocks import shuffle_within_blocks


@dataclass
class BlocksSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.wif_sweeper.blocks_sweeper.BlocksSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="blocks", node=BlocksSweeperConf, provider="wif")


class BlocksSweeper(BasicSweeper):
    def split_arguments(self, overrides: List[Override], max_batch_size: Optional[int]) -> List[List[List[str]]]:
        (jobs,) = BasicSweeper.split_arguments(overrides, None)
        if self._shuffle():
            jobs = shuffle_within_blocks(jobs)
        if max_batch_size is None:
            return [jobs]
        it = iter(jobs)
        return [chunk for chunk in iter(lambda: list(itertools.islice(it, max_batch_size)), [])]

    def _shuffle(self) -> bool:
        sweep: Any = self.config.get("sweep") if self.config is not None else None
        return True if sweep is None else bool(sweep.get("shuffle", True))
