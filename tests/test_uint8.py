"""transfer.uint8=true: the loader yields uint8 images, the device converts and normalizes them after the copy.
The real datasets, loaders and transfers on the CPU (the batches equal the host float path's, the bytes are a
quarter), a real train.py sweep of both paths, the refusals, and the stream prefetcher on CUDA."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

import pytest
import torch

from tests.conftest import assert_refused_only_with, compose_cfg, needs, run_train, train_runs
from tests.images import image_folder
from wif.config import Config, TransferConfig
from wif.config.targets import typed
from wif.data.datasets import load_datasets
from wif.data.loaders import Batch, Reading, build_batches
from wif.data.transfer import StreamPrefetcher, batch_nbytes, copy_to, make_transfer, on_device
from wif.run.loop import TimedFeed, loader_epoch

CPU = torch.device("cpu")
PIXELS = 3 * 64 * 64  # one image of the smoke set
LABEL = 8  # an int64 label


def _conf(cache_dir: Path, *overrides: str) -> Config:
    return typed(compose_cfg("preset=smoke", f"data.cache_dir={cache_dir}", *overrides))


def _batches(conf: Config, split, train: bool):
    """The configured loader over a split, rebuilt for each pass: its shuffle starts from the same seed."""
    return build_batches(split, conf.loader, Reading(batch_size=conf.data.batch_size, train=train, seed=0))


def _seeded(batches, transfer) -> List[Batch]:
    """Every batch after the transfer, with the random augmentation seeded the same for every path."""
    torch.manual_seed(7)
    return [transfer(b) for b in batches]


@pytest.mark.parametrize("data", ["synthetic", "encoded", "folder"])
def test_uint8_batches_converted_on_the_device_equal_the_host_float_batches(
    cache_dir: Path, tmp_path: Path, data: str
) -> None:
    """data=encoded keeps its random resized crops and flips (data=folder: from each image at its own size):
    they run on the host before the float conversion in both paths, so with the same seed they draw the
    same crops."""
    where = (
        ["data.fraction=0.2"]
        if data != "folder"
        else [
            f"data.root={image_folder(tmp_path / 'images')}",
            "data.augment=standard",
            "data.fraction=1.0",
            "data.val_split=0.5",
            "data.batch_size=2",
        ]
    )
    conf = _conf(cache_dir, f"data={data}", *where, "transfer.uint8=true")
    wire, plain = load_datasets(conf.data, uint8=True), load_datasets(conf.data)
    to_device, copy = make_transfer(conf.transfer, CPU), make_transfer(TransferConfig(), CPU)
    for name in ("train", "val", "test"):
        train = name == "train"
        host = _seeded(_batches(conf, getattr(wire, name), train), lambda b: b)
        assert {x.dtype for x, _ in host} == {torch.uint8}
        got = _seeded(_batches(conf, getattr(wire, name), train), to_device)
        want = _seeded(_batches(conf, getattr(plain, name), train), copy)
        assert len(got) == len(want) == len(host) > 1
        for (x, y), (fx, fy), (_hx, _) in zip(got, want, host):
            assert x.dtype == fx.dtype == torch.float32 and x.shape == fx.shape
            torch.testing.assert_close(x, fx, rtol=0, atol=1e-5)
            assert torch.equal(y, fy)
        assert [batch_nbytes(b) for b in got] == [hx.numel() + LABEL * len(hx) for hx, _ in host]


def test_augmentation_still_happens_on_the_host_in_uint8(cache_dir: Path) -> None:
    conf = _conf(cache_dir, "data=encoded", "data.fraction=0.2", "transfer.uint8=true")
    plain = _conf(cache_dir, "data=encoded", "data.fraction=0.2", "transfer.uint8=true", "data.augment=none")
    augmented = _seeded(_batches(conf, load_datasets(conf.data, uint8=True).train, True), lambda b: b)
    decoded = _seeded(_batches(plain, load_datasets(plain.data, uint8=True).train, True), lambda b: b)
    assert conf.data.augment.value == "standard"
    for (x, y), (px, py) in zip(augmented, decoded):  # the same samples, in the same order
        assert x.dtype == px.dtype == torch.uint8 and torch.equal(y, py)
        assert not torch.equal(x, px)  # cropped and flipped before the copy


def test_the_loop_counts_the_uint8_bytes_with_a_copy_and_with_the_prefetcher(cache_dir: Path) -> None:
    conf = _conf(cache_dir, "data.fraction=0.2", "transfer.uint8=true")
    train = load_datasets(conf.data, uint8=True).train
    expected = len(train) * (PIXELS + LABEL)  # a quarter of float32's image bytes
    copied = loader_epoch(_batches(conf, train, True), make_transfer(conf.transfer, CPU), CPU)
    streamed = loader_epoch(StreamPrefetcher(_batches(conf, train, True), CPU, uint8=True), on_device, CPU)
    assert copied.copy_bytes_per_epoch == streamed.copy_bytes_per_epoch == expected
    assert copied.samples == streamed.samples == len(train)


@pytest.mark.slow
def test_a_uint8_run_learns_as_the_float_run_does_and_copies_a_quarter_of_its_image_bytes(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    from mlflow.tracking import MlflowClient

    proc = run_train(tmp_path, store, cache_dir, "preset=smoke", "data.fraction=0.7", "transfer.uint8=false,true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(
        r"\] \w+\+uint8 fraction=0.7 repeat=0  finished", proc.stdout + proc.stderr
    )  # progress names the cell
    runs = {r.data.params["transfer.uint8"]: r for r in train_runs(store, status="FINISHED")}
    assert set(runs) == {"False", "True"}
    wire, plain = runs["True"], runs["False"]
    n = int(wire.data.tags["wif.n_train"])
    assert n == int(plain.data.tags["wif.n_train"]) > 0
    history = MlflowClient(store).get_metric_history
    assert [m.value for m in history(wire.info.run_id, "copy_bytes_per_epoch")] == [n * (PIXELS + LABEL)] * 3
    assert [m.value for m in history(plain.info.run_id, "copy_bytes_per_epoch")] == [n * (4 * PIXELS + LABEL)] * 3
    for key in ("val_acc", "test_acc"):
        assert wire.data.metrics[key] > 0.5 and plain.data.metrics[key] > 0.5, key
        assert abs(wire.data.metrics[key] - plain.data.metrics[key]) <= 0.05, key


REFUSED = [
    (("loader=gpu_resident",), "transfer.uint8=true with loader=gpu_resident (transfer=resident): the dataset is"),
    (("data=fixed",), "transfer.uint8=true with data=fixed: its batch is made on the device"),
    (
        ("data=custom", "data._target_=examples.datasets.noisy_squares"),
        "transfer.uint8=true with data=custom: your Dataset decides its own dtype",
    ),
    (
        ("data=encoded", "engine=dali", "loader.num_workers=2"),
        "transfer.uint8=true with engine=dali: DALI normalizes in its own pipeline",
    ),
]


@pytest.mark.parametrize("overrides,message", REFUSED)
def test_combinations_where_uint8_means_nothing_are_refused_in_one_line(overrides: tuple, message: str) -> None:
    assert_refused_only_with("transfer.uint8=true", overrides, message)  # without uint8 these settings run


@pytest.mark.slow
def test_a_refused_run_exits_2_with_its_one_line(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(
        tmp_path, store, cache_dir, "preset=smoke", "loader=gpu_resident", "transfer.uint8=true", multirun=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Bad setting: transfer.uint8=true with loader=gpu_resident" in out and "Traceback" not in out
    assert not train_runs(store)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("transfer", ["non_blocking", "stream"])
@pytest.mark.gpu
@needs_cuda
def test_the_copies_and_conversions_of_an_epoch_never_wait_for_the_device(cache_dir: Path, transfer: str) -> None:
    """The timed loop gains no sync: the loop's own feed queues every copy and conversion and waits for none
    (sync debug mode "error" raises at any implicit synchronization); tests/test_gpu.py checks the whole epoch."""
    conf = _conf(cache_dir, "data.fraction=0.7", "loader=pin_nb", f"transfer={transfer}", "transfer.uint8=true")
    device = torch.device("cuda", 0)
    train = load_datasets(conf.data, uint8=True).train
    batches = build_batches(train, conf.loader, Reading(batch_size=32, train=True, seed=0, pin=True))
    if transfer == "stream":
        batches = StreamPrefetcher(batches, device, non_blocking=True, uint8=True)
    to_device = make_transfer(conf.transfer, device)
    for x, _ in TimedFeed(batches, to_device):  # warm-up: the allocator's first blocks
        x.sum()
    feed = TimedFeed(batches, to_device, copies=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        sums = [x.sum() for x, _ in feed]  # device work on each batch, as a step would queue
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(sums) == len(batches) > 10 and feed.copy_bytes == len(train) * (PIXELS + LABEL)


@pytest.mark.gpu
@needs_cuda
def test_the_stream_prefetcher_converts_as_a_synchronous_copy_does(cache_dir: Path) -> None:
    """Many batches, the compute stream kept busy between them so copies and conversions overlap it; each
    batch is compared on the device and dropped (only its difference is kept), as the loop drops it."""
    conf = _conf(cache_dir, "data.fraction=1.0", "loader=pin_nb", "transfer=stream", "transfer.uint8=true")
    device = torch.device("cuda", 0)
    train = load_datasets(conf.data, uint8=True).train

    def loader():  # rebuilt for each pass: its shuffle starts from the same seed
        return build_batches(train, conf.loader, Reading(batch_size=32, train=True, seed=0, pin=True))

    sync = copy_to(device, non_blocking=False, uint8=True)
    want = [sync(b) for b in loader()]
    busy = torch.randn(2048, 2048, device=device)
    diffs = []
    for (x, y), (wx, wy) in zip(StreamPrefetcher(loader(), device, non_blocking=True, uint8=True), want):
        torch.mm(busy, busy)  # compute-stream work the next copy and conversion overlap
        diffs.append(torch.stack([(x - wx).abs().max(), (y - wy).abs().max().float()]))
    assert len(diffs) == len(want) >= 40
    assert torch.stack(diffs).max().item() == 0


def test_uint8_and_the_stream_prefetcher_are_cells_of_their_own_and_old_runs_keep_their_identity() -> None:
    """The report never pools uint8 or stream runs with the plain copy of the same loader option, and adding
    the key did not change the identity (resume) of a run that does not set it."""
    from wif.sweep.identity import cell_name, run_identity

    plain = typed(compose_cfg("preset=smoke", "loader=pin_nb"))
    assert cell_name(plain) == "pin_nb@0.1"
    assert cell_name(typed(compose_cfg("preset=smoke", "loader=pin_nb", "transfer.uint8=true"))) == "pin_nb+uint8@0.1"
    assert cell_name(typed(compose_cfg("preset=smoke", "loader=pin_nb", "transfer=stream"))) == "pin_nb+stream@0.1"
    assert "uint8" not in run_identity(plain, "cpu")["transfer"]
    assert (
        run_identity(typed(compose_cfg("preset=smoke", "loader=pin_nb", "transfer.uint8=true")), "cpu")["transfer"][
            "uint8"
        ]
        is True
    )


@pytest.mark.parametrize("fmt", [pytest.param("lmdb", marks=needs("lmdb")), "shards"])
def test_packed_formats_hand_out_uint8_that_converts_to_the_float_path(tmp_path: Path, fmt: str) -> None:
    """data.format=lmdb|shards under transfer.uint8: the same images as the float path once converted."""
    from tests.images import data_cfg, jpeg_folder
    from wif.data.formats.splits import format_datasets
    from wif.data.transfer import to_float

    root = jpeg_folder(tmp_path / "images", per_class=4, test_per_class=2, size=32)
    cfg = data_cfg(
        tmp_path / "cache",
        "data=folder",
        f"data.root={root}",
        f"data.format={fmt}",
        "data.augment=none",
        "data.image_size=32",
        "data.fraction=1.0",
    )
    plain, wire = format_datasets(cfg), format_datasets(cfg, uint8=True)
    for p, w in zip(list(plain.test)[:4], list(wire.test)[:4]):
        assert w[0].dtype == torch.uint8 and p[0].dtype == torch.float32 and int(w[1]) == int(p[1])
        assert torch.allclose(to_float(w[0]), p[0], atol=1e-5)
