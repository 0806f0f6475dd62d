"""What a race says and keeps: its runs read back from MLflow, and its record.

Each look is printed and logged as a row of an MLflow run of its own (wif.kind=race). The final
possibly-fastest sets are that run's tags.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Dict, List

import pandas as pd
from mlflow.entities import Param

from wif.decide.race import FractionState, RaceRules
from wif.measure import names
from wif.measure.lifetime import owner_gone, owner_tags
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.report import runs as runs_io
from wif.report.verdicts import slower_by

log = logging.getLogger("wif")
SAME_AS = "wif.race.same_as"  # 'pin=baseline pin_nb=baseline': who ran as whom
FASTEST = "wif.race.fastest"  # .f<fraction>: the possibly-fastest set
ENDED = "wif.race.ended"  # .f<fraction>: why the fraction's race ended


class RaceLog:
    """A race's record: an MLflow run of its own (wif.kind=race) that holds its looks and its outcome."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        race_id: str,
        rules: RaceRules,
        n_cells: int,
        twins: Dict[str, List[str]] | None = None,
    ) -> None:
        """Close a stale record of this race, then open this one with its rules as params.

        Args:
            uri: the MLflow store.
            experiment: the experiment the race's runs go to.
            race_id: the race's id, tag wif.race_id on the record and on each run.
            rules: the race's rules, logged as params.
            n_cells: the fixed grid's cells, merged ones included.
            twins: per raced setting, the settings that run the same code on this CPU and race as it.
        """
        self.tracker = Tracker(uri, experiment)
        self.experiment, self.race_id, self.rules, self.n_cells = experiment, race_id, rules, n_cells
        self.twins = twins or {}
        self.value = runs_io.MEDIAN
        self.rows: list[dict] = []
        self._close_stale()
        self.run_id = self._open()
        if self.twins:
            merged = "; ".join(f"{', '.join(m)} race as {setting}" for setting, m in self.twins.items())
            log.info(
                "Race: every job runs on a CPU, where pin_memory and non_blocking do nothing, so these options "
                "run the same code: %s (race.merge_identical=false races each anyway)",
                merged,
            )
        rule_params = (
            ("race.min_blocks", rules.min_blocks),
            ("race.max_blocks", rules.max_blocks),
            ("race.margin", rules.margin),
            ("race.confidence", rules.confidence),
            ("race.cells", n_cells),
        )
        self.tracker.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in rule_params])

    def _open(self) -> str:
        """The record's run, tagged with the race and who ran it; twins as 'pin=baseline pin_nb=baseline'."""
        tags = {names.TAG_KIND: "race", names.TAG_RACE_ID: self.race_id, **owner_tags()}
        if self.twins:
            tags[SAME_AS] = " ".join(f"{t}={s}" for s, merged in self.twins.items() for t in merged)
        run_name = f"race-{self.race_id[:8]}"
        return self.tracker.client.create_run(self.tracker.experiment_id, run_name=run_name, tags=tags).info.run_id

    def usable_runs(self) -> pd.DataFrame:
        """The race's finished, uncontended training runs (the report's default selection)."""
        try:
            runs = runs_io.load_runs(
                self.tracker.client, self.experiment, runs_io.RunFilter(tags={names.TAG_RACE_ID: self.race_id})
            )
        except runs_io.ReportInputError:  # no run finished yet
            return pd.DataFrame(columns=["loader", "fraction", "block", self.value, names.TIME_TOTAL_S])
        ok = (runs_io.exclusion_reasons(runs, self.value) == "") & ~runs["contended"]
        return runs[ok]

    def look(self, blocks: int, states: Dict[float, FractionState], runs: pd.DataFrame, wall_s: float) -> None:
        """Say a look after `blocks` blocks, one line a fraction, and keep it as rows of looks.csv.

        Args:
            blocks: the blocks done.
            states: each fraction's state after this look.
            runs: the race's usable runs so far.
            wall_s: the race's wall time so far.
        """
        fixed = self.n_cells * self.rules.max_blocks
        run_time_s = runs[names.TIME_TOTAL_S].sum()
        log.info(
            f"Race, look after block {blocks} (each look at {100 * self.rules.look_confidence:.2f}% confidence): "
            f"{len(runs)} runs so far, {100 * len(runs) / fixed:.0f}% of the fixed grid's {fixed}; "
            f"{run_time_s:.0f} s of run time, {wall_s:.0f} s wall"
        )
        for fr, st in sorted(states.items()):
            log.info(self._fraction_line(fr, st))
            self.rows.append(
                {
                    "block": blocks,
                    "fraction": fr,
                    "alive": " ".join(st.alive),
                    "dropped": " ".join(st.dropped),
                    "settled": st.settled,
                    "runs": len(runs),
                    "fixed_grid_runs": fixed,
                    "run_time_s": run_time_s,
                    "wall_s": wall_s,
                }
            )

    def _fraction_line(self, fraction: float, st: FractionState) -> str:
        """'  fraction 0.1: in the race: a, b; dropped: c (>= 1.25x slower)': where one fraction stands."""
        slowest_first = sorted(st.dropped.items(), key=lambda i: -i[1])
        dropped = ", ".join(f"{n} (>= {slower_by(x)} slower)" for n, x in slowest_first)
        where = "settled:" if st.settled else "in the race:"
        why = f" ({st.settled})" if st.settled else ""
        return f"  fraction {fraction:g}: {where} {self._named(st.alive)}{why}" + (
            f"; dropped: {dropped}" if dropped else ""
        )

    def finish(self, states: Dict[float, FractionState], budget: Dict[str, str] | None = None) -> None:
        """Keep looks.csv, each fraction's possibly-fastest set and why it ended, and a budget's wif.budget.* tags."""
        self._log_looks()
        # why each fraction ended: a longer race would have stopped there only if it settled
        unsettled = "the time budget ended first (sweep.budget_min)" if budget else "runs ran out"
        tags = dict(budget or {})
        for fr, st in states.items():
            tags[f"{FASTEST}.f{fr:g}"] = " ".join(st.alive)
            tags[f"{ENDED}.f{fr:g}"] = st.settled or unsettled
        self.tracker.set_tags(self.run_id, tags)
        self.tracker.end_run(self.run_id, FINISHED)
        for fr, st in sorted(states.items()):
            log.info(
                "Race done: at fraction %g the possibly-fastest set is %s%s",
                fr,
                self._named(st.alive),
                f" ({st.settled})" if st.settled else "",
            )

    def abandon(self, interrupted: bool) -> None:
        """Close a race stopped early: looks kept, record KILLED or FAILED; its runs stay, so the race can resume."""
        self._log_looks()
        self.tracker.end_run(self.run_id, KILLED if interrupted else FAILED)
        log.warning(
            "Race %s: stopped %s; the same command resumes it (finished runs are kept and skipped)",
            self.race_id[:8],
            "by an interrupt" if interrupted else "by an error",
        )

    def _named(self, settings: List[str]) -> str:
        """'baseline (with pin, pin_nb), bg': a raced setting with those that ran as it."""
        return ", ".join(f"{n} (with {', '.join(self.twins[n])})" if n in self.twins else n for n in settings)

    def _log_looks(self) -> None:
        """Keep the looks so far as the record's looks.csv."""
        if not self.rows:
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "looks.csv"
            pd.DataFrame(self.rows).to_csv(path, index=False)
            self.tracker.client.log_artifact(self.run_id, str(path))

    def _close_stale(self) -> None:
        """Mark KILLED an earlier record of this race that a SIGKILLed sweep left RUNNING (wif.measure.lifetime)."""
        stale = self.tracker.client.search_runs(
            [self.tracker.experiment_id],
            f"tags.`{names.TAG_KIND}` = 'race' and tags.`{names.TAG_RACE_ID}` = '{self.race_id}' "
            "and attributes.status = 'RUNNING'",
        )
        for run in stale:
            if owner_gone(run.data.tags):
                self.tracker.end_run(run.info.run_id, KILLED)
