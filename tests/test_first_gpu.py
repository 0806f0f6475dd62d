"""Issue 47: what a first GPU run would get wrong, each item checked where it can be: here the loop's device
paths (items 1, 6, 7, 11, 13); tests/test_first_gpu_setup.py the run's set-up (2, 8, 9, 12). The CPU tests check
the bookkeeping; each `gpu` test proves or refutes one item on a real GPU and names it ("issue 47 item N") when
it fails. Only torch and wif's own modules at import: a lent node's bare venv must collect this file."""

from __future__ import annotations

import time
from typing import List, Tuple

import pytest
import torch

from tests.cuda import CUDA
from wif.data.transfer import copy_to
from wif.measure.timing import blocked_s
from wif.run.loop import TimedFeed


def _batches(n: int, size: int = 64) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(size, 3, 32, 32), torch.randint(0, 10, (size,))) for _ in range(n)]


def _cycles_per_s() -> float:
    """torch.cuda._sleep's clock: cycles per second of GPU time, timed with events on an idle device."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)  # the kernel's first launch loads its module: not in the timed one
    torch.cuda.synchronize()
    a.record()
    torch.cuda._sleep(20_000_000)
    b.record()
    torch.cuda.synchronize()
    return 20_000_000 / (a.elapsed_time(b) / 1e3)


# ----------------------------------------------------------------------------- item 1: data wait vs GPU busy
def test_the_wait_behind_the_gpu_is_what_the_host_spent_beyond_the_copy() -> None:
    assert blocked_s(1.0, 0.001) == pytest.approx(0.999)  # a blocking copy behind 1 s of queued kernels
    assert blocked_s(2e-5, 2e-4) == 0.0  # a non_blocking copy returns before it ran: no wait behind the GPU
    assert blocked_s(0.5, 0.5) == 0.0


def test_on_a_cpu_the_data_wait_is_the_hosts_and_nothing_is_blocked_behind_a_gpu() -> None:
    cpu = torch.device("cpu")
    feed = TimedFeed(_batches(4), copy_to(cpu, non_blocking=False), device=cpu)
    assert sum(1 for _ in feed) == 4
    stats = feed.stats(time.monotonic(), time.perf_counter(), None, 0.0, None)
    assert stats.gpu_blocked_s is None and stats.data_wait_s == feed.host_wait > 0
    assert stats.copy_s == feed.host_copy <= stats.data_wait_s


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item1_a_blocking_copy_behind_queued_kernels_is_gpu_blocked_not_data_wait() -> None:
    """Each batch's blocking copy comes after ~20 ms of queued GPU work, as after a GPU-bound step: the host
    waits that long in `.to(device)`, and the epoch must call it gpu_blocked_s, not the loader's data wait."""
    device = torch.device("cuda", 0)
    sleep = int(0.02 * _cycles_per_s())
    batches = _batches(12)
    t = time.perf_counter()
    torch.cuda._sleep(sleep)
    torch.ones(9).to(device)  # the issue's own check: the copy waits for the queued kernel
    waited = time.perf_counter() - t
    assert waited > 0.015, f"issue 47 item 1 not real here: a blocking copy behind 20 ms of work took {waited:.4f} s"
    feed = TimedFeed(batches, copy_to(device, non_blocking=False), device=device)
    torch.cuda.synchronize()
    for _ in feed:
        torch.cuda._sleep(sleep)  # the step: queued, not waited for
    torch.cuda.synchronize()
    queued = 0.02 * (len(batches) - 1)  # the last step's work is behind no copy
    blocked = feed.gpu_blocked()
    assert blocked is not None and blocked > 0.8 * queued, f"issue 47 item 1: gpu_blocked_s {blocked:.3f} s of {queued}"
    assert feed.data_wait < 0.25 * queued, f"issue 47 item 1: data_wait_s {feed.data_wait:.3f} s still holds GPU time"
    assert feed.data_wait + blocked == pytest.approx(feed.host_wait)
    assert 0 <= feed.copy <= feed.data_wait


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item1_a_copy_behind_an_idle_gpu_is_the_loaders() -> None:
    """Nothing queued: the host's whole wait is the loader's (fetch and copy), none of it GPU-blocked."""
    device = torch.device("cuda", 0)
    batches = _batches(12, size=512)
    for _ in TimedFeed(batches, copy_to(device, non_blocking=False), device=device):  # warm-up: allocator
        pass
    feed = TimedFeed(batches, copy_to(device, non_blocking=False), device=device)
    torch.cuda.synchronize()
    for _ in feed:
        pass
    torch.cuda.synchronize()
    blocked = feed.gpu_blocked()
    assert blocked is not None and blocked < 0.3 * feed.host_copy + 1e-3, (
        f"issue 47 item 1: {blocked:.4f} s called GPU-blocked of a {feed.host_copy:.4f} s copy behind an idle GPU"
    )


