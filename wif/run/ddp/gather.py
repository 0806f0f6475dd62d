"""The job's figures from its ranks' own: an epoch lasts as long as its slowest rank; each rank's figures are
kept beside it as rank{i}_... . Plain functions of the rows the ranks gathered: no torch, no processes."""

from __future__ import annotations

from typing import Any, Dict, List

RANK_KEYS = ("epoch_time_s", "data_wait_s", "copy_s", "gpu_blocked_s", "compute_s", "first_batch_s", "samples")
VRAM_KEYS = ("vram_peak_allocated_mb", "vram_peak_reserved_mb")


def _mean(rows: List[Dict[str, Any]], key: str) -> Any:
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def _per_rank(rows: List[Dict[str, Any]], keys: tuple) -> Dict[str, float]:
    return {f"rank{i}_{k}": float(r[k]) for i, r in enumerate(rows) for k in keys if r.get(k) is not None}


def _vram(rows: List[Dict[str, Any]]) -> Dict[str, float]:
    """Each rank's torch allocator peaks, their max as the job's (the rank that needs the biggest GPU) and
    their sum (`..._sum_mb`: what the job holds over all its GPUs)."""
    out = _per_rank(rows, VRAM_KEYS)
    out.update({k: max(r[k] for r in rows) for k in VRAM_KEYS if all(k in r for r in rows)})
    out.update({k.replace("_mb", "_sum_mb"): sum(r[k] for r in rows) for k in VRAM_KEYS if all(k in r for r in rows)})
    return out


def job_epoch(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One epoch of the job: the slowest rank's time and its breakdown (data wait, copy, compute: what held the
    job back), the images of every rank, the window from the first start to the last end; losses and
    accuracies are the ranks' means (DistributedSampler gives every rank as many samples)."""
    slowest = max(rows, key=lambda r: r["epoch_time_s"])
    job = dict(slowest)
    job.update(
        {
            "samples": sum(r["samples"] for r in rows),
            "t_start": min(r["t_start"] for r in rows),
            "t_end": max(r["t_end"] for r in rows),
            "slowest_rank": float(rows.index(slowest)),
        }
    )
    for key in ("train_loss", "val_loss", "val_acc"):
        job[key] = _mean(rows, key)
    if all(r.get("val_time_s") is not None for r in rows):
        job["val_time_s"] = max(r["val_time_s"] for r in rows)
    job.update(_per_rank(rows, RANK_KEYS))
    job.update(_vram(rows))
    return job


def job_result(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The test pass of the job (each rank tests its shard) and the VRAM peaks of every rank."""
    job = {k: v for k, v in rows[0].items() if k not in VRAM_KEYS}
    for key in ("test_loss", "test_acc"):
        if key in rows[0]:
            job[key] = _mean(rows, key)
    if "test_time_s" in rows[0]:
        job["test_time_s"] = max(r["test_time_s"] for r in rows)
    job.update(_vram(rows))
    return job
