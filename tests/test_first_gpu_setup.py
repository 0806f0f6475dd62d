"""Issue 47, the run's set-up on a first GPU: NVML's device memory and names (items 2, 12), the compile
warm-up's batch (8), fp16's GradScaler (9). CPU tests of the bookkeeping; each `gpu` test names its item when it
fails. tests/test_first_gpu.py has the loop's device paths and the helpers."""

from __future__ import annotations

import pytest
import torch

from tests.cuda import CUDA
from wif.run.loop import TimedFeed


# ----------------------------------------------------------------------------- items 2, 12: NVML
def test_issue47_item2_a_container_that_hides_the_runs_pids_is_said_and_counted_from_the_early_baseline() -> None:
    from collections import Counter

    from wif.measure import nvml

    here = {1, 4242}.__contains__  # the PIDs this (container's) view has
    host = [(812345, 900 << 20)]  # the driver's host PID for the run's process: never one of the container's
    assert nvml.vram_reading(host, {4242}, used=1500 << 20, baseline=500 << 20, exists=here) == (
        float(1000 << 20),
        nvml.FOREIGN_PIDS,
    )  # the device's rise over the baseline read before the run
    assert nvml.vram_reading([(4242, 700 << 20)], {4242}, 1500 << 20, 500 << 20, here) == (
        float(700 << 20),
        nvml.PER_PROCESS,
    )
    assert nvml.vram_reading([(1, 300 << 20)], {4242}, 900 << 20, 500 << 20, here)[1] == nvml.NOT_LISTED
    assert nvml.vram_reading([], {4242}, 400 << 20, 500 << 20, here) == (0.0, nvml.NONE_LISTED)
    assert nvml.vram_reading([(4242, None)], {4242}, 900 << 20, 500 << 20, here)[1] == nvml.NO_FIGURE
    seen = Counter({nvml.NONE_LISTED: 3, nvml.FOREIGN_PIDS: 40})  # nothing listed until the run's context existed
    assert nvml.source_tags(seen, baseline_late=False) == {
        "wif.vram_source": nvml.FALLBACK,
        "wif.vram_fallback": nvml.FOREIGN_PIDS,
    }
    assert nvml.source_tags(Counter({nvml.NONE_LISTED: 3, nvml.PER_PROCESS: 40}), False) == {
        "wif.vram_source": nvml.PER_PROCESS
    }
    assert "wif.vram_baseline" in nvml.source_tags(Counter({nvml.NOT_LISTED: 1}), baseline_late=True)
    if not CUDA:
        assert nvml.memory_baselines() == {}  # no NVML here: no baseline, nothing raised


def test_issue47_item12_a_mig_uuid_never_gets_the_gpu_prefix() -> None:
    from wif.measure.nvml import nvml_names

    mig = "MIG-4bdc1e2a-3c6f-5f1b-9d8e-0a1b2c3d4e5f"
    assert nvml_names(mig) == [mig] and nvml_names("GPU-1234") == ["GPU-1234"]
    bare = mig[4:]  # as torch's device properties give it, for a GPU and a MIG instance alike
    assert nvml_names(bare) == [f"GPU-{bare}", f"MIG-{bare}"]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item12_nvml_finds_the_device_torch_names() -> None:
    """On a MIG instance too (CUDA_VISIBLE_DEVICES=MIG-...): the probe resolves torch's bare UUID, and its
    utilization reads as a figure or None (a MIG instance has no counter), never an exception."""
    from wif.measure.nvml import GpuProbe, nvml_names

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    probe = GpuProbe(uuid)  # LookupError, naming the UUIDs tried, where NVML knows none
    try:
        util = probe.utilization()
        assert probe.uuid in nvml_names(uuid) and probe.memory(set()) >= 0 and (util is None or util >= 0), (
            f"issue 47 item 12: {uuid} as {probe.uuid}"
        )
    finally:
        probe.close()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item2_vram_peak_device_counts_the_context_and_gpu_residents_upload(tmp_path, store, cache_dir):
    """However NVML is read (per process, or the device over a baseline in a container), the device figure holds
    the allocator's reserve plus the CUDA context: a baseline read after the context existed missed it."""
    from tests.conftest import run_train, train_runs

    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "device=cuda",
        "loader=gpu_resident",
        "data.fraction=0.7",
        "trainer.epochs=2",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = train_runs(store, status="FINISHED")
    m, tags = run.data.metrics, run.data.tags
    assert tags.get("wif.vram_source") in ("per_process", "device_minus_baseline"), tags
    assert "wif.vram_baseline" not in tags, "issue 47 item 2: the baseline was read after the run started"
    assert m["vram_peak_device_mb"] >= m["vram_peak_reserved_mb"] + 100, (
        f"issue 47 item 2 ({tags['wif.vram_source']}): device {m['vram_peak_device_mb']:.0f} MB against "
        f"reserved {m['vram_peak_reserved_mb']:.0f} MB: the CUDA context is missing"
    )


