"""A sweep's price in seconds, for its budget (`sweep.budget_min`: kept by wif.sweep.sweep_budget; rules in
wif.sweep.budget).

The price comes from the store's earlier runs of the testbed (device, model). With none, a short *probe*
measures it: one job of each distinct setting at the sweep's largest fraction, 2 epochs of 4 training
batches, launched like any job (so its start is in the price), into the experiment `<experiment>-probe`
and tagged `wif.kind=probe`: it never counts as a study run in the report, a resume or a race. A later
sweep of the same testbed reuses it. `wif-plan` runs the same probe (`train.py -m ... sweep.probe_only=true`).
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterable, List, Sequence

from mlflow.tracking import MlflowClient

from wif.sweep import budget as b
from wif.sweep import callback

log = logging.getLogger("wif")
PROBE_SUFFIX = "-probe"
PROBE = {"trainer.epochs": "2", "trainer.warmup_epochs": "1", "repeat": "0", "race.id": ""}
Launch = Callable[[List[List[str]]], Any]


@dataclass
class RunCost:
    """What one earlier run cost: its job's overhead, its epochs and their seconds (validation and test included)."""

    cell: str
    overhead_s: float
    epochs: int
    run_s: float
    auto: bool


def read_history(client: MlflowClient, experiment: str, testbed: Dict[str, str]) -> List[RunCost]:
    """Finished training runs of the testbed (tags wif.device, wif.gpu, wif.model), oldest first."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    where = " and ".join(
        ["tags.`wif.kind` = 'train'", "attributes.status = 'FINISHED'"]
        + [f"tags.`{k}` = '{v}'" for k, v in testbed.items()]
    )
    out = []
    for run in client.search_runs([exp.experiment_id], where, max_results=50_000):
        m, p = run.data.metrics, run.data.params
        if "time_total_s" not in m:
            continue
        epochs = m.get("epochs_run") or float(p.get("trainer.epochs", "0") if p.get("trainer.epochs") != "auto" else 0)
        if not epochs:
            continue
        out.append(
            RunCost(
                run.data.tags.get("wif.cell", "?"),
                m.get("job_overhead_s", 0.0),
                int(epochs),
                m["time_total_s"],
                p.get("trainer.epochs") == "auto",
            )
        )
    return out


def probe_job(job: Sequence[str], experiment: str, batches: int = b.PROBE_BATCHES) -> List[str]:
    """The job's overrides, made a probe of `batches` a training epoch: PROBE's keys replaced, its own experiment."""
    keys = {**PROBE, "trainer.max_batches": str(batches), "tracking.experiment": experiment + PROBE_SUFFIX}
    return [o for o in job if o.partition("=")[0].lstrip("+~") not in keys] + [f"{k}={v}" for k, v in keys.items()]


def read_probes(client: MlflowClient, experiment: str, testbed: Dict[str, str]) -> Dict[str, b.ProbeCost]:
    """The newest finished probe of each setting of the testbed."""
    exp = client.get_experiment_by_name(experiment + PROBE_SUFFIX)
    if exp is None:
        return {}
    where = " and ".join(["attributes.status = 'FINISHED'"] + [f"tags.`{k}` = '{v}'" for k, v in testbed.items()])
    out: Dict[str, b.ProbeCost] = {}
    for run in client.search_runs([exp.experiment_id], where, order_by=["attributes.start_time DESC"]):
        setting = run.data.tags.get("wif.cell", "?").rpartition("@")[0]
        m, p = run.data.metrics, run.data.params
        if setting in out or "time_total_s" not in m:
            continue
        step = {
            k: {x.step: x.value for x in client.get_metric_history(run.info.run_id, k)}
            for k in (
                "epoch_time_s",
                "first_batch_s",
                "val_time_s",
                "compute_s",
                "data_wait_s",
                "copy_s",
                "gpu_blocked_s",
            )
        }  # the host's wait behind the GPU: out of data_wait_s, still the loop's
        if 1 not in step["epoch_time_s"]:
            continue
        fraction = float(p["data.fraction"])
        batches = b.batches_per_epoch(
            int(p["data.num_train"]),
            fraction,
            float(p["data.val_split"]),
            int(p["data.batch_size"]),
            int(p["trainer.max_batches"]),
        )
        out[setting] = b.ProbeCost(
            m.get("probe_wall_s", m["time_total_s"] + m.get("job_overhead_s", 0.0)),
            m["time_total_s"],
            step["epoch_time_s"][1],
            step["first_batch_s"].get(1, 0.0),
            step["val_time_s"].get(1, 0.0),
            batches,
            fraction,
            sum(step[k].get(1, 0.0) for k in ("compute_s", "data_wait_s", "copy_s", "gpu_blocked_s")),
        )
    # A job's start (fork, Hydra, the data's set-up) does not depend on its loader setting, and the sweep's first
    # job pays set-up once for all (1.9 s against 0.3 s): every probe is given the median start of them all.
    start = statistics.median(probe.wall_s - probe.run_s for probe in out.values()) if out else 0.0
    return {setting: replace(probe, wall_s=probe.run_s + start) for setting, probe in out.items()}


def run_probe(jobs: Iterable[b.Job], launch: Launch, client: MlflowClient, experiment: str) -> float:
    """One probe job per setting, launched one at a time; each run tagged wif.kind=probe with its wall time.
    The sweep's tally is left as it was. Returns the probe's wall time."""
    t0, before = time.monotonic(), {**callback.TALLY.__dict__, "failures": list(callback.TALLY.failures)}
    picked: Dict[str, b.Job] = {}
    for job in sorted(jobs, key=lambda j: -j.fraction):
        picked.setdefault(job.setting, job)
    log.info(
        "Probe: %d settings, 2 epochs of %d batches each (twice what the loader holds in flight where that "
        "is more), into experiment %s%s",
        len(picked),
        b.PROBE_BATCHES,
        experiment,
        PROBE_SUFFIX,
    )
    for i, job in enumerate(picked.values()):
        start_ms, t = int(time.time() * 1000), time.monotonic()
        launch([probe_job(job.key, experiment, b.probe_batches(job.in_flight))])
        wall = time.monotonic() - t
        exp = client.get_experiment_by_name(experiment + PROBE_SUFFIX)
        for run in client.search_runs([exp.experiment_id], f"attributes.start_time >= {start_ms}") if exp else []:
            client.set_tag(run.info.run_id, "wif.kind", "probe")
            client.log_metric(run.info.run_id, "probe_wall_s", wall)
        log.info("Probe %d/%d: %s, %.1f s", i + 1, len(picked), job.setting, wall)
    callback.TALLY.__dict__.update(before)
    return time.monotonic() - t0
