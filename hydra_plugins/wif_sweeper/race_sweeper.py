"""`hydra/sweeper=race`: the grid run in blocks, dropping after each block the settings already clearly
slower than those that may be fastest (wif.decide.race), until each fraction is settled or race.max_blocks.

Each block is one repeat of every cell still in the race, in the order `sweep.shuffle` gives, launched
through whatever launcher is configured. The race reads its runs back from MLflow (tag wif.race_id), so
the same command again recomputes every look from the store and launches only what is missing: finished
runs are skipped by the job itself. Hydra finds it in the `hydra_plugins` namespace package. Its cells,
named and merged, are wif.sweep.race_cells'.
"""

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from wif.config.exits import EXIT_BAD_SETTING, EXIT_INTERRUPTED
from wif.sweep import callback
from wif.sweep.budget import States, budget_tags, decided_line, eval_overrides, plan_fractions, undone_jobs
from wif.sweep.callback import BLOCK_KEY, block_of, shuffle_within_blocks
from wif.sweep.race_cells import (
    Overrides,
    Race,
    RacedCell,
    cpu_only,
    fractions,
    merged_settings,
    race_id_of,
    same_names,
    single_settings,
    twin_cells,
    what_runs_on_cpu,
)

# NOTE [ Hydra imports every plugin ]
# Hydra imports every plugin at each start, so the race's statistics (pandas, scipy) and the job machinery
# are imported once a race starts. Hydra's loader does not register this module either: its dataclass
# cannot take postponed annotations, so this module has no `from __future__ import annotations`.
if TYPE_CHECKING:  # See NOTE [ Hydra imports every plugin ]
    from wif.decide.race import RaceRules

log = logging.getLogger("wif")


@dataclass
class RaceSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.wif_sweeper.race_sweeper.RaceSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="race", node=RaceSweeperConf, provider="wif")


