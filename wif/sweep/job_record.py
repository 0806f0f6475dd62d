"""A job's MLflow record: its place in the store, the run it opens, and how that run ended.

These are the steps of `wif.sweep.job.run_job` that read or write the store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, NamedTuple, Optional

from hydra.core.hydra_config import HydraConfig

from wif.config import Config, TrainerMode, as_plain
from wif.config.exits import to_log_file
from wif.data.folder_check import Verdict
from wif.measure import names
from wif.measure.contention import is_contended
from wif.measure.lifetime import owner_tags
from wif.measure.names import Cell
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import FINISHED, KILLED, Tracker, config_hash
from wif.run.model import model_label
from wif.run.step import step_label
from wif.run.supervise import Outcome
from wif.sweep import callback
from wif.sweep.cluster import cluster_tags
from wif.sweep.identity import cell_of, run_identity

log = logging.getLogger("wif")
ERROR_TAG_LIMIT = 4000
SUPERSEDED_BY = "wif.superseded_by"  # on an older FINISHED run that a resume=false run replaced


class SweepPlace(NamedTuple):
    """Where a job stands: its sweep's id, its position there, and whether it is one of a multirun."""

    sweep_id: str
    pos: int
    multirun: bool


@dataclass(frozen=True)
class Checked:
    """A job's config once checked: typed, its device resolved, its data ready to read."""

    conf: Config
    device: str
    folder: Optional[Verdict]  # data=folder's check of its files; None for other data
    storage: Dict[str, Any]  # the params the storage adds: data.pack_records, data.pack_bytes


@dataclass(frozen=True)
class Job:
    """A checked job as the store and the log know it."""

    checked: Checked
    tracker: Tracker
    digest: str  # the hash of its identity: resume matches on it
    cell: Cell
    label: str  # the head of its log lines: "[3/33] pin_nb fraction=0.1 repeat=0"
    place: SweepPlace
    tally: callback.SweepTally


@dataclass(frozen=True)
class NewRun:
    """What the run's MLflow record opens with."""

    name: str
    params: Dict[str, Any]
    tags: Dict[str, Any]
    config: Dict[str, Any]


class Ended(NamedTuple):
    """A run's outcome once duplicates are settled."""

    outcome: Outcome
    duplicate: bool  # another process finished the same job first: this run is KILLED, counted as skipped


_TRACKERS: Dict[tuple, Tracker] = {}


def _tracker(uri: str, experiment: str) -> Tracker:
    """One store connection per process and experiment: opening SQLite costs ~0.75 s."""
    key = (uri, experiment)
    if key not in _TRACKERS:
        _TRACKERS[key] = Tracker(uri, experiment)
    return _TRACKERS[key]


def sweep_place() -> SweepPlace:
    """The job's sweep and position in it; outside a Hydra app (tests), no sweep."""
    try:
        hc = HydraConfig.get()
    except ValueError:
        return SweepPlace("none", 0, False)
    multirun = hc.mode is not None and hc.mode.name == "MULTIRUN"
    sweep_id = callback.sweep_id(hc) if multirun else hc.run.dir
    return SweepPlace(sweep_id, int(hc.job.get("num", 0) or 0), multirun)


def place_job(checked: Checked) -> Job:
    """The job's identity in the store, its cell, and the label its log lines start with."""
    conf = checked.conf
    digest = config_hash(run_identity(conf, checked.device))
    tracker = _tracker(conf.tracking.uri, conf.tracking.experiment)
    place = sweep_place()
    tally = callback.TALLY
    cell = cell_of(conf)
    label = f"[{place.pos + 1}/{tally.total or '?'}] {cell.setting} fraction={conf.data.fraction} repeat={conf.repeat}"
    return Job(checked=checked, tracker=tracker, digest=digest, cell=cell, label=label, place=place, tally=tally)


def skip_if_finished(job: Job) -> bool:
    """With resume, a job that has a FINISHED run is skipped and counted so."""
    if not (job.checked.conf.resume and job.tracker.finished_runs(job.digest)):
        return False
    job.tally.skipped += 1
    log.info("%s  skipped: a FINISHED run of this configuration exists (resume=false reruns it)", job.label)
    return True


def run_kind(conf: Config) -> str:
    """`train`, or `loader` for a loader-only run, which the report leaves out."""
    return "loader" if conf.trainer.mode is TrainerMode.loader_only else "train"


def run_tags(job: Job) -> Dict[str, Any]:
    """The run's tags: the host, what it runs, where in the sweep, and who owns it."""
    conf = job.checked.conf
    tags = {
        **host_tags(),
        names.TAG_KIND: run_kind(conf),
        names.TAG_LOADER: conf.loader.name,
        names.TAG_FRACTION: job.cell.fraction,
        names.TAG_CELL: str(job.cell),
        names.TAG_DEVICE: job.checked.device,
        names.TAG_GPU: "none",
        names.TAG_ENGINE: conf.engine.name.value,
        names.TAG_MODEL: model_label(conf.model),
        names.TAG_STEP: step_label(conf.trainer),
        names.TAG_TRANSFER: conf.transfer.kind.value,
        names.TAG_BLOCK: conf.repeat,
        names.TAG_REPEAT: conf.repeat,
        names.TAG_SWEEP_ID: job.place.sweep_id,
        names.TAG_SWEEP_POS: job.place.pos,
        names.TAG_CONFIG_HASH: job.digest,
    }
    tags.update(cluster_tags())
    if conf.race.id:
        tags[names.TAG_RACE_ID] = conf.race.id
    tags.update(owner_tags())  # a later sweep can tell a run orphaned by a dead process
    return tags


