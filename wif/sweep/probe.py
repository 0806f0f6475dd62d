"""A sweep's prices read from the store: its earlier runs of the testbed, else a short probe run first.

A probe runs one job of each setting at the largest fraction, 2 epochs of a few batches, launched like any
job. It goes to `<experiment>-probe`, tagged `wif.kind=probe`, never a study run; a later sweep reuses it.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from mlflow.tracking import MlflowClient

from wif.measure import names
from wif.measure.names import Cell
from wif.sweep import callback
from wif.sweep.prices import CellCost, Job, batches_per_epoch

log = logging.getLogger("wif")
PROBE_SUFFIX = "-probe"
# NOTE [ A probe's start ]
# A job's start (fork, Hydra, the data's set-up) does not depend on its loader setting. The sweep's first
# job pays set-up once for all (1.9 s against 0.3 s). So every probe is given the median start of them all.
PROBE = {"trainer.epochs": "2", "trainer.warmup_epochs": "1", "repeat": "0", "race.id": ""}
Launch = Callable[[List[List[str]]], Any]
PROBE_WALL_S = "probe_wall_s"  # a probe run's job, launch to return
# The probe's second epoch's figures; the host's wait behind the GPU is out of data_wait_s, still the loop's.
LOOP_PARTS = (names.COMPUTE_S, names.DATA_WAIT_S, names.COPY_S, names.GPU_BLOCKED_S)
PROBE_FIGURES = (names.EPOCH_TIME_S, names.FIRST_BATCH_S, names.VAL_TIME_S, *LOOP_PARTS)


@dataclass
class RunCost:
    """What one earlier run cost: its job's overhead, its epochs and their seconds (validation and test included)."""

    cell: str
    overhead_s: float
    epochs: int
    run_s: float
    auto: bool


PROBE_BATCHES = 4  # training batches in a probe epoch, at least
PROBE_DRAINS = 2  # ... or as many as twice the batches the loader holds in flight, whichever is more


def probe_batches(in_flight: int) -> int:
    """A probe epoch's batches: enough that the loader's queue (workers x prefetch_factor) fills and drains twice.

    Fewer priced the workers' start-up and unused fetches as per batch: a 2-block smoke grid priced 32% high.
    """
    return max(PROBE_BATCHES, PROBE_DRAINS * in_flight)


@dataclass(frozen=True)
class ProbeCost:
    """A probe run of a setting (a few batches a training epoch, two epochs): what it measured."""

    wall_s: float  # the job, launch to return: its run plus a start (read_probes: the median probe's start)
    run_s: float  # time_total_s
    epoch_s: float  # the second (steady) epoch's training pass
    first_batch_s: float  # ... of which the wait for the first batch (workers starting)
    val_s: float  # the second epoch's validation
    batches: int  # batches in a probe epoch
    fraction: float
    loop_s: float = 0.0  # ... of which the loop over its batches (compute, data wait, copy); 0: not logged

    def cost(self, batches: int, fraction: float) -> CellCost:
        """The price of a full run at `batches` a training epoch and `fraction`.

        An epoch pays its first wait and its tail once, then the steady rate per batch. Validation pays its start and
        tail once, the rest scaled by the fraction. The rest of the probe run is fixed.
        """
        loop = self.loop_s or self.epoch_s
        per_batch = max(loop - self.first_batch_s, 0.0) / max(self.batches, 1)
        once = self.first_batch_s + max(self.epoch_s - loop, 0.0)  # per epoch, whatever its length
        epoch = once + batches * per_batch
        val_once = min(self.val_s, once)
        val = val_once + (self.val_s - val_once) * fraction / self.fraction
        return CellCost(
            overhead_s=max(self.wall_s - self.run_s, 0.0),
            fixed_s=max(self.run_s - 2 * (self.epoch_s + self.val_s), 0.0),
            epoch_s=epoch + val,
        )


def find_runs(client: MlflowClient, experiment: str, where: str, **search: Any) -> List[Any]:
    """The runs of `experiment` that match `where`; none where the experiment does not exist."""
    exp = client.get_experiment_by_name(experiment)
    return list(client.search_runs([exp.experiment_id], where, **search)) if exp else []


def read_history(client: MlflowClient, experiment: str, testbed: Dict[str, str]) -> List[RunCost]:
    """Finished training runs of the testbed (tags wif.device, wif.gpu, wif.model), oldest first."""
    where = " and ".join(
        [f"tags.`{names.TAG_KIND}` = 'train'", "attributes.status = 'FINISHED'"]
        + [f"tags.`{k}` = '{v}'" for k, v in testbed.items()]
    )
    out = []
    for run in find_runs(client, experiment, where, max_results=50_000):
        m, p = run.data.metrics, run.data.params
        if names.TIME_TOTAL_S not in m:
            continue
        auto = p.get("trainer.epochs") == "auto"
        epochs = m.get(names.EPOCHS_RUN) or float(p.get("trainer.epochs", "0") if not auto else 0)
        if not epochs:
            continue
        cost = RunCost(
            cell=run.data.tags.get(names.TAG_CELL, "?"),
            overhead_s=m.get(names.JOB_OVERHEAD_S, 0.0),
            epochs=int(epochs),
            run_s=m[names.TIME_TOTAL_S],
            auto=auto,
        )
        out.append(cost)
    return out


