"""What a sweep knows about itself: how many jobs it launches, in which order, and how they ended.

Its jobs come in shuffled blocks: NOTE [ Blocks shuffled within ]. Hydra's basic launcher runs every job in
this process, so the tallies live here. The callback prints them at the end and fails on a failed job.
Under a launcher of its own processes (submitit) they are read from the store.
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED
from wif.measure import names

log = logging.getLogger("wif")


@dataclass
class SweepTally:
    """How a sweep's jobs ended, counted as they end."""

    total: Optional[int] = None
    finished: int = 0
    failed: int = 0
    skipped: int = 0
    killed: int = 0
    failures: List[str] = field(default_factory=list)
    started_ms: int = 0  # when the sweep started: every run it created started later
    budget: str = ""  # a budgeted sweep's outcome (wif.sweep.sweep_budget.SweepBudget.outcome): said on the last line

    def reset(self, started_ms: int) -> None:
        """A new sweep's tally, in place: whoever holds TALLY holds the new sweep's."""
        self.__dict__.update(SweepTally(started_ms=started_ms).__dict__)

    def ran_elsewhere(self) -> bool:
        """Jobs were planned but none ended here: a launcher ran them elsewhere, or a budget none."""
        return bool(self.total) and not (self.finished or self.failed or self.killed or self.skipped or self.budget)


def sweep_id(hydra: Any) -> str:
    """A sweep's id (tag wif.sweep_id): its output folder, absolute, since Hydra's relative one may repeat."""
    return os.path.normpath(os.path.join(str(hydra.runtime.cwd or ""), str(hydra.sweep.dir)))


TALLY = SweepTally()  # See NOTE [ Module state ] in wif/__init__.py
# job number -> why a submitting launcher (hydra_plugins/wif_launcher) saw it end without a result
LOST: Dict[int, str] = {}
SEARCH_LIMIT = 50_000  # MLflow's largest page of runs


def tally_from_store(config: DictConfig, since_ms: int, total: int) -> SweepTally:
    """How this sweep's jobs ended, read from their runs: under submitit, a job's tally never reaches this process.

    A job that ended without a result (LOST) is killed, and a run it left RUNNING is closed as KILLED.
    """
    from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker

    tracker = Tracker(str(config.tracking.uri), str(config.tracking.experiment))
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        max_results=SEARCH_LIMIT,
        filter_string=f"tags.`{names.TAG_SWEEP_ID}` = '{sweep_id(config.hydra)}' "
        f"and attributes.start_time >= {since_ms}",
    )
    positions = {_sweep_pos(run) for run in runs}
    done = {_sweep_pos(run) for run in runs if run.info.status == FINISHED}
    t = SweepTally(total=total, skipped=max(0, total - len(positions)), started_ms=since_ms)  # a skipped job: no run
    for job in LOST:
        if job not in positions:  # it ended before its run was opened: killed, not skipped
            t.skipped, t.killed = max(0, t.skipped - 1), t.killed + 1
    for run in runs:
        error = run.data.tags.get(names.TAG_ERROR, "")
        if run.info.status == "RUNNING" and _sweep_pos(run) in LOST:
            error = f"Killed: {LOST[_sweep_pos(run)]}, and its run was left RUNNING"
            tracker.set_tags(run.info.run_id, {names.TAG_ERROR: error})
            tracker.end_run(run.info.run_id, KILLED)
        if run.info.status == FINISHED:
            t.finished += 1
        elif run.info.status == FAILED:
            t.failed += 1
            t.failures.append(f"{run.info.run_name}: {error}")
        elif error.startswith("Duplicate"):  # another process finished the same job first
            t.skipped += 1
        elif _sweep_pos(run) not in done:  # ended unclosed; a SLURM job requeued and finished since is not killed
            t.killed += 1
    return t


def refuse_silent_store(config: DictConfig) -> None:
    """Exit 2, in one line, where the tracking server does not answer: before any job, not after minutes of retries."""
    from wif.config import ConfigError
    from wif.measure.tracking import check_server_answers

    try:
        check_server_answers(str(config.tracking.uri))
    except ConfigError as err:
        log.error("Bad setting: %s; nothing was started.", err)
        raise SystemExit(EXIT_BAD_SETTING) from None


def _sweep_pos(run: Any) -> int:
    """The run's job number in its sweep; -1 when untagged."""
    return int(run.data.tags.get(names.TAG_SWEEP_POS, -1))


