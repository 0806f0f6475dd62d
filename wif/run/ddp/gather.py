"""The job's figures from its ranks' own: an epoch lasts as long as its slowest rank.

Each rank's figures are kept beside the job's as rank{i}_... . Plain functions of the rows the ranks gathered:
no torch, no processes.
"""

from __future__ import annotations

from typing import Any, Dict, List

from wif.measure import names

RANK_KEYS = (
    names.EPOCH_TIME_S,
    names.DATA_WAIT_S,
    names.COPY_S,
    names.GPU_BLOCKED_S,
    names.COMPUTE_S,
    names.FIRST_BATCH_S,
    "samples",
)
VRAM_KEYS = (names.VRAM_PEAK_ALLOCATED_MB, names.VRAM_PEAK_RESERVED_MB)


def _mean(rows: List[Dict[str, Any]], key: str) -> Any:
    """The ranks' mean of `key`, over those that have it; None where none has."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def _per_rank(rows: List[Dict[str, Any]], keys: tuple) -> Dict[str, float]:
    """Each rank's figures under `keys`, named rank{i}_<key>."""
    return {f"rank{i}_{k}": float(r[k]) for i, r in enumerate(rows) for k in keys if r.get(k) is not None}


def _vram(rows: List[Dict[str, Any]]) -> Dict[str, float]:
    """Each rank's allocator peaks, their max as the job's, and their sum over its GPUs as `..._sum_mb`."""
    out = _per_rank(rows, VRAM_KEYS)
    out.update({k: max(r[k] for r in rows) for k in VRAM_KEYS if all(k in r for r in rows)})
    out.update({k.replace("_mb", "_sum_mb"): sum(r[k] for r in rows) for k in VRAM_KEYS if all(k in r for r in rows)})
    return out


def job_epoch(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One epoch of the job: the slowest rank's time and breakdown, every rank's images, the ranks' mean losses."""
    slowest = max(rows, key=lambda r: r[names.EPOCH_TIME_S])
    job = dict(slowest)
    job.update(
        {
            "samples": sum(r["samples"] for r in rows),
            "t_start": min(r["t_start"] for r in rows),
            "t_end": max(r["t_end"] for r in rows),
            "slowest_rank": float(rows.index(slowest)),
        }
    )
    for key in (names.TRAIN_LOSS, names.VAL_LOSS, names.VAL_ACC):
        job[key] = _mean(rows, key)
    if all(r.get(names.VAL_TIME_S) is not None for r in rows):
        job[names.VAL_TIME_S] = max(r[names.VAL_TIME_S] for r in rows)
    job.update(_per_rank(rows, RANK_KEYS))
    job.update(_vram(rows))
    return job


def job_result(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The job's test pass, each rank testing its shard, and every rank's VRAM peaks."""
    job = {k: v for k, v in rows[0].items() if k not in VRAM_KEYS}
    for key in ("test_loss", names.TEST_ACC):
        if key in rows[0]:
            job[key] = _mean(rows, key)
    if names.TEST_TIME_S in rows[0]:
        job[names.TEST_TIME_S] = max(r[names.TEST_TIME_S] for r in rows)
    job.update(_vram(rows))
    return job
