"""`hydra/sweeper=race`: the grid run in blocks, dropping after each block the settings already clearly
slower than those that may be fastest (wif.report.race), until each fraction is settled or race.max_blocks.

Each block is one repeat of every cell still in the race, in the order `sweep.shuffle` gives, launched
through whatever launcher is configured. The race reads its runs back from MLflow (tag wif.race_id), so
the same command again recomputes every look from the store and launches only what is missing: finished
runs are skipped by the job itself. Hydra finds it in the `hydra_plugins` namespace package.
"""

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from wif.config.exits import EXIT_BAD_SETTING, EXIT_INTERRUPTED
from wif.sweep import callback
from wif.sweep.blocks import BLOCK_KEY, block_of, shuffle_within_blocks

if TYPE_CHECKING:  # Hydra imports every plugin at each start: the race's statistics (pandas, scipy) wait for a race
    # (and Hydra's loader does not register the module, so its dataclass cannot take postponed annotations)
    from wif.report.race import FractionState, RaceRules

log = logging.getLogger("wif")
Cell = Tuple[str, ...]  # a cell's overrides, without the block


@dataclass
class RaceSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.wif_sweeper.race_sweeper.RaceSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="race", node=RaceSweeperConf, provider="wif")


class RaceSweeper(BasicSweeper):
    def sweep(self, arguments: List[str]) -> Any:
        from wif.report.race import FractionState, RaceRules
        from wif.sweep.race_log import RaceLog  # the job machinery: imported once the sweep starts

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (grid,) = BasicSweeper.split_arguments(parser.parse_overrides(self._parse_config() + arguments), None)
        cells = list(dict.fromkeys(tuple(o for o in job if block_of([o]) == "") for job in grid))
        cfg = self.config
        rules = RaceRules(cfg.race.min_blocks, cfg.race.max_blocks, cfg.race.margin, cfg.race.confidence)
        names, runs_as = self._name_cells(cells)
        problems = rules.problems() + _single_settings(names) + _same_names(names)
        if problems:
            for problem in problems:
                log.error("Bad setting: %s", problem)
            raise SystemExit(EXIT_BAD_SETTING)
        same_as = _same_as(cells, names, runs_as) if cfg.race.merge_identical and _cpu_only(cfg) else {}
        twins, fixed_cells = _twins(same_as, names), len(cells)
        cells = [cell for cell in cells if cell not in same_as]
        names = {cell: names[cell] for cell in cells}
        if same_as and _single_settings(names):
            for problem in _single_settings(names):
                log.error(
                    "Bad setting: %s, once the options that run the same code on this CPU race as one (%s; "
                    "race.merge_identical=false races them apart)",
                    problem,
                    "; ".join(f"{', '.join(m)} as {s}" for s, m in twins.items()),
                )
            raise SystemExit(EXIT_BAD_SETTING)
        key = [sorted(cells), [rules.min_blocks, rules.max_blocks, rules.margin, rules.confidence]]
        key += [sorted(same_as)] if same_as else []  # merging or not is another race
        race_id = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
        shuffle = bool(OmegaConf.select(cfg, "sweep.shuffle", default=True))
        callback.TALLY.total = len(cells) * rules.max_blocks  # at most: the progress label counts against it
        states = {fr: FractionState(fr, sorted({s for s, f in names.values() if f == fr})) for fr in _fractions(names)}
        self._launched, budget = 0, None
        if OmegaConf.select(cfg, "sweep.budget_min") is not None or cfg.sweep.get("probe_only"):
            budget = self._budget(cells, rules, race_id)  # priced (probed) before the race's record exists
            if cfg.sweep.get("probe_only"):
                callback.TALLY.total = 0
                return []
        record = RaceLog(cfg.tracking.uri, cfg.tracking.experiment, race_id, rules, fixed_cells, twins)
        try:
            if budget is None:
                states, returns = self._run_blocks(cells, names, states, rules, race_id, shuffle, record)
            else:
                states, returns = self._race_in_budget(cells, names, states, rules, race_id, shuffle, record, budget)
        except BaseException as stop:  # Ctrl-C, SIGTERM (a job exits 130) or a crash: the record must not stay RUNNING
            interrupted = isinstance(stop, KeyboardInterrupt) or getattr(stop, "code", None) == EXIT_INTERRUPTED
            record.abandon(interrupted)
            if isinstance(stop, KeyboardInterrupt):  # between jobs, e.g. during a look: exit as a job would
                raise SystemExit(EXIT_INTERRUPTED) from None
            raise
        record.finish(states, budget_tags(budget, self._undone) if budget else None)
        return returns

    def _budget(self, cells: Sequence[Cell], rules: "RaceRules", race_id: str) -> Any:
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

    def _race_in_budget(
        self,
        cells: Sequence[Cell],
        names: Dict[Cell, Tuple[str, float]],
        states: "Dict[float, FractionState]",
        rules: "RaceRules",
        race_id: str,
        shuffle: bool,
        record: Any,
        budget: Any,
    ) -> "Tuple[Dict[float, FractionState], List[Any]]":
        """The fractions whose first look fits go first, cheapest first (wif.sweep.budget.choose_fractions),
        each raced to its end, a job started only if it can finish in time; then the next fractions."""
        from wif.sweep.budget import choose_fractions, minutes

        returns: List[Any] = []
        tried: set = set()
        while True:
            waiting = [fr for fr, st in states.items() if not st.settled and fr not in tried]
            if not waiting:
                break
            first_look = {fr: budget.undone_s(_race_jobs(budget, states, fr, rules.min_blocks)) for fr in waiting}
            focus = choose_fractions(first_look, budget.left_s())
            log.info(
                "Budget plan: fractions %s now (to their first look, after block %d: %s); %s",
                ", ".join(f"{fr:g}" for fr in focus),
                rules.min_blocks,
                ", ".join(minutes(first_look[fr]) for fr in focus),
                "; ".join(
                    f"{fr:g} waits ({minutes(first_look[fr])} to its first look)" for fr in waiting if fr not in focus
                )
                or "none waits",
            )
            budget.log_plan(
                [j for fr in focus for j in _race_jobs(budget, states, fr, rules.max_blocks)],
                f"the race at {', '.join(f'{fr:g}' for fr in focus)} (no setting dropped: at most)",
            )
            states, more = self._run_blocks(cells, names, states, rules, race_id, shuffle, record, budget, set(focus))
            returns += more
            tried.update(focus)
        undone = [
            j for fr, st in states.items() if not st.settled for j in _race_jobs(budget, states, fr, rules.max_blocks)
        ]
        undone += [j for j in budget.refused if j not in undone]  # in a settled fraction too: its last blocks
        self._undone = [j for j in undone if not budget.jobs[j.key].done]
        decided = "; ".join(
            f"f{fr:g} {f'decided ({st.settled})' if st.settled else 'not decided'}: possibly "
            f"fastest {', '.join(st.alive)}"
            for fr, st in sorted(states.items())
        )
        callback.TALLY.budget = budget.outcome(self._undone, decided)
        return states, returns

    def _run_blocks(
        self,
        cells: Sequence[Tuple[str, ...]],
        names: Dict[Tuple[str, ...], Tuple[str, float]],
        states: "Dict[float, FractionState]",
        rules: "RaceRules",
        race_id: str,
        shuffle: bool,
        record: Any,
        budget: Any = None,
        only: Any = None,
    ) -> "Tuple[Dict[float, FractionState], List[Any]]":
        """Block after block of the cells still in the race (of the fractions `only`, if given), a look after
        each from race.min_blocks on; under a budget each job starts only if it can finish in time."""
        from wif.report import race

        t0, returns = time.monotonic(), []
        for block in range(rules.max_blocks):
            alive = {fr: set(st.alive) for fr, st in states.items() if not st.settled and (not only or fr in only)}
            if not alive:
                break
            jobs = [
                list(cell) + [f"{BLOCK_KEY}={block}", f"race.id={race_id}"]
                for cell in cells
                if names[cell][0] in alive.get(names[cell][1], set())
            ]
            jobs = shuffle_within_blocks(jobs) if shuffle else jobs
            self.validate_batch_is_legal(jobs)
            if budget is None:
                returns.append(self.launcher.launch(jobs, initial_job_idx=self._launched))
                self._launched += len(jobs)
            else:
                ran = self._launch_in_budget(jobs, budget)
                returns += ran
                if not ran and any(not budget.job(job).done for job in jobs):
                    break  # no job of this block could start in time: the next block's cost the same
            runs = record.usable_runs()
            for fr in alive:
                states[fr] = race.look(states[fr], runs[runs["fraction"] == fr], record.value, rules, block + 1)
            if block + 1 >= rules.min_blocks:
                record.look(block + 1, states, runs, time.monotonic() - t0)
            else:
                log.info(
                    "Race: block %d of at least %d done, %d runs; the first look comes after block %d",
                    block + 1,
                    rules.min_blocks,
                    len(runs),
                    rules.min_blocks,
                )
        return states, returns

    def _launch_in_budget(self, jobs: List[List[str]], budget: Any) -> List[Any]:
        """One job at a time, each only if it can finish in what is left; finished ones skipped unlaunched."""

        def launch(job: List[str]) -> Any:
            self._launched += 1
            return self.launcher.launch([job], initial_job_idx=self._launched - 1)

        return [r for r in (budget.launch(job, launch) for job in jobs) if r is not None]

    def _name_cells(self, cells: Sequence[Cell]) -> Tuple[Dict[Cell, Tuple[str, float]], Dict[Cell, str]]:
        """Each cell's setting (the report's row name) and fraction, and what its run does on a CPU (a key:
        cells with the same key run the same code there), from its composed configuration."""
        from wif.sweep.job import cell_name

        loader = self.hydra_context.config_loader
        names, on_cpu = {}, {}
        for cell in cells:
            composed = loader.load_sweep_config(master_config=self.config, sweep_overrides=list(cell))
            with open_dict(composed):
                del composed["hydra"]
            conf = OmegaConf.to_object(composed)
            setting, _, fraction = cell_name(conf).rpartition("@")
            names[cell] = (setting, float(fraction))
            on_cpu[cell] = _what_runs_on_cpu(conf)
        return names, on_cpu


