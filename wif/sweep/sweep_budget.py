"""A budgeted sweep's budget, kept while it runs (`sweep.budget_min`, `sweep.probe_only`).

Jobs are priced from earlier runs or a probe (wif.sweep.probe), and the plan is said first. A job starts only
where it can finish in what is left (wif.sweep.budget). Each finished job teaches the prices of what follows.
The sweepers use it, and the probe, which only prices.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from wif.config.exits import EXIT_BAD_SETTING
from wif.measure import names
from wif.measure.lifetime import process_age_s
from wif.measure.tracking import config_hash
from wif.sweep import callback
from wif.sweep import prices as p
from wif.sweep.budget import fits, may_start, minutes
from wif.sweep.callback import blocks_line
from wif.sweep.probe import PROBE_SUFFIX, Launch, find_runs, history_prices, read_history, read_probes, run_probe

log = logging.getLogger("wif")


class SweepBudget:
    """The budget of one sweep: its jobs priced, the probe run if needed, each start allowed or refused."""

    def __init__(self, cfg: DictConfig, jobs: Sequence[Sequence[str]]) -> None:
        from wif.sweep.cluster import SUBMITTING_LAUNCHERS

        launcher = str(OmegaConf.select(cfg, "hydra.runtime.choices.hydra/launcher", default="basic") or "basic")
        if launcher in SUBMITTING_LAUNCHERS:  # one job at a time, timed here: parallel jobs would wait in line
            log.error(
                "Bad setting: sweep.budget_min and sweep.probe_only start one job at a time and time it here; "
                "hydra/launcher=%s runs jobs side by side elsewhere. Drop the budget, or use the basic launcher.",
                launcher,
            )
            raise SystemExit(EXIT_BAD_SETTING)
        budget_min = cfg.sweep.budget_min  # null under sweep.probe_only without a budget: no limit
        self.budget_s = math.inf if budget_min is None else 60 * float(budget_min)
        self.started = time.time() - process_age_s()  # the whole command counts, Hydra's start included
        self.experiment = str(cfg.tracking.experiment)
        self.client = MlflowClient(str(cfg.tracking.uri))
        self.jobs: Dict[tuple, p.Job] = {}
        self.hashes: Dict[tuple, str] = {}
        testbed = self._describe(cfg, jobs)
        history = read_history(self.client, self.experiment, testbed)
        self.prices = p.Prices(history=history_prices(history))
        self.auto_taken = [r.epochs for r in history if r.auto]
        self.prices.auto = p.auto_epochs(self.auto_taken, self.tr.min_epochs, self.tr.max_epochs)
        self.prices.warmup = self.tr.warmup_epochs
        self.testbed, self.n_history = testbed, len(history)
        self.probe_s = 0.0
        self.probe_only = bool(cfg.sweep.get("probe_only"))
        self.ran: List[p.Job] = []
        self.refused: List[p.Job] = []

    def _describe(self, cfg: DictConfig, jobs: Sequence[Sequence[str]]) -> Dict[str, str]:
        """Each job composed as preflight composed it: its cell, batches, epochs and whether it ran already."""
        from wif.data.engines.common import in_flight
        from wif.measure.nvml import resolve_device
        from wif.run.model import model_label
        from wif.sweep.identity import cell_name, run_identity
        from wif.sweep.preflight import composed

        # The identities of the experiment's FINISHED training runs: their jobs are done.
        finished = self._finished(f"tags.`{names.TAG_KIND}` = 'train'", most=callback.SEARCH_LIMIT)
        done = {r.data.tags.get(names.TAG_CONFIG_HASH) for r in finished}
        for job in jobs:
            conf = composed(cfg, job)
            device = resolve_device(conf.device)
            digest = config_hash(run_identity(conf, device))
            key = tuple(job)
            self.hashes[key] = digest
            self.jobs[key] = p.Job(
                key=key,
                cell=cell_name(conf),
                fraction=conf.data.fraction,
                block=conf.repeat,
                batches=p.epoch_batches(conf),
                epochs=None if conf.trainer.auto else int(conf.trainer.epochs),
                done=digest in done,
                in_flight=in_flight(conf.loader, conf.engine),
            )
            self.tr = conf.trainer
        return {names.TAG_DEVICE: device, names.TAG_MODEL: model_label(conf.model)}

    def _finished(self, where: str, most: int) -> List[Any]:
        """The experiment's FINISHED runs that match `where`."""
        return find_runs(self.client, self.experiment, f"{where} and attributes.status = 'FINISHED'", max_results=most)

    def left_s(self) -> float:
        """Seconds left in the budget."""
        return self.budget_s - (time.time() - self.started)

    def job(self, overrides: Sequence[str]) -> p.Job:
        """The budget's job of these overrides."""
        return self.jobs[tuple(overrides)]

    def price_with_probe(self, launch: Launch) -> None:
        """Without earlier runs, price the jobs from the probe, run now unless stored or needless.

        See NOTE [ Block 0 prices the rest ] in wif.sweep.prices.
        """
        if self.n_history:
            log.info("Budget: jobs priced from %d earlier runs of this testbed in the store", self.n_history)
            return
        todo = [j for j in self.jobs.values() if not j.done]
        self.prices.probes = read_probes(self.client, self.experiment, self.testbed)
        missing = [j for j in todo if j.setting not in self.prices.probes]
        if missing and not self.probe_only and all(j.epochs is None for j in todo):
            log.info(
                "Budget: no earlier run of this testbed (%s) in the store, and no probe: each auto job stops by its "
                "deadline, so the first jobs run unpriced and price the rest",
                "/".join(self.testbed.values()),
            )
        elif missing:
            log.info(
                "Budget: no earlier run of this testbed (%s) in the store: a probe prices the sweep first",
                "/".join(self.testbed.values()),
            )
            self.probe_s = run_probe(missing, launch, self.client, self.experiment)
            self.prices.probes = read_probes(self.client, self.experiment, self.testbed)
            log.info(
                "Probe done in %.1f s%s",
                self.probe_s,
                f", counted in the budget ({minutes(self.left_s())} left)" if math.isfinite(self.budget_s) else "",
            )
        else:
            log.info(
                "Budget: jobs priced from the store's probe of every setting (experiment %s%s)",
                self.experiment,
                PROBE_SUFFIX,
            )

    def log_plan(self, order: Sequence[p.Job], what: str) -> None:
        """The plan, before the first job: what the order costs, what fits, what is left for later."""
        todo = [j for j in order if not j.done]
        if not self.prices.priced:
            log.info(
                f"Budget plan: {self.left_s() / 60:.1f} min of {self.budget_s / 60:.1f} left; {what}: {len(order)} "
                f"jobs, {len(order) - len(todo)} finished already, no price yet: the first jobs price the rest"
            )
            return
        fit, rest = fits(todo, self.prices, self.left_s())
        total = sum(self.prices.expected_s(j) for j in todo)
        log.info(
            f"Budget plan: {self.left_s() / 60:.1f} min of {self.budget_s / 60:.1f} left "
            f"(sweep.budget_min={self.budget_s / 60:g}); {what}: {len(order)} jobs, "
            f"{len(order) - len(todo)} finished already, about {minutes(total)} expected "
            f"({self._epochs_said()} a run)"
        )
        ran = [replace(j, done=j.done or j in fit) for j in order]
        left = f"; {len(rest)} jobs, about {minutes(self.undone_s(rest))}, are left for a larger budget"
        left = left if rest else ""
        log.info(
            f"Budget plan: fits {len(fit)} jobs ({blocks_line(ran)}){left}; "
            f"a job starts only if {p.SAFETY:.1f}x its upper price fits in what is left"
        )

    def _epochs_said(self) -> str:
        """A run's epochs, as the plan says them: '3 epochs', or what auto is expected to take."""
        fixed = {j.epochs for j in self.jobs.values() if j.epochs}
        return self.prices.auto.why if not fixed else f"{'/'.join(map(str, sorted(fixed)))} epochs"

    def may_start(self, overrides: Sequence[str]) -> bool:
        """Whether this job may start now: its smallest useful run and the sweep's end fit in what is left."""
        job = self.job(overrides)
        upper = self.prices.start_s(job)
        if may_start(upper, self.left_s()):
            allowed = self.prices.allowed_s(job, self.left_s(), undone=self.undone_at(job.fraction))
            log.info(
                f"Budget: starting {job.cell} (block {job.block}): up to {allowed:.1f} s"
                + (" (its deadline)" if job.epochs is None else "")
                + ("" if self.prices.cost(job) else ", unpriced: it keeps its smallest useful run")
                + f", {self.left_s():.1f} s left"
            )
            return True
        if not any(r.cell == job.cell for r in self.refused):  # said once a cell: later blocks only cost more
            log.warning(
                f"Budget: {job.cell} (block {job.block}) not started: it may take up to {upper:.1f} s "
                f"({p.SAFETY:.1f}x its upper price), and {self.left_s():.1f} s are left, {p.END_RESERVE_S:.0f} s "
                "of them kept for the sweep's end; cheaper jobs after it still may"
            )
        self.refused.append(job)
        return False

    def launch(self, overrides: Sequence[str], launch: Callable[[Sequence[str]], Any]) -> Optional[Any]:
        """Run one job under the budget, its time teaching the prices; None where it was done before or cannot fit."""
        if self.skip(overrides) or not self.may_start(overrides):
            return None
        t0 = time.monotonic()
        result = launch(self.with_deadline(overrides))
        self.measured(overrides, time.monotonic() - t0)
        return result

    def undone_at(self, fraction: float) -> int:
        """The jobs at `fraction` not run yet."""
        return sum(1 for j in self.jobs.values() if not j.done and j.fraction == fraction)

    def with_deadline(self, overrides: Sequence[str]) -> List[str]:
        """An auto job's overrides with its deadline, sweep.deadline: it stops there with what it has."""
        job = self.job(overrides)
        allowed = self.prices.allowed_s(job, self.left_s(), undone=self.undone_at(job.fraction))
        if job.epochs is not None or not math.isfinite(allowed):
            return list(overrides)
        return [*overrides, f"sweep.deadline={time.time() + allowed:.3f}"]

    def skip(self, overrides: Sequence[str]) -> bool:
        """A job finished before (resume): skipped without launching it."""
        job = self.job(overrides)
        if job.done:
            callback.TALLY.skipped += 1
            log.info("%s repeat=%d  skipped: a FINISHED run of this configuration exists", job.cell, job.block)
        return job.done

    def measured(self, overrides: Sequence[str], wall_s: float) -> None:
        """A job ran: its run's time and epochs improve the prices of what follows."""
        job = self.job(overrides)
        self.ran.append(job)
        self.jobs[job.key] = replace(job, done=True)
        found = self._finished(f"tags.`{names.TAG_CONFIG_HASH}` = '{self.hashes[job.key]}'", most=1)
        if not found:
            return
        m = found[0].data.metrics
        epochs = int(m.get(names.EPOCHS_RUN) or job.epochs or 1)
        self.prices.measure(job, wall_s=wall_s, run_s=m.get(names.TIME_TOTAL_S, wall_s), epochs=epochs)
        if job.epochs is None:
            self.auto_taken.append(epochs)
            self.prices.auto = p.auto_epochs(self.auto_taken, self.tr.min_epochs, self.tr.max_epochs)

    def undone_s(self, jobs: Iterable[p.Job]) -> float:
        """What these jobs are expected to cost, those done since counting nothing."""
        return sum(self.prices.expected_s(self.jobs.get(j.key, j)) for j in jobs)

    def outcome(self, undone: Sequence[p.Job], decided: str = "") -> str:
        """The sweep's last words on its budget: what ran, what did not, what finishing would cost."""
        spent = time.time() - self.started
        left = [j for j in undone if not self.jobs.get(j.key, j).done]
        head = (
            f"budget {self.budget_s / 60:g} min: {'ended by the budget' if self.refused else 'enough'}; "
            f"{len(self.ran)} jobs run, {spent / 60:.1f} min since the command started "
            f"(probe {self.probe_s:.0f} s)"
        )
        tail = "; nothing left undone"
        if left:
            tail = (
                f"; not run: {len(left)} jobs, about {minutes(self.undone_s(left))} to finish "
                "(the same command with a larger sweep.budget_min resumes)"
            )
        return head + (f"; {decided}" if decided else "") + tail
