"""Runs of known figures logged as train.py logs them, into a store with the study's experiment (`study_store`), and a
run's samples per epoch read back (tests/test_report*.py, tests/test_bandwidth.py, tests/test_engines.py, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

GPU = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True)
class RunFigures:
    """What a logged run says beyond its cell and epoch time; each field a keyword of `log_run`."""

    device: str = "cuda"
    status: str = "FINISHED"
    sweep_pos: int = 0
    error: str | None = None
    ram: float = 2000.0
    vram: float | None = 1500.0
    source: str = "synthetic"
    other_cpu: float = 3.0
    median: float | None = None  # the run's median epoch time; its mean `time` when None
    compute: float | None = None
    busy: float | None = None


def log_run(client: MlflowClient, exp_id: str, loader: str, fraction: float, block: int, time: float, **figures) -> str:
    """One training run as train.py logs it (the MLflow contract), with a known epoch time.

    Median and mean alike unless `median` is given. A run with `other_cpu` above 25 is tagged contended, as
    train.py does. `figures` are the fields of `RunFigures`.
    """
    run = RunFigures(**figures)
    tags = {
        "wif.kind": "train",
        "wif.loader": loader,
        "wif.fraction": str(fraction),
        "wif.cell": f"{loader}@{fraction}",
        "wif.device": run.device,
        "wif.gpu": GPU if run.device == "cuda" else "none",
        "wif.model": "googlenet",
        "wif.block": str(block),
        "wif.sweep_pos": str(run.sweep_pos),
        "wif.sweep_id": "s1",
    }
    if run.error:
        tags["wif.error"] = run.error
    tags["wif.contended"] = str(run.other_cpu > 25).lower()
    run_id = client.create_run(exp_id, run_name=f"{loader}@{fraction}#{block}", tags=tags).info.run_id
    final = {
        "epoch_time_mean_s": time,
        "epoch_time_median_s": time if run.median is None else run.median,
        "host_other_cpu_pct": run.other_cpu,
        "throughput_mean_img_s": 1000.0 / time,
        "time_total_s": 4 * time,
        "data_wait_share_mean": 0.2,
        "ram_peak_rss_mb": run.ram * 1.5,
        "ram_peak_uss_mb": run.ram * 0.5,
        "ram_peak_pss_mb": run.ram,
        "test_acc": 0.7,
    }
    optional = (("compute_mean_s", run.compute), ("gpu_util_mean_pct", run.busy))
    final.update({k: v for k, v in optional if v is not None})
    if run.vram is not None:
        final.update(
            {
                "vram_peak_allocated_mb": run.vram * 0.5,
                "vram_peak_reserved_mb": run.vram * 0.8,
                "vram_peak_device_mb": run.vram,
            }
        )
    metrics = [Metric(k, v, 0, 0) for k, v in final.items()]
    metrics += [Metric("epoch_time_s", time * (2.0 if e == 0 else 1.0), 0, e) for e in range(4)]
    metrics += [Metric("val_acc", 0.5 + 0.05 * e, 0, e) for e in range(4)]
    params = [
        Param("data.batch_size", "64"),
        Param("data.fraction", str(fraction)),
        Param("data.source", run.source),
        Param("loader.name", loader),
        Param("trainer.epochs", "4"),
        Param("measure.contended_pct", "25.0"),
    ]
    client.log_batch(run_id, metrics=metrics, params=params)
    if run.status != "RUNNING":
        client.set_terminated(run_id, run.status)
    return run_id


def study_store(path) -> tuple[MlflowClient, str, str]:
    uri = f"sqlite:///{path}/mlflow.db"
    client = MlflowClient(uri)
    return client, uri, client.create_experiment("who_is_faster", artifact_location=str(path / "artifacts"))


def samples_per_epoch(store: str, run_id: str) -> list:
    client = MlflowClient(store)
    rate, time = (
        {h.step: h.value for h in client.get_metric_history(run_id, key)}
        for key in ("throughput_img_s", "epoch_time_s")
    )
    return [round(rate[step] * time[step]) for step in sorted(time)]
