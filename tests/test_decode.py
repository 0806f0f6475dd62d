"""data.decode=device: the workers hand over encoded bytes and the main process decodes each batch on the device.
On the CPU (device='cpu', the same code): the images within a small mean difference of the host decoder's, the
same count an epoch and the same labels, with both decoders (torchcodec and torchvision), for data=encoded,
data=folder and the packed formats; the slow-path count; the refusals; a real train.py run. On CUDA:
tests/test_decode_gpu."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import assert_refused_only_with, compose_cfg, needs, run_train, train_runs
from tests.decoding import BACKEND_CASES, CPU, compare_passes, epoch_batches, smoke_conf
from tests.images import jpeg_folder
from wif.config import ConfigError, DecodeBackend, TransferConfig, validate
from wif.config.targets import typed
from wif.data.datasets import load_datasets
from wif.data.decode import Collate, DeviceDecode, Plan, encoded_datasets, jpeg_kind
from wif.data.formats.source import encoded_files
from wif.data.transfer import StreamPrefetcher, batch_nbytes, make_transfer

BACKENDS = ["torchcodec", "torchvision"]
LEVEL = 4 / 255  # one uint8 level, normalized (std 0.25)


@pytest.mark.parametrize("backend", BACKEND_CASES)
@pytest.mark.parametrize("data", ["encoded", "folder"])
def test_images_decoded_on_the_device_match_the_host_decoder(cache_dir: Path, data: str, backend: str) -> None:
    """data=folder here is data=encoded's JPEGs written as files, resized on decoding (64 -> 48) as the host does."""
    base = smoke_conf(cache_dir, "data=encoded", "data.augment=none", "data.fraction=0.2")
    where = ["data.augment=none", "data.fraction=0.2"] + (
        ["data=folder", f"data.root={encoded_files(base.data).where}", "data.image_size=48"]
        if data == "folder"
        else ["data=encoded"]
    )
    conf = smoke_conf(cache_dir, *where, "data.decode=device", f"data.decode_backend={backend}")
    host = load_datasets(conf.data)
    device = encoded_datasets(host, conf.data)
    decode = DeviceDecode(CPU, DecodeBackend(backend))
    copy = make_transfer(TransferConfig(), CPU)
    assert decode.backend == backend
    for name in ("train", "val", "test"):
        got = epoch_batches(conf, getattr(device, name), decode, name == "train")
        want = epoch_batches(conf, getattr(host, name), copy, name == "train")
        assert sum(len(y) for _, y in got) == len(getattr(host, name))
        assert compare_passes(want, got) < LEVEL / 4, name
    assert decode.epoch_figures() == {"decode_slow_path_images": 0.0}  # baseline JPEGs only
    assert decode.epoch_figures() == {"decode_slow_path_images": 0.0}  # and the count starts again


def test_augmentation_runs_per_sample_on_the_device(cache_dir: Path) -> None:
    """data=encoded's random resized crops and flips: drawn per sample, every image and label of the epoch there."""
    conf = smoke_conf(cache_dir, "data=encoded", "data.fraction=0.2", "data.decode=device")
    assert conf.data.augment.value == "standard"
    device = encoded_datasets(load_datasets(conf.data), conf.data)
    plain = epoch_batches(conf, device.train, DeviceDecode(CPU), train=True)
    again = epoch_batches(conf, device.train, DeviceDecode(CPU), train=True, seed=8)  # the same order, other crops
    host = epoch_batches(conf, load_datasets(conf.data).train, make_transfer(TransferConfig(), CPU), train=True)
    assert [y.tolist() for _, y in plain] == [y.tolist() for _, y in again] == [y.tolist() for _, y in host]
    assert all(not torch.equal(a, b) for (a, _), (b, _) in zip(plain, again))
    same = Collate(Plan(None, conf.data.augment, 64, True, False))([device.train[0]] * 8)
    x, _ = DeviceDecode(CPU)(same)
    assert x.shape == (8, 3, 64, 64) and len({hash(img.numpy().tobytes()) for img in x}) == 8
    ex, _ = DeviceDecode(CPU)(Collate(Plan(None, conf.data.augment, 64, False, False))([device.train[0]] * 2))
    assert torch.equal(ex[0], ex[1])  # evaluation: no augmentation