def _race_jobs(budget: Any, states: "Dict[float, FractionState]", fraction: float, blocks: int) -> List[Any]:
    """The budget's jobs of a fraction's settings still in the race, blocks 0..blocks-1, block-major."""
    alive = set(states[fraction].alive)
    return sorted(
        (j for j in budget.jobs.values() if j.fraction == fraction and j.setting in alive and j.block < blocks),
        key=lambda j: j.block,
    )


def budget_tags(budget: Any, undone: List[Any]) -> Dict[str, str]:
    """The budget's outcome on the race's record: what ended it, and what finishing would cost."""
    return {
        "wif.budget.min": f"{budget.budget_s / 60:g}",
        "wif.budget.probe_s": f"{budget.probe_s:.1f}",
        "wif.budget.ended": callback.TALLY.budget,
        "wif.budget.undone_min": f"{budget.undone_s(undone) / 60:.2f}",
        "wif.budget.by_budget": str(bool(budget.refused)).lower(),
    }


def _same_names(names: Dict[Cell, Tuple[str, float]]) -> List[str]:
    """Cells the race would pool as one setting: they differ in something other than the loader option and
    the fraction (a model, a precision, a batch size), and the race compares loader settings alone."""
    seen: Dict[Tuple[str, float], Cell] = {}
    for cell, name in names.items():
        if name in seen:
            differ = sorted(set(cell) ^ set(seen[name]))
            return [
                f"a race compares loader settings of one workload, but {' / '.join(differ)} would race as the "
                f"same setting {name[0]} at fraction {name[1]:g}. Race each of them separately "
                "(hydra/sweeper=blocks sweeps them all, and the report keeps each model in its own testbed)."
            ]
        seen[name] = cell
    return []


