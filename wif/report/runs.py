"""Reading the study's training runs from MLflow into one flat DataFrame, one row per run.

The report depends on the tags and metrics training writes (its MLflow contract), never on the training
code. The names are `wif.measure.names`'; this module is the only place that maps them to the report's columns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd
from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from wif.measure import names
from wif.measure.names import Cell
from wif.measure.tracking import server_silence

DEFAULT_EXPERIMENT = "who_is_faster"
FINISHED = "FINISHED"
MEDIAN, MEAN = names.EPOCH_TIME_MEDIAN_S, names.EPOCH_TIME_MEAN_S  # a run's figure: over its epochs, warm-up left out
STATISTICS = {"median": MEDIAN, "mean": MEAN}

FINAL_METRICS = (
    MEDIAN,
    MEAN,
    names.HOST_OTHER_CPU_PCT,
    names.THROUGHPUT_MEAN_IMG_S,
    names.TIME_TOTAL_S,
    names.SETUP_S,
    names.DATA_WAIT_SHARE_MEAN,
    names.VRAM_PEAK_ALLOCATED_MB,
    names.VRAM_PEAK_RESERVED_MB,
    names.VRAM_PEAK_DEVICE_MB,
    names.RAM_PEAK_RSS_MB,
    names.RAM_PEAK_USS_MB,
    names.RAM_PEAK_PSS_MB,
    "workers_peak",
    names.VAL_ACC,
    names.TEST_ACC,
    names.COPY_S,
    names.COMPUTE_MEAN_S,  # the step's time: against the bound's, what the loader's host work adds to it
    names.GPU_UTIL_MEAN_PCT,  # NVML's busy share over the steady epochs (CUDA)
    names.COPY_BYTES_PER_EPOCH,  # the last epoch's (per-epoch metrics): wif.report.copycost
    names.JOB_OVERHEAD_S,  # a run's cost beside its epochs: wif.report.document.cost_note
    names.VAL_TIME_TOTAL_S,
    names.TEST_TIME_S,
)
TAGS = {  # column: tag
    "loader": names.TAG_LOADER,
    "fraction": names.TAG_FRACTION,
    "cell": names.TAG_CELL,
    "device": names.TAG_DEVICE,
    "gpu": names.TAG_GPU,
    "model": names.TAG_MODEL,
    "block": names.TAG_BLOCK,
    "sweep_pos": names.TAG_SWEEP_POS,
    "sweep_id": names.TAG_SWEEP_ID,
    "error": names.TAG_ERROR,
    "contended": names.TAG_CONTENDED,
    "race_id": names.TAG_RACE_ID,
    "gpu_uuid": names.TAG_GPU_UUID,  # the very device: wif.report.copycost matches wif-bandwidth's runs on it
    "step": names.TAG_STEP,
    "page_cache_cold": names.TAG_PAGE_CACHE_COLD,
    "page_cache_note": names.TAG_PAGE_CACHE_NOTE,
    "decode_note": names.TAG_DECODE_NOTE,  # data.decode=device on a CPU: wif.report.document.decode_note
}
PARAMS = {
    "baseline": "tracking.baseline",
    "batch_size": "data.batch_size",
    "data_source": "data.source",
    "epochs": "trainer.epochs",
    "contended_pct": "measure.contended_pct",
    "pin_memory": "loader.pin_memory",
}
PAGE_SIZE = 1000


def baseline_of(runs: pd.DataFrame) -> str:
    """The setting these runs' speedups are measured against: most runs' tracking.baseline, else `baseline`."""
    named = runs["baseline"].dropna() if "baseline" in runs else pd.Series(dtype=object)
    return str(named.mode().iloc[0]) if len(named) else "baseline"


class ReportInputError(Exception):
    """Nothing to report on (unknown experiment, no runs, a bad filter): said in one line to the user."""


@dataclass
class RunFilter:
    """What narrows the runs read: a sweep, exact tags, a start date, a device."""

    sweep_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    since: str | None = None  # YYYY-MM-DD, local time
    device: str | None = None

    def to_mlflow(self) -> str:
        """The MLflow search filter string; train runs only."""
        tags = {names.TAG_KIND: "train", **self.tags}
        if self.sweep_id:
            tags[TAGS["sweep_id"]] = self.sweep_id
        if self.device:
            tags[TAGS["device"]] = self.device
        clauses = [f"tags.`{key}` = {_quote(value)}" for key, value in tags.items()]
        if self.since:
            clauses.append(f"attributes.start_time >= {_epoch_ms(self.since)}")
        return " and ".join(clauses)


def open_store(uri: str) -> MlflowClient:
    """A client on an existing store: MLflow would silently create an empty SQLite file where none is."""
    silence = server_silence(uri)
    if silence:
        raise ReportInputError(silence)
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///") :]).expanduser()
        if not path.is_file():
            raise ReportInputError(f"no MLflow store at {path.resolve()}: run wif-study first, or pass --tracking-uri")
    return MlflowClient(uri)


def experiment_id(client: MlflowClient, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        raise ReportInputError(f"no experiment named {name!r} in {client.tracking_uri}")
    return experiment.experiment_id


def _other_kinds(client: MlflowClient, exp_id: str) -> str:
    """What the experiment holds, said where no run matched: a watch's runs, say, are read in the MLflow UI."""
    runs = client.search_runs([exp_id], max_results=1000)
    kinds = Counter(r.data.tags.get(names.TAG_KIND, "untagged") for r in runs)
    if not kinds:
        return ""
    held = ", ".join(f"{n} {kind} run{'s' * (n != 1)}" for kind, n in kinds.most_common())
    return f". It holds {held}: wif-report compares wif-study's training runs, and `mlflow ui` shows every run"