@pytest.mark.parametrize("fmt", [pytest.param("lmdb", marks=needs("lmdb")), "shards", "folder"])
def test_packed_formats_hand_out_bytes_the_device_decodes_as_the_host_does(tmp_path: Path, fmt: str) -> None:
    from tests.images import data_cfg
    from wif.data.formats.splits import format_datasets

    root = jpeg_folder(tmp_path / "images", per_class=6, test_per_class=3, size=40)
    cfg = data_cfg(
        tmp_path / "cache",
        "data=folder",
        f"data.root={root}",
        f"data.format={fmt}",
        "data.augment=none",
        "data.image_size=32",
        "data.fraction=1.0",
        "data.decode=device",
    )
    host = format_datasets(cfg)
    device = encoded_datasets(host, cfg)
    conf = smoke_conf(tmp_path / "cache", "data.batch_size=2")
    for name in ("val", "test"):  # in a fixed order in every format (shards: shard by shard)
        got = epoch_batches(conf, getattr(device, name), DeviceDecode(CPU), train=False)
        want = epoch_batches(conf, getattr(host, name), make_transfer(TransferConfig(), CPU), train=False)
        assert compare_passes(want, got) < LEVEL / 4, name


def _slow_images(folder: Path) -> int:
    """Writes a progressive JPEG and a PNG into each class of a JPEG folder's training part; returns how many."""
    from PIL import Image

    n = 0
    for d in sorted((folder / "train").iterdir()):
        image = Image.open(next(d.glob("*.jpg"))).convert("RGB")
        image.save(d / "zz_progressive.jpg", "JPEG", progressive=True, quality=90)
        image.save(d / "zz_lossless.png", "PNG")
        n += 2
    return n


