"""data.decode=device on CUDA: the decoder against the CPU's on full-chroma JPEGs, each image of a batched decode in
its place, the stream prefetcher against a synchronous decode, and a real run that decodes there."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch

from tests.conftest import run_train, train_runs
from tests.decoding import BACKEND_CASES, CPU, compare_passes, epoch_batches, smoke_conf
from wif.config import DecodeBackend
from wif.data.datasets import load_datasets
from wif.data.decode import DeviceDecode, encoded_datasets
from wif.data.loaders import Reading, build_batches
from wif.data.transfer import StreamPrefetcher

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _noisy_jpegs(subsampling: int, n: int = 32) -> List[torch.Tensor]:
    """64 px images as noisy as data=encoded's, encoded by PIL (subsampling: 0 is 4:4:4, 2 is 4:2:0)."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        pattern = np.kron(rng.integers(0, 255, (8, 8, 3)), np.ones((8, 8, 1)))
        image = np.clip(pattern + rng.normal(0, 90, pattern.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=90, subsampling=subsampling)
        out.append(torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8))
    return out


@pytest.mark.parametrize("backend", BACKEND_CASES)
@pytest.mark.gpu
@needs_cuda
def test_the_cuda_decoder_decodes_full_chroma_jpegs_as_the_cpu_decoder_does(backend: str) -> None:
    """Without chroma subsampling nvJPEG and libjpeg agree to the level (0.00 levels apart on an H200, torchvision
    0.26); with 4:2:0 they upsample chroma differently (13.7 levels apart on these images), which is not a fault."""
    data = _noisy_jpegs(subsampling=0)
    cuda = torch.stack(DeviceDecode(torch.device("cuda", 0), DecodeBackend(backend)).decode(data)).cpu()
    cpu = torch.stack(DeviceDecode(CPU, DecodeBackend(backend)).decode(data))
    assert (cuda.float() - cpu.float()).abs().mean() < 1.0


@pytest.mark.parametrize("backend", BACKEND_CASES)
@pytest.mark.gpu
@needs_cuda
def test_the_batched_cuda_decode_hands_over_each_image_in_its_place(cache_dir: Path, backend: str) -> None:
    """data=encoded's JPEGs are 4:2:0, so nvJPEG's images differ from libjpeg's by its chroma upsampling (on an
    H200, 0.19 normalized, about 12 levels, on average); a reordered, swapped or corrupted image would be
    nearer another image of its batch than its own CPU decode, and the labels would not line up."""
    conf = smoke_conf(cache_dir, "data=encoded", "data.augment=none", "data.fraction=0.2", "data.decode=device")
    train = encoded_datasets(load_datasets(conf.data), conf.data).train
    cuda = epoch_batches(conf, train, DeviceDecode(torch.device("cuda", 0), DecodeBackend(backend)), train=True)
    cpu = epoch_batches(conf, train, DeviceDecode(CPU, DecodeBackend(backend)), train=True)
    assert all(x.device.type == "cuda" for x, _ in cuda)
    cuda = [(x.cpu(), y.cpu()) for x, y in cuda]
    assert compare_passes(cpu, cuda) < 2 * 0.19
    for (hx, _), (dx, _) in zip(cpu, cuda):
        distances = torch.cdist(dx.flatten(1), hx.flatten(1), p=1)
        assert torch.equal(distances.argmin(dim=1), torch.arange(len(dx)))


@pytest.mark.gpu
@needs_cuda
def test_the_stream_prefetcher_decodes_as_a_synchronous_decode_does(cache_dir: Path) -> None:
    """Many batches, the compute stream kept busy between them so the side stream's decodes overlap it."""
    conf = smoke_conf(
        cache_dir,
        "data=encoded",
        "data.augment=none",
        "data.fraction=1.0",
        "data.decode=device",
        "loader=pin_nb",
        "transfer=stream",
    )
    device = torch.device("cuda", 0)
    train = encoded_datasets(load_datasets(conf.data), conf.data).train

    def loader():
        return build_batches(train, conf.loader, Reading(batch_size=32, train=True, seed=0, pin=True))

    sync = DeviceDecode(device)
    want = [sync(b) for b in loader()]
    busy = torch.randn(2048, 2048, device=device)
    diffs = []
    for (x, y), (wx, wy) in zip(
        StreamPrefetcher(loader(), device, decode=DeviceDecode(device, non_blocking=True)), want
    ):
        torch.mm(busy, busy)
        diffs.append(torch.stack([(x - wx).abs().max(), (y - wy).abs().max().float()]))
    assert len(diffs) == len(want) >= 40
    assert torch.stack(diffs).max().item() == 0


@pytest.mark.slow
@pytest.mark.gpu
@needs_cuda
def test_a_device_decode_run_on_cuda_decodes_there_and_says_nothing_of_the_cpu(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=encoded",
        "data.augment=none",
        "data.fraction=0.7",
        "device=cuda",
        "loader=pin_nb_w4_pf2",
        "data.decode=device",
        "transfer=copy,stream",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "data.decode=device without CUDA" not in out
    runs = train_runs(store, status="FINISHED")
    assert len(runs) == 2
    for run in runs:
        assert run.data.tags["wif.device"] == "cuda" and "wif.decode_note" not in run.data.tags
        assert run.data.metrics["decode_slow_path_images"] == 0 and run.data.metrics["test_acc"] > 0.5