def load_runs(client: MlflowClient, experiment: str, run_filter: RunFilter) -> pd.DataFrame:
    """Every training run matching `run_filter`, whatever its status, one row each, oldest first."""
    exp_id = experiment_id(client, experiment)
    rows = [_row(run) for run in _search(client, exp_id, run_filter.to_mlflow())]
    if not rows:
        raise ReportInputError(
            f"no training runs in experiment {experiment!r} at {client.tracking_uri} matching {run_filter.to_mlflow()}"
            + _other_kinds(client, exp_id)
        )
    frame = pd.DataFrame(rows).sort_values("start_time", ignore_index=True)
    frame["fraction"] = pd.to_numeric(frame["fraction"], errors="coerce")
    frame["sweep_pos"] = pd.to_numeric(frame["sweep_pos"], errors="coerce")
    frame["loader"] = [_setting(cell, loader) for cell, loader in zip(frame["cell"], frame["loader"])]
    frame["testbed"] = [_testbed(*key) for key in zip(frame["device"], frame["gpu"], frame["model"], frame["step"])]
    frame["contended"] = frame["contended"].fillna("false").str.lower() == "true"
    return frame


def metric_histories(client: MlflowClient, run_ids: Iterable[str], key: str) -> pd.DataFrame:
    """Per-step values of `key` for the given runs, as rows (run_id, step, value)."""
    rows = [
        {"run_id": run_id, "step": m.step, "value": m.value}
        for run_id in run_ids
        for m in client.get_metric_history(run_id, key)
    ]
    return pd.DataFrame(rows, columns=["run_id", "step", "value"])


def exclusion_reasons(runs: pd.DataFrame, value: str) -> pd.Series:
    """Why each run stays out of the statistics; '' for the runs that enter them."""
    reasons = pd.Series("", index=runs.index)
    reasons[runs["fraction"].isna()] = "no wif.fraction tag"
    missing = f"no {value}" + (
        " (logged before wif recorded it: --statistic mean reads these runs)" if value == MEDIAN else ""
    )
    reasons[runs[value].isna()] = missing
    unfinished = runs["status"] != FINISHED
    reasons[unfinished] = runs.loc[unfinished, "error"].fillna("").replace("", "not finished")
    return reasons


def _search(client: MlflowClient, exp_id: str, filter_string: str) -> Iterable[Run]:
    token = None
    while True:
        page = client.search_runs([exp_id], filter_string, ViewType.ACTIVE_ONLY, PAGE_SIZE, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _row(run: Run) -> dict:
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    row = {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "status": run.info.status,
        "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
    }
    row.update({column: tags.get(tag) for column, tag in TAGS.items()})
    row.update({column: params.get(param) for column, param in PARAMS.items()})
    row.update({name: metrics.get(name) for name in FINAL_METRICS})
    return row


def _setting(cell: str | None, loader: str | None) -> str:
    """The row label: the cell's setting, the loader option plus any knobs that vary; else the loader."""
    if cell and "@" in cell:
        return Cell.parse(cell).setting
    return loader or "?"


def _testbed(device: str | None, gpu: str | None, model: str | None, step: str | None = None) -> str:
    """What figures may be pooled under, as one label.

    Args:
        device: the device the run trained on.
        gpu: its GPU model; 'none' on a CPU.
        model: the network trained.
        step: the step when set away from the study's: precision, channels_last, compile, optimizer (tag wif.step).
    """
    parts = [device or "unknown device"]
    if gpu and gpu != "none":
        parts.append(gpu)
    parts.append(model or "unknown model")
    if isinstance(step, str) and step not in ("", "fp32"):
        parts.append(step)
    return ", ".join(parts)


def _quote(value: str) -> str:
    if "'" in value:
        raise ReportInputError(f"filter values cannot contain a single quote: {value!r}")
    return f"'{value}'"


def _epoch_ms(day: str) -> int:
    try:
        return int(datetime.strptime(day, "%Y-%m-%d").timestamp() * 1000)
    except ValueError:
        raise ReportInputError(f"--since {day!r}: expected a date as YYYY-MM-DD") from None


def parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE pairs from the command line."""
    tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ReportInputError(f"--tag {pair!r}: expected KEY=VALUE")
        tags[key] = value
    return tags
