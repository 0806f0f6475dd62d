"""What a race says and keeps: its runs read back from MLflow, each look printed and logged as a row of
an MLflow run of its own (wif.kind=race), the final possibly-fastest sets as that run's tags."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Dict, List

import pandas as pd
from mlflow.entities import Param

from wif.measure.lifetime import owner_gone, owner_tags
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.report import runs as runs_io
from wif.report.race import FractionState, RaceRules
from wif.report.verdicts import slower_by

log = logging.getLogger("wif")


class RaceLog:
    def __init__(
        self,
        uri: str,
        experiment: str,
        race_id: str,
        rules: RaceRules,
        n_cells: int,
        twins: Dict[str, List[str]] | None = None,
    ) -> None:
        """`n_cells`: the fixed grid's cells, merged ones included; `twins`: per raced setting, the settings
        that run the same code on this CPU and race as it."""
        self.tracker = Tracker(uri, experiment)
        self.experiment, self.race_id, self.rules, self.n_cells = experiment, race_id, rules, n_cells
        self.twins = twins or {}
        self.value = runs_io.MEDIAN
        self.rows: list[dict] = []
        self._close_stale()
        tags = {"wif.kind": "race", "wif.race_id": race_id, **owner_tags()}
        if self.twins:  # 'pin=baseline pin_nb=baseline': who ran as whom
            tags["wif.race.same_as"] = " ".join(f"{t}={s}" for s, merged in self.twins.items() for t in merged)
        self.run_id = self.tracker.client.create_run(
            self.tracker.experiment_id, run_name=f"race-{race_id[:8]}", tags=tags
        ).info.run_id
        if self.twins:
            log.info(
                "Race: every job runs on a CPU, where pin_memory and non_blocking do nothing, so these options "
                "run the same code: %s (race.merge_identical=false races each anyway)",
                "; ".join(f"{', '.join(merged)} race as {setting}" for setting, merged in self.twins.items()),
            )
        self.tracker.client.log_batch(
            self.run_id,
            params=[
                Param(k, str(v))
                for k, v in (
                    ("race.min_blocks", rules.min_blocks),
                    ("race.max_blocks", rules.max_blocks),
                    ("race.margin", rules.margin),
                    ("race.confidence", rules.confidence),
                    ("race.cells", n_cells),
                )
            ],
        )

    def usable_runs(self) -> pd.DataFrame:
        """The race's finished, uncontended training runs (the report's default selection)."""
        try:
            runs = runs_io.load_runs(
                self.tracker.client, self.experiment, runs_io.RunFilter(tags={"wif.race_id": self.race_id})
            )
        except runs_io.ReportInputError:  # no run finished yet
            return pd.DataFrame(columns=["loader", "fraction", "block", self.value, "time_total_s"])
        ok = (runs_io.exclusion_reasons(runs, self.value) == "") & ~runs["contended"]
        return runs[ok]

    def look(self, blocks: int, states: Dict[float, FractionState], runs: pd.DataFrame, wall_s: float) -> None:
        fixed = self.n_cells * self.rules.max_blocks
        log.info(
            "Race, look after block %d (each look at %.2f%% confidence): %d runs so far, %.0f%% of the "
            "fixed grid's %d; %.0f s of run time, %.0f s wall",
            blocks,
            100 * self.rules.look_confidence,
            len(runs),
            100 * len(runs) / fixed,
            fixed,
            runs["time_total_s"].sum(),
            wall_s,
        )
        for fr, st in sorted(states.items()):
            dropped = ", ".join(
                f"{n} (>= {slower_by(x)} slower)" for n, x in sorted(st.dropped.items(), key=lambda i: -i[1])
            )
            log.info(
                "  fraction %g: %s %s%s%s",
                fr,
                "settled:" if st.settled else "in the race:",
                self._named(st.alive),
                f" ({st.settled})" if st.settled else "",
                f"; dropped: {dropped}" if dropped else "",
            )
            self.rows.append(
                {
                    "block": blocks,
                    "fraction": fr,
                    "alive": " ".join(st.alive),
                    "dropped": " ".join(st.dropped),
                    "settled": st.settled,
                    "runs": len(runs),
                    "fixed_grid_runs": fixed,
                    "run_time_s": runs["time_total_s"].sum(),
                    "wall_s": wall_s,
                }
            )

    def finish(self, states: Dict[float, FractionState], budget: Dict[str, str] | None = None) -> None:
        """The looks as looks.csv, the possibly-fastest set of each fraction as tags; a budgeted race's outcome
        too (wif.budget.*: what ended it, what finishing would cost)."""
        self._log_looks()
        # Why each fraction ended too: a longer race (more blocks) would have stopped there only if it settled.
        unsettled = "the time budget ended first (sweep.budget_min)" if budget else "runs ran out"
        tags = dict(budget or {})
        for fr, st in states.items():
            tags[f"wif.race.fastest.f{fr:g}"] = " ".join(st.alive)
            tags[f"wif.race.ended.f{fr:g}"] = st.settled or unsettled
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
        """A race stopped before its end: the looks so far kept, the record KILLED (interrupted) or FAILED
        rather than left RUNNING. Its runs stay in the store: the same command resumes the race."""
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
        if not self.rows:
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "looks.csv"
            pd.DataFrame(self.rows).to_csv(path, index=False)
            self.tracker.client.log_artifact(self.run_id, str(path))

    def _close_stale(self) -> None:
        """An earlier record of this race left RUNNING by a SIGKILLed sweep becomes KILLED
        (see wif.measure.lifetime)."""
        stale = self.tracker.client.search_runs(
            [self.tracker.experiment_id],
            f"tags.`wif.kind` = 'race' and tags.`wif.race_id` = '{self.race_id}' and attributes.status = 'RUNNING'",
        )
        for run in stale:
            if owner_gone(run.data.tags):
                self.tracker.end_run(run.info.run_id, KILLED)
