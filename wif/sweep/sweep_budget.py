"""A budgeted sweep's budget kept while it runs (`sweep.budget_min`, `sweep.probe_only`): every job priced
(from the store's earlier runs of the testbed, else from a probe: wif.sweep.probe), the plan said before the
first job, each start allowed only if the job can finish in what is left (the rules: wif.sweep.budget), each
finished job's time teaching the prices of what follows, and the sweep's last words on what its budget ran.
Used by the sweepers (hydra_plugins/wif_sweeper); apart from the probe, which only prices.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence  # noqa: F401 - type comments

from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from wif.config import Config
from wif.config.exits import EXIT_BAD_SETTING
from wif.measure.lifetime import process_age_s
from wif.measure.tracking import config_hash
from wif.sweep import budget as b
from wif.sweep import callback
from wif.sweep.probe import PROBE_SUFFIX, Launch, read_history, read_probes, run_probe

log = logging.getLogger("wif")


def _batches(conf: Config) -> int:
    d = conf.data
    return b.batches_per_epoch(d.num_train, d.fraction, d.val_split, d.batch_size, conf.trainer.max_batches)


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
        self.jobs: Dict[tuple, b.Job] = {}
        self.hashes: Dict[tuple, str] = {}
        testbed = self._describe(cfg, jobs)
        history = read_history(self.client, self.experiment, testbed)
        self.prices = b.Prices()
        for cell in {r.cell for r in history}:
            runs = [r for r in history if r.cell == cell]
            self.prices.history[cell] = b.CellCost(
                statistics.median(r.overhead_s for r in runs), 0.0, statistics.median(r.run_s / r.epochs for r in runs)
            )
        self.auto_taken = [r.epochs for r in history if r.auto]
        self.prices.auto = b.auto_epochs(self.auto_taken, self.tr.min_epochs, self.tr.max_epochs)
        self.testbed, self.n_history = testbed, len(history)
        self.probe_s, self.ran, self.refused = 0.0, [], []  # type: float, List[b.Job], List[b.Job]

    def _describe(self, cfg: DictConfig, jobs: Sequence[Sequence[str]]) -> Dict[str, str]:
        """Each job composed as preflight composed it: its cell, batches, epochs and whether it ran already."""
        from wif.data.engines.common import in_flight
        from wif.run.model import model_label
        from wif.run.supervise import resolve_device
        from wif.sweep.job import cell_name, run_identity
        from wif.sweep.preflight import composed

        done = self._finished_hashes()
        for job in jobs:
            conf = composed(cfg, job)
            device = resolve_device(conf.device)
            digest = config_hash(run_identity(conf, device))
            key = tuple(job)
            self.hashes[key] = digest
            self.jobs[key] = b.Job(
                key,
                cell_name(conf),
                conf.data.fraction,
                conf.repeat,
                _batches(conf),
                None if conf.trainer.auto else int(conf.trainer.epochs),
                digest in done,
                in_flight(conf.loader, conf.engine),
            )
            self.tr = conf.trainer
        return {"wif.device": device, "wif.model": model_label(conf.model)}

    def _finished_hashes(self) -> set:
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            return set()
        runs = self.client.search_runs(
            [exp.experiment_id],
            "tags.`wif.kind` = 'train' and attributes.status = 'FINISHED'",
            max_results=callback.SEARCH_LIMIT,
        )
        return {r.data.tags.get("wif.config_hash") for r in runs}

    def left_s(self) -> float:
        return self.budget_s - (time.time() - self.started)

    def job(self, overrides: Sequence[str]) -> b.Job:
        return self.jobs[tuple(overrides)]

    def price_with_probe(self, launch: Launch) -> None:
        """Without earlier runs of the testbed: the probe's prices (run now unless a probe of every setting
        of this sweep is in the store already)."""
        if self.n_history:
            log.info("Budget: jobs priced from %d earlier runs of this testbed in the store", self.n_history)
            return
        todo = [j for j in self.jobs.values() if not j.done]
        self.prices.probes = read_probes(self.client, self.experiment, self.testbed)
        missing = [j for j in todo if j.setting not in self.prices.probes]
        if missing:
            log.info(
                "Budget: no earlier run of this testbed (%s) in the store: a probe prices the sweep first",
                "/".join(self.testbed.values()),
            )
            self.probe_s = run_probe(missing, launch, self.client, self.experiment)
            self.prices.probes = read_probes(self.client, self.experiment, self.testbed)
            log.info(
                "Probe done in %.1f s%s",
                self.probe_s,
                f", counted in the budget ({b.minutes(self.left_s())} left)" if math.isfinite(self.budget_s) else "",
            )
        else:
            log.info(
                "Budget: jobs priced from the store's probe of every setting (experiment %s%s)",
                self.experiment,
                PROBE_SUFFIX,
            )

    def log_plan(self, order: Sequence[b.Job], what: str) -> None:
        """The plan, before the first job: what the order costs, what fits, what is left for later."""
        todo = [j for j in order if not j.done]
        fit, rest = b.fits(todo, self.prices, self.left_s())
        total = sum(self.prices.expected_s(j) for j in todo)
        log.info(
            "Budget plan: %.1f min of %.1f left (sweep.budget_min=%g); %s: %d jobs, %d finished already, "
            "about %s expected (%s a run)",
            self.left_s() / 60,
            self.budget_s / 60,
            self.budget_s / 60,
            what,
            len(order),
            len(order) - len(todo),
            b.minutes(total),
            self._epochs_said(),
        )
        ran = [replace(j, done=j.done or j in fit) for j in order]
        log.info(
            "Budget plan: fits %d jobs (%s)%s; a job starts only if %.1fx its upper price fits in what is left",
            len(fit),
            b.blocks_line(ran),
            f"; {len(rest)} jobs, about {b.minutes(self.undone_s(rest))}, are left for a larger budget" if rest else "",
            b.SAFETY,
        )

    def _epochs_said(self) -> str:
        fixed = {j.epochs for j in self.jobs.values() if j.epochs}
        return self.prices.auto.why if not fixed else f"{'/'.join(map(str, sorted(fixed)))} epochs"

    def may_start(self, overrides: Sequence[str]) -> bool:
        """Whether this job may start now: its upper price and the sweep's end fit in what is left."""
        job = self.job(overrides)
        upper = self.prices.upper_s(job)
        if b.may_start(upper, self.left_s()):
            log.info(
                "Budget: starting %s (block %d): up to %.1f s, %.1f s left", job.cell, job.block, upper, self.left_s()
            )
            return True
        if not any(r.cell == job.cell for r in self.refused):  # said once a cell: later blocks only cost more
            log.warning(
                "Budget: %s (block %d) not started: it may take up to %.1f s (%.1fx its upper price), and "
                "%.1f s are left, %.0f s of them kept for the sweep's end; cheaper jobs after it still may",
                job.cell,
                job.block,
                upper,
                b.SAFETY,
                self.left_s(),
                b.END_RESERVE_S,
            )
        self.refused.append(job)
        return False

    def launch(self, overrides: Sequence[str], launch: Callable[[Sequence[str]], Any]) -> Optional[Any]:
        """One job under the budget: skipped if it finished before, refused if it cannot finish in what is
        left, else launched, its time teaching the prices of what follows; None when it did not run."""
        if self.skip(overrides) or not self.may_start(overrides):
            return None
        t0 = time.monotonic()
        result = launch(overrides)
        self.measured(overrides, time.monotonic() - t0)
        return result

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
        exp = self.client.get_experiment_by_name(self.experiment)
        found = (
            self.client.search_runs(
                [exp.experiment_id],
                f"tags.`wif.config_hash` = '{self.hashes[job.key]}' and attributes.status = 'FINISHED'",
                max_results=1,
            )
            if exp
            else []
        )
        if not found:
            return
        m = found[0].data.metrics
        epochs = int(m.get("epochs_run") or job.epochs or 1)
        self.prices.measure(job, wall_s, m.get("time_total_s", wall_s), epochs)
        if job.epochs is None:
            self.auto_taken.append(epochs)
            self.prices.auto = b.auto_epochs(self.auto_taken, self.tr.min_epochs, self.tr.max_epochs)

    def undone_s(self, jobs: Iterable[b.Job]) -> float:
        return sum(self.prices.expected_s(self.jobs.get(j.key, j)) for j in jobs)

    def outcome(self, undone: Sequence[b.Job], decided: str = "") -> str:
        """The sweep's last words on its budget: what ran, what did not, what finishing would cost."""
        spent = time.time() - self.started
        left = [j for j in undone if not self.jobs.get(j.key, j).done]
        head = (
            f"budget {self.budget_s / 60:g} min: {'ended by the budget' if self.refused else 'enough'}; "
            f"{len(self.ran)} jobs run, {spent / 60:.1f} min since the command started "
            f"(probe {self.probe_s:.0f} s)"
        )
        tail = (
            (
                f"; not run: {len(left)} jobs, about {b.minutes(self.undone_s(left))} to finish "
                "(the same command with a larger sweep.budget_min resumes)"
            )
            if left
            else "; nothing left undone"
        )
        return head + (f"; {decided}" if decided else "") + tail