def plan_jobs(sweeper_params: Mapping[str, Any], overrides: Sequence[str]) -> List[List[str]]:
    """The jobs Hydra's basic sweeper will launch, in its order: `repeat` first, one pass over all cells each."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the sweeper's own expansion

    params = [f"{k}={v}" for k, v in sweeper_params.items()] + list(overrides)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    (batch,) = BasicSweeper.split_arguments(parser.parse_overrides(params), None)
    return batch


# NOTE [ Blocks shuffled within ]
# With repeat listed first in `hydra.sweeper.params`, Hydra's expansion makes each repeat one block: a pass
# over every cell. A fixed order would put the same cell first in every block, after the same neighbour.
# Warm caches, thermal state or a neighbour's leftover workers would then bias it the same way every block.
# Shuffling within blocks turns that bias into noise the model averages out, as Google Benchmark's random
# interleaving does. The seed comes from the block. So a resumed sweep replays the same order, and its blocks
# stay complete.

BLOCK_KEY = "repeat"


def block_of(job: Sequence[str]) -> str:
    """The job's block: the value of its `repeat=` override ('' for a sweep that does not vary it)."""
    for override in job:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == BLOCK_KEY:
            return value
    return ""


def shuffle_within_blocks(jobs: Sequence[Sequence[str]]) -> List[List[str]]:
    """Blocks in their order of first appearance, the jobs of each in an order seeded by the block."""
    blocks: Dict[str, List[List[str]]] = {}
    for job in jobs:
        blocks.setdefault(block_of(job), []).append(list(job))
    ordered: List[List[str]] = []
    for block, members in blocks.items():
        random.Random(f"wif-block-{block}").shuffle(members)  # str seeds hash the same in every process
        ordered += members
    return ordered


def blocks_line(jobs: Sequence[Any]) -> str:
    """'2 of 4 blocks complete, block 2: 5 of 33 jobs': how far a list of jobs, done or run, gets."""
    per: Dict[int, List[Any]] = {}
    for job in jobs:
        per.setdefault(job.block, []).append(job)
    complete = [b for b, js in sorted(per.items()) if all(j.done for j in js)]
    partial = [
        (b, sum(j.done for j in js), len(js))
        for b, js in sorted(per.items())
        if b not in complete and any(j.done for j in js)
    ]
    out = [f"{len(complete)} of {len(per)} blocks complete"]
    out += [f"block {b}: {n} of {m} jobs" for b, n, m in partial]
    return ", ".join(out)


class SweepCallback(Callback):
    """Counts a multirun's jobs and checks them before the first starts; says how they ended, and where they are."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Refuse a single run (exit 2) whose tracking server does not answer."""
        refuse_silent_store(config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Say where a single run that ended went, and what shows it."""
        done = kwargs.get("job_return")
        if done is not None and done.status == JobStatus.COMPLETED:
            log.info(where_runs_are(config.tracking.uri, config.tracking.experiment))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Count the jobs, and refuse the sweep (exit 2) before its first job if any job cannot run."""
        refuse_silent_store(config)
        TALLY.reset(started_ms=int(time.time() * 1000))
        LOST.clear()
        try:
            jobs = plan_jobs(config.hydra.sweeper.params or {}, config.hydra.overrides.task)
        except Exception as err:  # noqa: BLE001 - a sweeper whose syntax the basic one lacks: each job checks itself
            log.warning("Could not plan the sweep's jobs (%s): each job's settings are checked when it starts.", err)
            return
        TALLY.total = len(jobs)
        from wif.sweep.preflight import refuse_bad_jobs

        refuse_bad_jobs(config, jobs)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Say how the sweep's jobs ended; exit 1 if any failed or was killed."""
        t = TALLY
        if t.ran_elsewhere():
            try:
                t = tally_from_store(config, t.started_ms, t.total or 0)
                t.budget = TALLY.budget
            except Exception as err:  # noqa: BLE001 - an outcome nobody can read is not a success
                log.error("Could not read how the sweep's jobs ended from %s (%s).", config.tracking.uri, err)
                raise SystemExit(EXIT_FAILED) from None
        spent = time.time() - t.started_ms / 1000 if t.started_ms else 0.0  # what wif-plan priced beforehand
        budget = f"; {t.budget}" if t.budget else ""
        log.info(
            f"Sweep done: {t.finished} finished, {t.failed} failed, {t.killed} killed, {t.skipped} skipped "
            f"(already finished; resume=false reruns them); spent {spent / 60:.1f} min wall{budget}."
        )
        if t.finished or t.skipped:
            log.info(where_runs_are(config.tracking.uri, config.tracking.experiment))
        for line in t.failures:
            log.error("  failed: %s", line)
        for pos, why in sorted(LOST.items()):
            log.error("  killed: job #%d: %s", pos, why)
        if t.failed or t.killed:
            raise SystemExit(EXIT_FAILED)


def where_runs_are(uri: str, experiment: str) -> str:
    """The line that says where a sweep's runs are, and the commands that show them from this folder."""
    from wif.config import TrackingConfig
    from wif.measure.tracking import default_tracking_uri

    report = "wif-report"
    if uri != default_tracking_uri():  # wif-report's own defaults
        report += f" --tracking-uri {uri}"
    if experiment != TrackingConfig.experiment:
        report += f" --experiment {experiment}"
    browse = f"open {uri}" if uri.startswith(("http://", "https://")) else f"mlflow ui --backend-store-uri {uri}"
    return f"The runs are in {uri}, experiment {experiment}: `{report}` tables them, `{browse}` browses them."
