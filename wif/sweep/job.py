"""One job of a sweep, as Hydra calls it: checked, recorded in MLflow, run (wif.run.supervise), resumed.

`run_job` reads as its steps; those that touch the store live in wif.sweep.job_record.
"""

from __future__ import annotations

import functools
import logging
import signal
import time
from typing import Optional

from omegaconf import DictConfig

from wif.config import Config, ConfigError, DataSource, validate, warnings_for
from wif.config.engine_checks import validate_dali_driver
from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED, EXIT_INTERRUPTED
from wif.config.targets import typed
from wif.data.folder_check import require_readable
from wif.data.formats.splits import prepare_storage
from wif.data.loaders import silence_worker_count_warning
from wif.measure import names
from wif.measure.nvml import resolve_device
from wif.measure.sysinfo import usable_cores
from wif.measure.tracking import FAILED, FINISHED, KILLED, close_stale_runs
from wif.run.forking import interrupt, preload
from wif.run.supervise import REFUSED, Outcome, supervise
from wif.run.targets import check_user_code
from wif.sweep.gpus import pin_gpu, require_gpus
from wif.sweep.job_record import (
    Checked,
    Ended,
    new_run,
    open_run,
    place_job,
    record_failure,
    record_outcome,
    settle_duplicates,
    skip_if_finished,
)

log = logging.getLogger("wif")


def run_job(cfg: DictConfig) -> Optional[float]:
    """Hydra's task: returns the run's mean epoch time, or None when it was skipped or failed."""
    prepare_process()
    t_job = time.monotonic()
    checked = check_config(cfg)
    warn_about(checked)
    job = place_job(checked)
    close_stale_runs(job.tracker, job.digest, job.label)
    if skip_if_finished(job):
        return None
    new = new_run(job)
    outcome = supervise(
        conf=checked.conf,
        device=checked.device,
        tracker=job.tracker,
        open_run=functools.partial(open_run, job, new),
        label=job.label,
        tags=new.tags,
    )
    refuse_if_refused(outcome)
    ended = settle_duplicates(job, outcome)
    if ended.outcome.status == FINISHED:
        record_outcome(job, ended.outcome, t_job)
    else:
        record_failure(job, ended)
    job.tracker.end_run(ended.outcome.run_id, ended.outcome.status)
    exit_for(ended, job.place.multirun)
    return ended.outcome.summary.get(names.EPOCH_TIME_MEAN_S)


def prepare_process() -> None:
    """Preload once per process; SIGTERM and SLURM's SIGUSR2 end a run as Ctrl-C does."""
    preload()  # after the first job: a no-op
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGUSR2, interrupt)  # SLURM's warning before the time limit: no requeue
    # Ctrl-C in a store query makes sqlalchemy's pool log a traceback; the interrupt is said in one line
    logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)


def check_config(cfg: DictConfig) -> Checked:
    """The typed config, checked, on its device, with its data ready; a bad setting exits 2."""
    try:
        conf: Config = typed(cfg)
        validate(conf)
        check_user_code(conf, data=False)  # the model's factory, in a fork; the dataset's runs in the run
        device = resolve_device(conf.device)
        validate_dali_driver(conf, device)  # engine=dali: the driver the installed DALI's CUDA needs
        folder = require_readable(conf.data) if conf.data.source is DataSource.folder and not conf.data.path else None
        storage = prepare_storage(conf.data)  # packs built once; a cold page cache refused where it can't be
        claim_gpus(conf, device)
    except ConfigError as err:
        log.error("Bad setting: %s", err)
        raise SystemExit(EXIT_BAD_SETTING) from None
    return Checked(conf=conf, device=device, folder=folder, storage=storage)


def claim_gpus(conf: Config, device: str) -> None:
    """Never two timed jobs on one GPU; a multi-rank job needs one GPU per rank."""
    if conf.trainer.nproc == 1:
        pin_gpu(device)
    else:
        require_gpus(conf.trainer.nproc, device)


def warn_about(checked: Checked) -> None:
    """Say what the config may cost the run, then silence PyTorch's own warning on the worker count."""
    for message in warnings_for(checked.conf, checked.device == "cuda", usable_cores()):
        log.warning(message)
    silence_worker_count_warning()


def refuse_if_refused(outcome: Outcome) -> None:
    """A run refused before its record opened is a bad setting: exit 2, as for any other."""
    if outcome.status == REFUSED:  # e.g. data=custom's factory failed
        log.error("Bad setting: %s", (outcome.error or {}).get("message"))
        raise SystemExit(EXIT_BAD_SETTING)


def exit_for(ended: Ended, multirun: bool) -> None:
    """Exit 130 when interrupted; exit 1 when a single run failed. A multirun goes on, and fails at its end."""
    status = ended.outcome.status
    if status == KILLED and not ended.duplicate:
        log.error(
            "Interrupted: the run is marked KILLED%s; run the same command again to resume.",
            " and the sweep stops here" if multirun else "",
        )
        raise SystemExit(EXIT_INTERRUPTED)
    if status == FAILED and not multirun:
        raise SystemExit(EXIT_FAILED)