def _what_runs_on_cpu(conf: Any) -> str:
    """The cell's configuration as a CPU runs it: pin_memory and non_blocking do nothing without CUDA, and
    an option's name is only a name (gpu_resident differs by its transfer, not by its name)."""
    from wif.sweep.job import run_identity

    job = run_identity(conf, "cpu")
    job.pop(BLOCK_KEY)
    job["loader"] = {**job["loader"], "name": "", "pin_memory": False}
    job["transfer"] = {**job["transfer"], "non_blocking": False}
    return json.dumps(job, sort_keys=True, default=str)


def _cpu_only(cfg: Any) -> bool:
    """Whether every job of this sweep runs on a CPU: device=cpu, or jobs run here and here is no CUDA.
    A submitting launcher (slurm, local_gpus) runs them elsewhere: nothing is assumed."""
    from wif.run.supervise import cuda_present
    from wif.sweep.cluster import SUBMITTING_LAUNCHERS

    device = OmegaConf.select(cfg, "device", default="auto")
    if getattr(device, "name", device) == "cpu":
        return True
    launcher = str(OmegaConf.select(cfg, "hydra.runtime.choices.hydra/launcher", default="basic") or "basic")
    if launcher in SUBMITTING_LAUNCHERS:
        return False
    return not cuda_present()


def _same_as(cells: Sequence[Cell], names: Dict[Cell, Tuple[str, float]], on_cpu: Dict[Cell, str]) -> Dict[Cell, Cell]:
    """Cell -> the earlier cell of its fraction whose run would be the same on a CPU; only cells that have one."""
    first: Dict[Tuple[float, str], Cell] = {}
    out = {}
    for cell in cells:
        twin = first.setdefault((names[cell][1], on_cpu[cell]), cell)
        if twin != cell:
            out[cell] = twin
    return out


def _twins(same_as: Dict[Cell, Cell], names: Dict[Cell, Tuple[str, float]]) -> Dict[str, List[str]]:
    """Per raced setting, the settings that race as it ({'baseline': ['pin', 'pin_nb']}), over all fractions."""
    out: Dict[str, List[str]] = {}
    for cell, twin in same_as.items():
        merged = out.setdefault(names[twin][0], [])
        if names[cell][0] not in merged:
            merged.append(names[cell][0])
    return out


def _fractions(names: Dict[Any, Tuple[str, float]]) -> List[float]:
    return sorted({fr for _, fr in names.values()})


def _single_settings(names: Dict[Any, Tuple[str, float]]) -> List[str]:
    """A race needs rivals: a fraction with one setting has nothing to race against."""
    out = []
    for fr in _fractions(names):
        settings = {s for s, f in names.values() if f == fr}
        if len(settings) < 2:
            out.append(
                f"hydra/sweeper=race at data.fraction={fr:g} has one setting ({settings.pop()}): a race needs "
                "at least two; sweep more loader options, or use the default sweeper"
            )
    return out