# ----------------------------------------------------------------------------- item 6: device decode's blocks
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("backend", ["torchvision", "torchcodec"])
def test_issue47_item6_device_decode_never_writes_into_blocks_queued_kernels_still_read(backend: str) -> None:
    """pytorch/vision#9606's reproduction through wif's decoder: tensors freed while reductions of them wait
    behind a long kernel; the decode that follows must not be handed their blocks and overwrite them."""
    if backend == "torchcodec":
        pytest.importorskip("torchcodec.decoders")
    from torchvision.io import encode_jpeg

    from wif.config import DecodeBackend
    from wif.data.decode import DeviceDecode

    device = torch.device("cuda", 0)
    decoder = DeviceDecode(device, DecodeBackend(backend))
    jpeg = encode_jpeg(torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8))
    sleep, n = int(0.005 * _cycles_per_s()), 16
    decoder.decode([jpeg] * n)  # warm-up: the decoder's own buffers
    corrupted = 0
    for _ in range(40):
        held = [torch.full((3, 64, 64), 1, dtype=torch.uint8, device=device) for _ in range(n)]
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep)
        sums = [h.sum(dtype=torch.int64) for h in held]  # queued behind the sleep: they still read `held`
        del held  # freed on the caller's stream while those reads wait
        decoder.decode([jpeg] * n)
        torch.cuda.synchronize()
        corrupted += sum(int(s.item()) != 3 * 64 * 64 for s in sums)
    assert corrupted == 0, f"issue 47 item 6: {corrupted} of {40 * n} tensors overwritten by the {backend} decode"


# ----------------------------------------------------------------------------- item 7: the prefetcher's stream
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item7_the_stream_prefetchers_reserved_memory_settles_after_an_epoch() -> None:
    """One copy stream for the run: blocks freed in an epoch are reused by the next (a new pool stream each
    epoch could reuse none of them, and reserved memory grew every epoch)."""
    from wif.data.transfer import StreamPrefetcher

    device = torch.device("cuda", 0)
    batches = [(torch.randn(64, 3, 64, 64).pin_memory(), torch.randint(0, 10, (64,)).pin_memory()) for _ in range(6)]
    prefetcher = StreamPrefetcher(batches, device, non_blocking=True)
    reserved, streams = [], set()
    for _ in range(8):
        for x, _y in prefetcher:
            x.mul(2).sum()
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved(device))
        streams.add(prefetcher.stream)
    # a batch is 3 MiB: a new stream each epoch reserves two or three more every epoch (>= 36 MiB over six);
    # with one, an epoch may at most hold a batch more in flight than the last (its freed block still in use)
    assert len(streams) == 1 and reserved[-1] - reserved[1] <= 8 << 20, (
        f"issue 47 item 7: reserved MiB by epoch {[r >> 20 for r in reserved]}"
    )


# ----------------------------------------------------------------------------- item 11: DALI's labels
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_issue47_item11_dali_hands_over_its_labels_on_the_device(cache_dir) -> None:
    """Images and labels both leave the pipeline on the GPU: under transfer=copy no label copy blocks behind
    the step's kernels, and the run's transfer copies nothing."""
    pytest.importorskip("nvidia.dali")
    from tests.conftest import compose_cfg
    from wif.config.targets import typed
    from wif.data.datasets import load_datasets
    from wif.data.engines import build_engine_batches
    from wif.data.loaders import Reading
    from wif.data.transfer import copies_from_host

    cfg = typed(
        compose_cfg(
            "preset=smoke",
            "engine=dali",
            "loader=pin_nb_w4_pf2",
            "data=encoded",
            "data.fraction=0.2",
            "loader.num_workers=2",
            f"data.cache_dir={cache_dir}",
        )
    )
    device = torch.device("cuda", 0)
    batches = build_engine_batches(
        load_datasets(cfg.data).train,
        cfg.loader,
        cfg.engine,
        Reading(batch_size=64, train=True, seed=3),
        data=cfg.data,
        device=device,
    )
    feed = TimedFeed(batches, copy_to(device, non_blocking=False), device=device)
    placed = [(x.device, y.device) for x, y in feed]
    torch.cuda.synchronize()
    assert placed and all(dx.type == dy.type == "cuda" for dx, dy in placed), f"issue 47 item 11: {placed[:2]}"
    assert not copies_from_host(batches, copy_to(device, non_blocking=False))


# ----------------------------------------------------------------------------- item 13: time_epochs' device
@pytest.mark.gpu
@pytest.mark.parametrize("index", [1, 0])
def test_issue47_item13_time_epochs_times_the_named_devices_stream(index: int) -> None:
    """The current device is 0, the step runs on cuda:<index>: its compute is timed by events on that device's
    stream (for cuda:1, on device 0's they would bracket nothing, and compute_s would be about 0). cuda:0 runs
    the same path on a one-GPU machine; cuda:1 is the item's case and needs two."""
    if torch.cuda.device_count() <= index:
        pytest.skip(f"needs {index + 1} CUDA device(s)")
    import wif

    torch.cuda.set_device(0)
    with torch.cuda.device(index):
        sleep = int(0.01 * _cycles_per_s())

    def step(batch) -> None:
        with torch.cuda.device(index):
            torch.cuda._sleep(sleep)

    times = wif.time_epochs(_batches(8), step, epochs=2, device=f"cuda:{index}")
    compute = times.measured[0]["compute_s"]
    assert compute > 0.8 * 8 * 0.01, f"issue 47 item 13: {compute:.4f} s of compute timed on cuda:{index} for 0.08 s"