def run_params(checked: Checked, plain: Dict[str, Any]) -> Dict[str, Any]:
    """The run's params: the plain config, the engine beside its tag, and what the data's checks found."""
    params = {**plain, "wif": {"engine": checked.conf.engine.name.value}}
    data = dict(plain["data"])
    if checked.folder is not None:
        data["skipped_files"] = len(checked.folder.bad)
    params["data"] = {**data, **checked.storage}  # data.pack_records, data.pack_bytes (docs/formats.md)
    return params


def new_run(job: Job) -> NewRun:
    """The run's name, params, tags and config, as its record opens with them."""
    conf = job.checked.conf
    plain = as_plain(conf)
    kind = run_kind(conf)
    prefix = "" if kind == "train" else f"{kind}-"
    return NewRun(
        name=f"{prefix}{job.cell.setting}-f{job.cell.fraction}-r{conf.repeat}",
        tags=run_tags(job),
        params=run_params(job.checked, plain),
        config=plain,
    )


def open_run(job: Job, new: NewRun) -> str:
    """Open the run's MLflow record; `supervise` calls it once the run's process has built the data."""
    run_id = job.tracker.start_run(name=new.name, params=new.params, tags=new.tags, config=new.config)
    log.info("%s  started on %s (MLflow run %s)", job.label, job.checked.device, run_id)
    return run_id


def settle_duplicates(job: Job, outcome: Outcome) -> Ended:
    """One FINISHED run per configuration and repeat: under resume this one, else the older ones, become KILLED."""
    earlier = job.tracker.finished_runs(job.digest) if outcome.status == FINISHED else []
    resume = job.checked.conf.resume
    if earlier and resume:
        error = {"type": "Duplicate", "message": f"run {earlier[0]} finished the same job first"}
        return Ended(Outcome(status=KILLED, error=error, run_id=outcome.run_id), duplicate=True)
    for old in earlier if not resume else []:
        job.tracker.set_tags(old, {SUPERSEDED_BY: outcome.run_id})
        job.tracker.end_run(old, KILLED)
    return Ended(outcome, duplicate=False)


def record_outcome(job: Job, outcome: Outcome, t_job: float) -> None:
    """A FINISHED run: its summary logged, whether others contended for the CPU, and its line."""
    s = outcome.summary
    s[names.JOB_OVERHEAD_S] = time.monotonic() - t_job - s[names.TIME_TOTAL_S]
    job.tracker.log_metrics(outcome.run_id, s)
    other = s.get(names.HOST_OTHER_CPU_PCT)
    threshold = job.checked.conf.measure.contended_pct
    contended = is_contended(s, threshold)
    job.tracker.set_tags(outcome.run_id, {names.TAG_CONTENDED: str(contended).lower()})
    job.tally.finished += 1
    if names.TEST_ACC in s:
        result = f"test_acc {s[names.TEST_ACC]:.3f}"
    else:
        result = f"{s[names.THROUGHPUT_MEAN_IMG_S]:.0f} img/s"
    note = contended_note(other, threshold) if contended else ""
    log.info(
        "%s  finished: %.3f s/epoch median (warm-up excluded), %s%s",
        job.label,
        s[names.EPOCH_TIME_MEDIAN_S],
        result,
        note,
    )


def contended_note(other_pct: float, threshold_pct: float) -> str:
    """The finished line's warning that other processes took CPU during the measured epochs."""
    return (
        f"; CONTENDED: other processes used {other_pct:.0f}% of a core during its measured epochs "
        f"(measure.contended_pct={threshold_pct:g}), tagged wif.contended=true"
    )


def record_failure(job: Job, ended: Ended) -> None:
    """A run that did not finish: its error tagged, its traceback kept, and the sweep's tally."""
    outcome = ended.outcome
    err = outcome.error or {}
    text = f"{err.get('type')}: {err.get('message')}"
    job.tracker.set_tags(outcome.run_id, {names.TAG_ERROR: text[:ERROR_TAG_LIMIT]})
    if err.get("traceback"):
        job.tracker.client.log_text(outcome.run_id, err["traceback"], "error.txt")
        to_log_file(f"{job.label}  traceback of the run's error:\n{err['traceback']}", log)
    if ended.duplicate:
        job.tally.skipped += 1
    elif outcome.status == KILLED:
        job.tally.killed += 1
    else:
        job.tally.failed += 1
        job.tally.failures.append(f"{job.label}: {text}")
    log.error("%s  %s: %s", job.label, outcome.status, text)