def history_prices(history: Sequence[RunCost]) -> Dict[str, CellCost]:
    """Each cell's price from its earlier runs: the median overhead and the median epoch."""
    out = {}
    for cell in {r.cell for r in history}:
        runs = [r for r in history if r.cell == cell]
        out[cell] = CellCost(
            overhead_s=statistics.median(r.overhead_s for r in runs),
            fixed_s=0.0,
            epoch_s=statistics.median(r.run_s / r.epochs for r in runs),
        )
    return out


def probe_job(job: Sequence[str], experiment: str, batches: int = PROBE_BATCHES) -> List[str]:
    """The job's overrides, made a probe of `batches` a training epoch: PROBE's keys replaced, its own experiment."""
    keys = {**PROBE, "trainer.max_batches": str(batches), "tracking.experiment": experiment + PROBE_SUFFIX}
    return [o for o in job if o.partition("=")[0].lstrip("+~") not in keys] + [f"{k}={v}" for k, v in keys.items()]


def read_probes(client: MlflowClient, experiment: str, testbed: Dict[str, str]) -> Dict[str, ProbeCost]:
    """The newest finished probe of each setting of the testbed. See NOTE [ A probe's start ]."""
    where = " and ".join(["attributes.status = 'FINISHED'"] + [f"tags.`{k}` = '{v}'" for k, v in testbed.items()])
    out: Dict[str, ProbeCost] = {}
    for run in find_runs(client, experiment + PROBE_SUFFIX, where, order_by=["attributes.start_time DESC"]):
        setting = Cell.parse(run.data.tags.get(names.TAG_CELL, "?")).setting
        if setting in out or names.TIME_TOTAL_S not in run.data.metrics:
            continue
        probe = _probe_cost(client, run)
        if probe is not None:
            out[setting] = probe
    # See NOTE [ A probe's start ]
    start = statistics.median(probe.wall_s - probe.run_s for probe in out.values()) if out else 0.0
    return {setting: replace(probe, wall_s=probe.run_s + start) for setting, probe in out.items()}


def _probe_cost(client: MlflowClient, run: Any) -> Optional[ProbeCost]:
    """What one probe run measured in its second, steady epoch; None when it has no second epoch."""
    m, p = run.data.metrics, run.data.params
    step = {k: {x.step: x.value for x in client.get_metric_history(run.info.run_id, k)} for k in PROBE_FIGURES}
    if 1 not in step[names.EPOCH_TIME_S]:
        return None
    fraction = float(p["data.fraction"])
    batches = batches_per_epoch(
        num_train=int(p["data.num_train"]),
        fraction=fraction,
        val_split=float(p["data.val_split"]),
        batch_size=int(p["data.batch_size"]),
        max_batches=int(p["trainer.max_batches"]),
    )
    return ProbeCost(
        wall_s=m.get(PROBE_WALL_S, m[names.TIME_TOTAL_S] + m.get(names.JOB_OVERHEAD_S, 0.0)),
        run_s=m[names.TIME_TOTAL_S],
        epoch_s=step[names.EPOCH_TIME_S][1],
        first_batch_s=step[names.FIRST_BATCH_S].get(1, 0.0),
        val_s=step[names.VAL_TIME_S].get(1, 0.0),
        batches=batches,
        fraction=fraction,
        loop_s=sum(step[k].get(1, 0.0) for k in LOOP_PARTS),
    )


def run_probe(jobs: Iterable[Job], launch: Launch, client: MlflowClient, experiment: str) -> float:
    """Launch one probe job per setting, one at a time; each run tagged wif.kind=probe with its wall time.

    The sweep's tally is left as it was. Returns the probe's wall time.

    Args:
        jobs: the sweep's jobs; one per setting, at its largest fraction, is probed.
        launch: launches a batch of jobs.
        client: the MLflow store.
        experiment: the sweep's experiment; the probe goes to `<experiment>-probe`.
    """
    t0, before = time.monotonic(), {**callback.TALLY.__dict__, "failures": list(callback.TALLY.failures)}
    picked: Dict[str, Job] = {}
    for job in sorted(jobs, key=lambda j: -j.fraction):
        picked.setdefault(job.setting, job)
    log.info(
        f"Probe: {len(picked)} settings, 2 epochs of {PROBE_BATCHES} batches each (twice what the loader holds "
        f"in flight where that is more), into experiment {experiment}{PROBE_SUFFIX}"
    )
    for i, job in enumerate(picked.values()):
        start_ms, t = int(time.time() * 1000), time.monotonic()
        launch([probe_job(job.key, experiment, probe_batches(job.in_flight))])
        wall = time.monotonic() - t
        for run in find_runs(client, experiment + PROBE_SUFFIX, f"attributes.start_time >= {start_ms}"):
            client.set_tag(run.info.run_id, names.TAG_KIND, "probe")
            client.log_metric(run.info.run_id, PROBE_WALL_S, wall)
        log.info("Probe %d/%d: %s, %.1f s", i + 1, len(picked), job.setting, wall)
    callback.TALLY.__dict__.update(before)
    return time.monotonic() - t0