# ----------------------------------------------------------------------------- item 8: the compile warm-up's batch
ITEM8 = {
    "stream, uint8": ("transfer=stream", "transfer.uint8=true"),
    "stream": ("transfer=stream",),
    "copy, uint8": ("transfer.uint8=true",),
}


def _item8_batches(cache_dir, device: torch.device, overrides: tuple):
    """The run's train batches and transfer, wired as `train` wires them, with persistent workers."""
    from tests.conftest import compose_cfg
    from wif.config import TransferKind, validate
    from wif.config.targets import typed
    from wif.data.transfer import StreamPrefetcher, make_transfer
    from wif.run.batches import build_loaders

    cfg = typed(
        compose_cfg(
            "preset=smoke",
            f"data.cache_dir={cache_dir}",
            "loader=pin_nb",
            "loader.num_workers=1",
            "loader.persistent_workers=true",
            "trainer.compile=true",
            *overrides,
        )
    )
    validate(cfg)
    loaders, _, _, train_set = build_loaders(cfg, device, lambda kind, payload: None)
    train = loaders["train"]
    if cfg.transfer.kind is TransferKind.stream:
        train = StreamPrefetcher(train, device, cfg.transfer.non_blocking, cfg.transfer.uint8)
    return cfg, train, train_set, make_transfer(cfg.transfer, device)


def _check_item8(cache_dir, device: torch.device, case: str) -> None:
    from wif.run.training import compile_batch

    cfg, train, train_set, transfer = _item8_batches(cache_dir, device, ITEM8[case])
    x, y = compile_batch(cfg, train, train_set, transfer)
    lx, ly = next(iter(TimedFeed(train, transfer)))
    assert (x.dtype, x.device, y.device) == (lx.dtype, lx.device, ly.device) == (torch.float32, device, device), (
        f"issue 47 item 8 ({case}): the warm-up got {x.dtype} on {x.device}, the step {lx.dtype} on {lx.device}"
    )
    assert x.shape[1:] == lx.shape[1:]


@pytest.mark.parametrize("case", list(ITEM8))
def test_issue47_item8_the_compile_warm_up_gets_its_batch_as_the_step_does(cache_dir, case: str) -> None:
    """Persistent workers: the warm-up's batch is collated in the run's process, then sent to the device as the
    loop's are (under transfer=stream by the prefetcher's copy, not handed over as the host made it)."""
    _check_item8(cache_dir, torch.device("cpu"), case)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("case", list(ITEM8))
def test_issue47_item8_on_cuda_the_compile_warm_up_gets_a_device_batch(cache_dir, case: str) -> None:
    _check_item8(cache_dir, torch.device("cuda", 0), case)


# ----------------------------------------------------------------------------- item 9: fp16's GradScaler
def _fp16_step(device: torch.device, *overrides: str):
    from torch import nn

    from tests.conftest import compose_cfg
    from wif.config.targets import typed
    from wif.run.step import Step, build_optimizer

    tr = typed(compose_cfg("preset=smoke", "trainer.precision=fp16", *overrides)).trainer
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)).to(device if CUDA else "cpu")
    return Step(
        model, build_optimizer(tr, model.parameters(), device), nn.CrossEntropyLoss(), 0.3, device, tr.precision
    )


def test_issue47_item9_fp16_on_cuda_takes_a_fused_step_where_the_optimizer_has_one() -> None:
    """Built for a CUDA device (the parameters may stay here: the choice is made at construction)."""
    cuda = torch.device("cuda", 0)
    assert not _fp16_step(cuda).syncs_every_step(), "issue 47 item 9: SGD under fp16 on CUDA is not fused"
    assert _fp16_step(cuda, "trainer.optimizer._target_=torch.optim.RMSprop").syncs_every_step()  # no fused step
    assert _fp16_step(cuda, "+trainer.optimizer.kwargs.foreach=true").syncs_every_step()  # the user's choice stands
    assert _fp16_step(torch.device("cpu")).optimizer.defaults["fused"] is None  # the CPU's step is as configured


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item9_an_fp16_step_on_cuda_never_synchronizes() -> None:
    """Sync debug mode "error" raises at any synchronization: the fused fp16 step queues everything; the
    unfused one (RMSprop) is the item's case, and says so (`syncs_every_step`, the run's tag wif.step_syncs)."""
    device = torch.device("cuda", 0)
    x, y = torch.randn(32, 3, 8, 8, device=device), torch.randint(0, 10, (32,), device=device)
    fused, unfused = _fp16_step(device), _fp16_step(device, "trainer.optimizer._target_=torch.optim.RMSprop")
    for step in (fused, unfused):
        step(x, y)  # warm-up: the scaler's and the optimizer's state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            fused(x, y)
        with pytest.raises(RuntimeError, match="synchroniz"):
            unfused(x, y)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not fused.syncs_every_step() and unfused.syncs_every_step(), "issue 47 item 9"
