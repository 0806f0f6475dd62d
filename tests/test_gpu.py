"""GPU-only checks: they run for real where CUDA is present and are skipped elsewhere."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import compose_cfg, run_train, train_runs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_vram_and_gpu_idle_figures(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "device=cuda",
        "loader=baseline,pin_nb,gpu_resident",
        "data.fraction=0.7",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {r.data.tags["wif.loader"]: r.data.metrics for r in train_runs(store, status="FINISHED")}
    for m in runs.values():
        assert 0 < m["vram_peak_allocated_mb"] <= m["vram_peak_reserved_mb"] <= m["vram_peak_device_mb"]
        assert 0 <= m["gpu_idle_s"] < m["epoch_time_s"]
        assert "gpu_util_pct" in m
        assert 0 <= m["gpu_blocked_s"] < m["epoch_time_s"] and 0 <= m["copy_s"] <= m["data_wait_s"]
    assert runs["gpu_resident"]["gpu_idle_s"] < runs["baseline"]["gpu_idle_s"]
    # issue 47 item 1: only a blocking copy waits behind the step's kernels; nothing is copied, or nothing blocks
    assert runs["gpu_resident"]["gpu_blocked_s"] == runs["pin_nb"]["gpu_blocked_s"] == 0.0


def test_the_timed_loop_never_synchronizes(cache_dir: Path) -> None:
    """With pinned memory and non_blocking copies, the only implicit syncs of an epoch are the reads
    after its end: their count must not grow with the number of steps (sync debug mode reports each)."""
    from wif.data.datasets import load_datasets
    from wif.data.loaders import Reading, build_batches
    from wif.data.transfer import make_transfer
    from wif.run.loop import train_epoch
    from wif.run.model import build_model
    from wif.run.step import Step

    conf = OmegaConf.to_object(
        compose_cfg("preset=smoke", "loader=pin_nb", "data.fraction=0.7", f"data.cache_dir={cache_dir}")
    )
    device = torch.device("cuda", 0)
    data = load_datasets(conf.data)
    batches = build_batches(data.train, conf.loader, Reading(batch_size=32, train=True, seed=0, pin=True))
    model = build_model(conf.model, data.num_classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    transfer = make_transfer(conf.transfer, device)
    step = Step(model=model, optimizer=opt, loss_fn=torch.nn.CrossEntropyLoss(), aux_weight=0.3, device=device)
    train_epoch(step, batches, transfer)  # warm-up: allocator, cuDNN
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats = train_epoch(step, batches, transfer)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(batches) > 10 and len(syncs) <= 2, [str(w.message) for w in syncs]
    assert 0 < stats.compute_s < stats.epoch_time_s and 0 <= stats.gpu_idle_s < stats.epoch_time_s
