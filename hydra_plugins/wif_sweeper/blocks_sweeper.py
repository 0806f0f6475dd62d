"""`hydra/sweeper=blocks` (wif's default): Hydra's basic sweeper, with cells shuffled within each block.

It expands the grid exactly as the basic sweeper does (so every launcher, basic, local_gpus or slurm,
gets the same jobs), then reorders them with `wif.sweep.callback.shuffle_within_blocks` unless the task config
says `sweep.shuffle=false`. Hydra finds it in the `hydra_plugins` namespace package, as it finds the
Optuna and Ax sweepers.
"""

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf

from wif.sweep.callback import shuffle_within_blocks


@dataclass
class BlocksSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.wif_sweeper.blocks_sweeper.BlocksSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="blocks", node=BlocksSweeperConf, provider="wif")


class BlocksSweeper(BasicSweeper):
    """Hydra's basic sweeper, the grid shuffled within each block; under a budget, one job at a time."""

    def sweep(self, arguments: List[str]) -> Any:
        """The basic sweep, or the budgeted one under sweep.budget_min or sweep.probe_only."""
        if OmegaConf.select(self.config, "sweep.budget_min") is None and not self.config.sweep.get("probe_only"):
            return super().sweep(arguments)
        return self._sweep_in_budget(arguments)

    def _sweep_in_budget(self, arguments: List[str]) -> Any:
        """sweep.budget_min: price the jobs, say the plan, then run them in order while each can finish.

        A probe runs first where the store has no price. A job starts only if it can finish in what is left
        (wif.sweep.budget).
        """
        from wif.sweep import callback
        from wif.sweep.budget import eval_overrides
        from wif.sweep.callback import blocks_line
        from wif.sweep.sweep_budget import SweepBudget

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        arguments = [*arguments, *eval_overrides(self.config, arguments)]
        (jobs,) = self.split_arguments(parser.parse_overrides(self._parse_config() + arguments), None)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        budget = SweepBudget(self.config, jobs)
        budget.price_with_probe(lambda batch: self.launcher.launch(batch, initial_job_idx=0))
        if self.config.sweep.get("probe_only"):
            callback.TALLY.total = 0
            return []
        order = [budget.job(job) for job in jobs]
        budget.log_plan(order, "the grid")
        returns = [
            budget.launch(job, lambda j, i=i: self.launcher.launch([j], initial_job_idx=i))
            for i, job in enumerate(jobs)
        ]
        callback.TALLY.budget = budget.outcome(budget.refused, blocks_line([budget.job(job) for job in jobs]))
        return [r for r in returns if r is not None]

    def split_arguments(self, overrides: List[Override], max_batch_size: Optional[int]) -> List[List[List[str]]]:
        """The basic sweeper's jobs, shuffled within blocks, in batches of `max_batch_size`."""
        (jobs,) = BasicSweeper.split_arguments(overrides, None)
        if self._shuffle():
            jobs = shuffle_within_blocks(jobs)
        if max_batch_size is None:
            return [jobs]
        it = iter(jobs)
        return [chunk for chunk in iter(lambda: list(itertools.islice(it, max_batch_size)), [])]

    def _shuffle(self) -> bool:
        """sweep.shuffle, true unless set."""
        sweep: Any = self.config.get("sweep") if self.config is not None else None
        return True if sweep is None else bool(sweep.get("shuffle", True))