def test_progressive_and_non_jpeg_images_are_counted_and_decoded(tmp_path: Path) -> None:
    root = jpeg_folder(tmp_path / "images", per_class=4, test_per_class=2, size=32)
    slow = _slow_images(root)
    conf = smoke_conf(
        tmp_path / "cache",
        "data=folder",
        f"data.root={root}",
        "data.augment=none",
        "data.image_size=32",
        "data.fraction=1.0",
        "data.val_split=0",
        "data.batch_size=5",
        "data.decode=device",
    )
    host = load_datasets(conf.data)
    device, decode = encoded_datasets(host, conf.data), DeviceDecode(CPU)
    assert sorted(jpeg_kind(device.train[i][0]) for i in range(len(device.train))) == (
        ["fast"] * 12 + ["other"] * (slow // 2) + ["slow"] * (slow // 2)
    )
    got = epoch_batches(conf, device.train, decode, train=True)
    assert decode.epoch_figures() == {"decode_slow_path_images": float(slow)}
    assert (
        compare_passes(epoch_batches(conf, host.train, make_transfer(TransferConfig(), CPU), train=True), got)
        < LEVEL / 4
    )


def test_the_bytes_copied_are_the_encoded_bytes_and_labels(cache_dir: Path) -> None:
    conf = smoke_conf(cache_dir, "data=encoded", "data.fraction=0.2", "data.decode=device", "loader=pin_nb")
    host = load_datasets(conf.data)
    encoded = sum(len(host.train.decoder.encoded(int(j))) for j in host.train.indices)
    train = encoded_datasets(host, conf.data).train
    copied = epoch_batches(conf, train, DeviceDecode(CPU), train=True)
    streamed = epoch_batches(conf, train, lambda b: b, train=True)
    assert sum(batch_nbytes(b) for b in copied) == encoded + 8 * len(host.train)
    prefetched = list(StreamPrefetcher(streamed, CPU, decode=DeviceDecode(CPU)))
    assert sum(batch_nbytes(b) for b in prefetched) == encoded + 8 * len(host.train)


REFUSED = [
    (("data=synthetic",), "data.decode=device decodes encoded images on the device, but data=synthetic holds"),
    (("data=fixed",), "data.decode=device decodes encoded images on the device, but data=fixed holds"),
    (
        ("data=custom", "data._target_=examples.datasets.noisy_squares"),
        "data.decode=device decodes encoded images on the device, but data=custom holds",
    ),
    (
        ("data=folder", "data.root=.", "data.preload=true"),
        "data.decode=device decodes encoded images on the device, but data=folder with data.preload=true holds",
    ),
    pytest.param(
        ("data=encoded", "engine=dali", "loader.num_workers=2"),
        "data.decode=device with engine=dali: DALI decodes",
        marks=needs("nvidia.dali"),
    ),
    pytest.param(
        ("data=encoded", "engine=nodes_threads"),
        "data.decode=device with engine=nodes_threads: batches of encoded",
        marks=needs("torchdata.nodes"),
    ),
    (("data=encoded", "loader=gpu_resident"), "data.decode=device with loader=gpu_resident (transfer=resident)"),
    (("data=encoded", "transfer.uint8=true"), "data.decode=device with transfer.uint8=true: encoded bytes cross"),
]


@pytest.mark.parametrize("overrides,message", REFUSED)
def test_combinations_where_device_decode_means_nothing_are_refused_in_one_line(overrides: tuple, message: str) -> None:
    assert_refused_only_with("data.decode=device", overrides, message)  # with the host's decode they run


@pytest.mark.slow
def test_a_refused_device_decode_exits_2_with_its_one_line(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(tmp_path, store, cache_dir, "preset=smoke", "data.decode=device", multirun=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Bad setting: data.decode=device decodes encoded images on the device, but data=synthetic" in out
    assert "Traceback" not in out and not train_runs(store)


def test_a_decoder_picked_for_the_host_decode_is_refused() -> None:
    with pytest.raises(ConfigError, match="^data.decode_backend=torchvision picks the decoder of data.decode=device"):
        validate(typed(compose_cfg("preset=smoke", "data=encoded", "data.decode_backend=torchvision")))


def test_device_decode_is_a_cell_of_its_own_and_old_runs_keep_their_identity() -> None:
    from wif.sweep.identity import cell_name, run_identity

    host = typed(compose_cfg("preset=smoke", "data=encoded", "loader=pin_nb"))
    device = typed(compose_cfg("preset=smoke", "data=encoded", "loader=pin_nb", "data.decode=device"))
    assert (cell_name(host), cell_name(device)) == ("pin_nb@0.1", "pin_nb+device_decode@0.1")
    assert not {"decode", "decode_backend"} & run_identity(host, "cpu")["data"].keys()
    assert run_identity(device, "cpu")["data"]["decode"] == "device"


@pytest.mark.slow
def test_a_device_decode_run_learns_as_the_host_decode_and_logs_what_it_copied(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    from mlflow.tracking import MlflowClient

    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=encoded",
        "data.augment=none",
        "data.fraction=0.7",
        "loader=pin_nb_w4_pf2",
        "data.decode=host,device",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "data.decode=device without CUDA: each batch is decoded on the CPU in the main process" in out
    runs = {r.data.params["data.decode"]: r for r in train_runs(store, status="FINISHED")}
    device, host = runs["device"], runs["host"]
    tags = device.data.tags
    assert tags["wif.cell"] == "pin_nb_w4_pf2+device_decode@0.7" and host.data.tags["wif.cell"] == "pin_nb_w4_pf2@0.7"
    assert tags["wif.decode_backend"] in BACKENDS and "mean nothing for the speed" in tags["wif.decode_note"]
    assert "wif.decode_note" not in host.data.tags
    history = MlflowClient(store).get_metric_history
    assert [m.value for m in history(device.info.run_id, "decode_slow_path_images")] == [0.0] * 3
    n = int(tags["wif.n_train"])
    conf = smoke_conf(cache_dir, "data=encoded", "data.fraction=0.7")
    train = load_datasets(conf.data).train
    encoded = sum(len(train.decoder.encoded(int(j))) for j in train.indices)
    assert [m.value for m in history(device.info.run_id, "copy_bytes_per_epoch")] == [encoded + 8 * n] * 3
    assert host.data.metrics["copy_bytes_per_epoch"] == n * (4 * 3 * 64 * 64 + 8)
    for key in ("val_acc", "test_acc"):
        assert device.data.metrics[key] > 0.5 and host.data.metrics[key] > 0.5, key
        assert abs(device.data.metrics[key] - host.data.metrics[key]) <= 0.05, key