class RaceSweeper(BasicSweeper):
    def sweep(self, arguments: List[str]) -> Any:
        """Name the cells, refuse a race that cannot run, merge twins, price it if budgeted, then race."""
        from wif.decide.race import RaceRules
        from wif.sweep.race_log import RaceLog  # See NOTE [ Hydra imports every plugin ]

        cfg = self.config
        c = cfg.race
        rules = RaceRules(min_blocks=c.min_blocks, max_blocks=c.max_blocks, margin=c.margin, confidence=c.confidence)
        cells = self._grid_cells([*arguments, *eval_overrides(cfg, arguments)])
        names, on_cpu = self._name_cells(cells)
        refuse(rules.problems() + single_settings(names) + same_names(names))
        twin_of = twin_cells(cells, names, on_cpu) if c.merge_identical and cpu_only(cfg) else {}
        twins = merged_settings(twin_of, names)
        raced = [cell for cell in cells if cell not in twin_of]
        names = {cell: names[cell] for cell in raced}
        if twin_of:
            refuse_merged(single_settings(names), twins)
        race_id = race_id_of(raced, rules, twin_of)
        shuffle = bool(OmegaConf.select(cfg, "sweep.shuffle", default=True))
        callback.TALLY.total = len(raced) * rules.max_blocks  # at most: the progress label counts against it
        self._launched, budget = 0, None
        if OmegaConf.select(cfg, "sweep.budget_min") is not None or cfg.sweep.get("probe_only"):
            budget = self._budget(raced, rules, race_id)  # priced (probed) before the race's record exists
            if cfg.sweep.get("probe_only"):
                callback.TALLY.total = 0
                return []
        record = RaceLog(
            uri=cfg.tracking.uri,
            experiment=cfg.tracking.experiment,
            race_id=race_id,
            rules=rules,
            n_cells=len(cells),
            twins=twins,
        )
        race = Race(cells=raced, names=names, rules=rules, race_id=race_id, shuffle=shuffle, record=record)
        return self._run_race(race, budget)

    def _grid_cells(self, arguments: List[str]) -> List[Overrides]:
        """The grid's cells, in its order: each job's overrides without its block."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (grid,) = BasicSweeper.split_arguments(parser.parse_overrides(self._parse_config() + arguments), None)
        return list(dict.fromkeys(tuple(o for o in job if block_of([o]) == "") for job in grid))

    def _run_race(self, race: Race, budget: Any) -> List[Any]:
        """The race to its end, its record finished; stopped early, its record KILLED or FAILED."""
        from wif.decide.race import FractionState

        states = {
            fr: FractionState(fr, sorted({s for s, f in race.names.values() if f == fr}))
            for fr in fractions(race.names)
        }
        try:
            if budget is None:
                states, returns = self._run_blocks(race, states)
            else:
                states, returns = self._race_in_budget(race, states, budget)
        except BaseException as stop:  # Ctrl-C, SIGTERM (a job exits 130) or a crash: the record must not stay RUNNING
            interrupted = isinstance(stop, KeyboardInterrupt) or getattr(stop, "code", None) == EXIT_INTERRUPTED
            race.record.abandon(interrupted)
            if isinstance(stop, KeyboardInterrupt):  # between jobs, e.g. during a look: exit as a job would
                raise SystemExit(EXIT_INTERRUPTED) from None
            raise
        race.record.finish(states, budget_tags(budget, self._undone) if budget else None)
        return returns

    def _budget(self, cells: Sequence[Overrides], rules: "RaceRules", race_id: str) -> Any:
        """sweep.budget_min: every job the race may run priced (a probe first where the store has no price)."""
        from wif.sweep.sweep_budget import SweepBudget

        jobs = [
            list(cell) + [f"{BLOCK_KEY}={block}", f"race.id={race_id}"]
            for block in range(rules.max_blocks)
            for cell in cells
        ]
        budget = SweepBudget(self.config, jobs)
        budget.price_with_probe(lambda batch: self.launcher.launch(batch, initial_job_idx=0))
        return budget

    def _race_in_budget(self, race: Race, states: States, budget: Any) -> Tuple[States, List[Any]]:
        """Race the fractions whose first look fits first, cheapest first, each to its end; then the next.

        wif.sweep.budget.choose_fractions picks them. A job starts only if it can finish in time.
        """
        returns: List[Any] = []
        tried: set = set()
        while True:
            waiting = [fr for fr, st in states.items() if not st.settled and fr not in tried]
            if not waiting:
                break
            focus = plan_fractions(rules=race.rules, states=states, budget=budget, waiting=waiting)
            states, more = self._run_blocks(race, states, budget, set(focus))
            returns += more
            tried.update(focus)
        self._undone = undone_jobs(race.rules, states, budget)
        callback.TALLY.budget = budget.outcome(self._undone, decided_line(states))
        return states, returns

    def _run_blocks(
        self, race: Race, states: States, budget: Any = None, only: Optional[Set[float]] = None
    ) -> Tuple[States, List[Any]]:
        """Run block after block of the cells still in the race, a look after each from race.min_blocks on.

        Under a budget each job starts only if it can finish in time.

        Args:
            race: the race.
            states: each fraction's state.
            budget: the sweep's budget; None for none.
            only: the fractions to race now; None for all.
        """
        t0, returns = time.monotonic(), []
        for block in range(race.rules.max_blocks):
            alive = {fr: set(st.alive) for fr, st in states.items() if not st.settled and (not only or fr in only)}
            if not alive:
                break
            jobs = self._block_jobs(race, alive, block)
            if budget is None:
                returns.append(self.launcher.launch(jobs, initial_job_idx=self._launched))
                self._launched += len(jobs)
            else:
                ran = self._launch_in_budget(jobs, budget)
                returns += ran
                if not ran and any(not budget.job(job).done for job in jobs):
                    break  # no job of this block could start in time: the next block's cost the same
            states = look_at_block(race, states, alive, block, t0)
        return states, returns

    def _block_jobs(self, race: Race, alive: Dict[float, Set[str]], block: int) -> List[List[str]]:
        """One block's jobs: every cell whose setting is still in the race at its fraction, in the race's order."""
        jobs = [
            list(cell) + [f"{BLOCK_KEY}={block}", f"race.id={race.race_id}"]
            for cell in race.cells
            if race.names[cell].setting in alive.get(race.names[cell].fraction, set())
        ]
        jobs = shuffle_within_blocks(jobs) if race.shuffle else jobs
        self.validate_batch_is_legal(jobs)
        return jobs

    def _launch_in_budget(self, jobs: List[List[str]], budget: Any) -> List[Any]:
        """One job at a time, each only if it can finish in what is left; finished ones skipped unlaunched."""
        return [r for r in (budget.launch(job, self._launch_one) for job in jobs) if r is not None]

    def _launch_one(self, job: List[str]) -> Any:
        self._launched += 1
        return self.launcher.launch([job], initial_job_idx=self._launched - 1)

    def _name_cells(self, cells: Sequence[Overrides]) -> Tuple[Dict[Overrides, RacedCell], Dict[Overrides, str]]:
        """Each cell's setting and fraction, and what its run does on a CPU, from its composed config.

        Cells with the same CPU key run the same code there.
        """
        from wif.sweep.identity import cell_of

        loader = self.hydra_context.config_loader
        names, on_cpu = {}, {}
        for cell in cells:
            composed = loader.load_sweep_config(master_config=self.config, sweep_overrides=list(cell))
            with open_dict(composed):
                del composed["hydra"]
            conf = OmegaConf.to_object(composed)
            named = cell_of(conf)
            names[cell] = RacedCell(named.setting, float(named.fraction))
            on_cpu[cell] = what_runs_on_cpu(conf)
        return names, on_cpu


def refuse(problems: List[str]) -> None:
    """Exit 2 on a race that cannot run, one line per problem."""
    if problems:
        for problem in problems:
            log.error("Bad setting: %s", problem)
        raise SystemExit(EXIT_BAD_SETTING)


def refuse_merged(problems: List[str], twins: Dict[str, List[str]]) -> None:
    """Exit 2 on a fraction left with one setting once the cells a CPU runs the same race as one."""
    if not problems:
        return
    merged = "; ".join(f"{', '.join(m)} as {s}" for s, m in twins.items())
    for problem in problems:
        log.error(
            "Bad setting: %s, once the options that run the same code on this CPU race as one (%s; "
            "race.merge_identical=false races them apart)",
            problem,
            merged,
        )
    raise SystemExit(EXIT_BAD_SETTING)


def look_at_block(race: Race, states: States, alive: Dict[float, Set[str]], block: int, t0: float) -> States:
    """After a block: each fraction still racing looked at, the look recorded from race.min_blocks on.

    Args:
        race: the race.
        states: each fraction's state before the look.
        alive: the fractions still racing, each with its settings.
        block: the block just done, from 0.
        t0: when the blocks started, on the monotonic clock.
    """
    from wif.decide.race import look

    runs = race.record.usable_runs()
    done = block + 1
    states = dict(states)
    for fr in alive:
        at = runs[runs["fraction"] == fr]
        states[fr] = look(state=states[fr], runs=at, value=race.record.value, rules=race.rules, blocks_done=done)
    if done >= race.rules.min_blocks:
        race.record.look(blocks=done, states=states, runs=runs, wall_s=time.monotonic() - t0)
    else:
        log.info(
            f"Race: block {done} of at least {race.rules.min_blocks} done, {len(runs)} runs; "
            f"the first look comes after block {race.rules.min_blocks}"
        )
    return states
