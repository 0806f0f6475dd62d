"""One job of a sweep, as Hydra calls it: checked, recorded in MLflow, run (wif.run.supervise), resumed.

The job turns the composed config into a typed one and checks it, skips a configuration that already
has a FINISHED run (resume), closes runs a dead sweep left RUNNING, opens the MLflow run with its tags,
hands the run to `wif.run.supervise`, and sets the final status, the summary metrics and the exit code.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Dict, Optional

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from wif.config import (
    Config,
    ConfigError,
    DataSource,
    EngineName,
    TrainerMode,
    TransferKind,
    as_plain,
    validate,
    warnings_for,
)
from wif.config.engine_checks import validate_dali_driver
from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED, EXIT_INTERRUPTED, to_log_file
from wif.config.targets import typed
from wif.data.folder_check import require_readable
from wif.data.formats.splits import prepare_storage
from wif.data.loaders import silence_worker_count_warning
from wif.measure.contention import is_contended
from wif.measure.lifetime import owner_tags
from wif.measure.sysinfo import host_tags, usable_cores
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker, close_stale_runs, config_hash
from wif.run.forking import preload
from wif.run.model import model_label
from wif.run.step import step_label
from wif.run.supervise import REFUSED, Outcome, interrupt, resolve_device, supervise
from wif.run.targets import check_user_code
from wif.sweep import callback
from wif.sweep.cluster import cluster_tags
from wif.sweep.gpus import pin_gpu, require_gpus

log = logging.getLogger("wif")
# Keys that do not change what a run measures: left out of the identity that resume matches on.
NOT_IDENTITY = ("tracking", "resume", "progress", "measure", "sweep", "race")
ERROR_TAG_LIMIT = 4000
# Keys added after the first studies (the user's own model, data and step; storage formats; decoding on the
# device; uint8 transfers), at their defaults: left out of the identity, so that earlier runs still resume.
NEW_KEY_DEFAULTS = {
    "model": {"arch": None, "weights": None, "_target_": None, "kwargs": {}},
    "data": {
        "_target_": None,
        "kwargs": {},
        "format": None,
        "path": None,
        "shard_mb": 64.0,
        "shuffle_buffer": 1000,
        "page_cache": "warm",
        "decode": "host",
        "decode_backend": "auto",
    },
    "trainer": {
        "precision": "fp32",
        "channels_last": False,
        "compile": False,
        "optimizer": {"_target_": "torch.optim.SGD", "kwargs": {}},
        "nproc": 1,
        "dist_timeout_s": 300.0,
        "threads": None,
    },
    "transfer": {"uint8": False},
}


_TRACKERS: Dict[tuple, Tracker] = {}


def _tracker(uri: str, experiment: str) -> Tracker:
    """One store connection per process and experiment: opening SQLite costs ~0.75 s."""
    key = (uri, experiment)
    if key not in _TRACKERS:
        _TRACKERS[key] = Tracker(uri, experiment)
    return _TRACKERS[key]


def run_identity(conf: Config, device: str) -> dict:
    """What makes two runs the same job (resume finds a finished run by its hash): the configuration on the
    device it resolved to, without the keys that only say how the job is run, tracked or swept."""
    identity = {k: v for k, v in as_plain(conf).items() if k not in NOT_IDENTITY}
    identity["data"] = {
        k: v for k, v in identity["data"].items() if k != "cache_dir" and not (k == "skip_bad" and not v)
    }  # runs before skip_bad keep theirs
    for group, keys in NEW_KEY_DEFAULTS.items():  # runs from before these keys existed resume as the same jobs
        identity[group] = {k: v for k, v in identity[group].items() if not (k in keys and v == keys[k])}
    identity["device"] = device
    if conf.engine.name is EngineName.dataloader:  # runs from before engines existed resume as the same jobs
        identity.pop("engine")
    return identity


def cell_name(conf: Config) -> str:
    """Loader option, the loader knobs set away from PyTorch's defaults, the engine when it is not
    DataLoader, data.format when set and a cold page cache, the stream prefetcher and uint8 batches when set by
    hand, decoding on the device, and the fraction: what the report compares
    across repeats. data=fixed runs (the report's upper bound) get a cell of their own, so grouping by cell
    never pools them with a loader option."""
    if conf.data.source is DataSource.fixed:
        return f"fixed@{conf.data.fraction:g}"
    lo = conf.loader
    knobs = [name for name, on in (("persistent", lo.persistent_workers), ("out_of_order", not lo.in_order)) if on]
    if lo.multiprocessing_context is not None:
        knobs.append(lo.multiprocessing_context.value)
    if conf.engine.name is not EngineName.dataloader:
        knobs.append(conf.engine.name.value)
    if conf.data.format is not None:  # data.format and a cold page cache: cells of their own (docs/formats.md)
        knobs.append(conf.data.format.value)
    if conf.data.page_cache.value == "cold":
        knobs.append(conf.data.page_cache.value)
    if conf.trainer.nproc > 1:  # a data-parallel run (wif.run.ddp) is never pooled with a one-process one
        knobs.append(f"ddp{conf.trainer.nproc}")
    if conf.trainer.threads is not None:  # the model's CPU threads, set by hand
        knobs.append(f"threads{conf.trainer.threads}")
    if conf.transfer.kind is TransferKind.stream:  # no loader option sets these: set by hand, cells of their own
        knobs.append("stream")
    if conf.transfer.uint8:
        knobs.append("uint8")
    if conf.data.decode.value == "device":  # decoded on the device: never pooled with the host's decode
        knobs.append(
            "device_decode" + ("" if conf.data.decode_backend.value == "auto" else f"_{conf.data.decode_backend.value}")
        )
    return "+".join([lo.name, *knobs]) + f"@{conf.data.fraction:g}"


def _sweep_position() -> tuple:
    """(sweep id, position in the sweep, whether this job is one of a multirun)."""
    try:
        hc = HydraConfig.get()
    except ValueError:  # called outside a Hydra app (tests)
        return "none", 0, False
    multirun = hc.mode is not None and hc.mode.name == "MULTIRUN"
    return (callback.sweep_id(hc) if multirun else hc.run.dir), int(hc.job.get("num", 0) or 0), multirun


def run_job(cfg: DictConfig) -> Optional[float]:
    """Hydra's task: returns the run's mean epoch time, or None when it was skipped or failed."""
    preload()  # once per process; after that a no-op
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGUSR2, interrupt)  # SLURM's warning before the time limit (hydra/launcher=slurm): no requeue
    t_job = time.monotonic()
    try:
        conf: Config = typed(cfg)
        validate(conf)
        check_user_code(conf, data=False)  # a custom model factory, called once here in a forked process; the
        # dataset factory is called by the run's own process, which checks it before the MLflow run exists
        device = resolve_device(conf.device)
        validate_dali_driver(conf, device)  # engine=dali: the driver the installed DALI's CUDA needs (NVML)
        folder = require_readable(conf.data) if conf.data.source is DataSource.folder and not conf.data.path else None
        storage = prepare_storage(conf.data)  # packs built once and checked, cold page cache refused where it can't be
        if conf.trainer.nproc == 1:
            pin_gpu(device)  # never two timed jobs on one GPU
        else:
            require_gpus(conf.trainer.nproc, device)  # one GPU per rank
    except ConfigError as err:
        log.error("Bad setting: %s", err)
        raise SystemExit(EXIT_BAD_SETTING) from None
    for message in warnings_for(conf, device == "cuda", usable_cores()):
        log.warning(message)
    silence_worker_count_warning()

    plain = as_plain(conf)
    digest = config_hash(run_identity(conf, device))
    tracker = _tracker(conf.tracking.uri, conf.tracking.experiment)
    sweep_id, pos, multirun = _sweep_position()
    tally = callback.TALLY
    setting = cell_name(conf).rpartition("@")[
        0
    ]  # the cell's setting (pin_nb+uint8, baseline+dali), as the report names it
    label = f"[{pos + 1}/{tally.total or '?'}] {setting} fraction={conf.data.fraction} repeat={conf.repeat}"
    close_stale_runs(tracker, digest, label)
    if conf.resume and tracker.finished_runs(digest):
        tally.skipped += 1
        log.info("%s  skipped: a FINISHED run of this configuration exists (resume=false reruns it)", label)
        return None

    fraction = f"{conf.data.fraction:g}"
    kind = "loader" if conf.trainer.mode is TrainerMode.loader_only else "train"  # loader-only: not in the report
    cell = cell_name(conf)
    setting = cell.rsplit("@", 1)[0]
    tags = {
        **host_tags(),
        "wif.kind": kind,
        "wif.loader": conf.loader.name,
        "wif.fraction": fraction,
        "wif.cell": cell,
        "wif.device": device,
        "wif.gpu": "none",
        "wif.engine": conf.engine.name.value,
        "wif.model": model_label(conf.model),
        "wif.step": step_label(conf.trainer),
        "wif.transfer": conf.transfer.kind.value,
        "wif.block": conf.repeat,
        "wif.repeat": conf.repeat,
        "wif.sweep_id": sweep_id,
        "wif.sweep_pos": pos,
        "wif.config_hash": digest,
    }
    tags.update(cluster_tags())
    if conf.race.id:
        tags["wif.race_id"] = conf.race.id
    tags.update(owner_tags())  # a later sweep can tell a run orphaned by a dead process
    params = {**plain, "wif": {"engine": conf.engine.name.value}}  # param wif.engine, beside the tag
    if folder is not None:
        params["data"] = {**plain["data"], "skipped_files": len(folder.bad)}
    params["data"] = {**params.get("data", plain["data"]), **storage}  # data.pack_records, pack_bytes (formats.md)
    prefix = "" if kind == "train" else f"{kind}-"

    def open_run() -> str:
        run_id = tracker.start_run(f"{prefix}{setting}-f{fraction}-r{conf.repeat}", params, tags, plain)
        log.info("%s  started on %s (MLflow run %s)", label, device, run_id)
        return run_id

    outcome = supervise(conf, device, tracker, open_run, label, tags)
    if outcome.status == REFUSED:  # e.g. data=custom's factory failed: no run was created, as for any bad setting
        log.error("Bad setting: %s", (outcome.error or {}).get("message"))
        raise SystemExit(EXIT_BAD_SETTING)
    run_id = outcome.run_id

    # One FINISHED run per configuration and repeat, ever: with resume (the default) a job another process
    # finished meanwhile makes this run the duplicate; with resume=false this run supersedes the older ones.
    earlier = tracker.finished_runs(digest) if outcome.status == FINISHED else []
    duplicate = bool(earlier) and conf.resume
    if duplicate:
        outcome = Outcome(KILLED, {"type": "Duplicate", "message": f"run {earlier[0]} finished the same job first"})
    for old in earlier if not conf.resume else []:
        tracker.set_tags(old, {"wif.superseded_by": run_id})
        tracker.end_run(old, KILLED)
    if outcome.status == FINISHED:
        s = outcome.summary
        s["job_overhead_s"] = time.monotonic() - t_job - s["time_total_s"]
        tracker.log_metrics(run_id, s)
        other = s.get("host_other_cpu_pct")
        contended = is_contended(other, conf.measure.contended_pct)
        tracker.set_tags(run_id, {"wif.contended": str(contended).lower()})
        tally.finished += 1
        result = f"test_acc {s['test_acc']:.3f}" if "test_acc" in s else f"{s['throughput_mean_img_s']:.0f} img/s"
        note = (
            (
                f"; CONTENDED: other processes used {other:.0f}% of a core during its measured epochs "
                f"(measure.contended_pct={conf.measure.contended_pct:g}), tagged wif.contended=true"
            )
            if contended
            else ""
        )
        log.info(
            "%s  finished: %.3f s/epoch median (warm-up excluded), %s%s", label, s["epoch_time_median_s"], result, note
        )
    else:
        err = outcome.error or {}
        text = f"{err.get('type')}: {err.get('message')}"
        tracker.set_tags(run_id, {"wif.error": text[:ERROR_TAG_LIMIT]})
        if err.get("traceback"):
            tracker.client.log_text(run_id, err["traceback"], "error.txt")
            to_log_file(f"{label}  traceback of the run's error:\n{err['traceback']}", log)
        if duplicate:
            tally.skipped += 1
        elif outcome.status == KILLED:
            tally.killed += 1
        else:
            tally.failed += 1
            tally.failures.append(f"{label}: {text}")
        log.error("%s  %s: %s", label, outcome.status, text)
    tracker.end_run(run_id, outcome.status)
    if outcome.status == KILLED and not duplicate:
        log.error(
            "Interrupted: the run is marked KILLED%s; run the same command again to resume.",
            " and the sweep stops here" if multirun else "",
        )
        raise SystemExit(EXIT_INTERRUPTED)
    if outcome.status == FAILED and not multirun:  # a multirun goes on, and fails at its end (wif.sweep)
        raise SystemExit(EXIT_FAILED)
    return outcome.summary.get("epoch_time_mean_s")
