"""data.format=folder|lmdb|shards (docs/formats.md): every format trains the same images from a folder the
test writes, packs are rebuilt when a pack was killed half-way, and a corrupt pack or a truncated record
stops the run before training with one line."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, needs, run_train, train_runs
from tests.images import data_cfg, jpeg_folder
from tests.packs import lmdb_put, small_lmdb_pack, truncate_tar_member
from wif.data.datasets import load_datasets
from wif.data.formats.pack import PackError, crc, open_pack
from wif.data.formats.splits import format_datasets
from wif.data.formats.store import THROTTLE_ENV, check_pack
from wif.tools.pack import main as wif_pack

FORMATS = ("folder", "lmdb", "shards")
SMALL = ("preset=smoke", "data=folder", "data.val_split=0.25", "data.shard_mb=0.02", "loader=baseline")


def _train_images(split) -> Counter:
    """The training split as a multiset of (image digest, label): iterated as a loader would."""
    return Counter((hashlib.sha256(x.numpy().tobytes()).hexdigest(), int(y)) for x, y in split)


@needs("lmdb")
def test_a_fraction_of_0_4_takes_the_same_images_in_every_format(tmp_path: Path) -> None:
    root = jpeg_folder(tmp_path / "images")
    common = ("data=folder", f"data.root={root}", "data.fraction=0.4", "data.shard_mb=0.02", "data.augment=none")
    plain = load_datasets(data_cfg(tmp_path / "cache", *common))
    expected = _train_images(plain.train)
    assert sum(expected.values()) == len(plain.train) > 0
    for fmt in FORMATS:
        data = format_datasets(data_cfg(tmp_path / "cache", *common, f"data.format={fmt}"))
        assert (len(data.train), len(data.val), len(data.test), data.num_classes) == (
            len(plain.train),
            len(plain.val),
            len(plain.test),
            plain.num_classes,
        ), fmt
        assert _train_images(data.train) == expected, fmt  # the same images, with the same labels
    shards = list((tmp_path / "cache" / "packs").glob("shards-*/train-*.tar"))
    assert len(shards) > 1  # several shards, so the subset really spans them


@needs("lmdb")
@pytest.mark.slow
def test_each_format_trains_to_finished_with_the_same_images_per_epoch(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    root = jpeg_folder(tmp_path / "images")
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        *SMALL,
        f"data.root={root}",
        "data.fraction=1.0",
        "data.format=folder,lmdb,shards",
        "loader.num_workers=2",
        "loader.persistent_workers=true",
        "trainer.epochs=3",
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    runs = {r.data.params["data.format"]: r for r in train_runs(store, status="FINISHED")}
    assert sorted(runs) == sorted(FORMATS)
    client = MlflowClient(store)
    n_train = {fmt: int(r.data.tags["wif.n_train"]) for fmt, r in runs.items()}
    assert len(set(n_train.values())) == 1 and n_train["folder"] == 36  # 48 images, a quarter for validation
    for fmt, r in runs.items():
        assert r.data.params["data.pack_records"] == "60" and int(r.data.params["data.pack_bytes"]) > 0
        times = client.get_metric_history(r.info.run_id, "epoch_time_s")
        rates = client.get_metric_history(r.info.run_id, "throughput_img_s")
        samples = [
            round(t.value * v.value)
            for t, v in zip(sorted(times, key=lambda m: m.step), sorted(rates, key=lambda m: m.step))
        ]
        assert samples == [36, 36, 36], (fmt, samples)  # every epoch, persistent workers included
        assert r.data.tags["wif.n_test"] == "12" and r.data.tags["wif.n_val"] == "12"


@needs("lmdb")
@pytest.mark.slow
def test_a_pack_killed_half_way_is_rebuilt_not_used(tmp_path: Path, store: str) -> None:
    root = jpeg_folder(tmp_path / "images")
    cache = tmp_path / "cache"
    args = [*SMALL, f"data.root={root}", "data.fraction=1.0", "data.format=lmdb", "trainer.epochs=2"]
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": store,
        "WIF_CACHE_DIR": str(cache),
        "PYTHONUNBUFFERED": "1",
        THROTTLE_ENV: "0.1",
    }  # 60 records: six seconds of packing to kill it in
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list((cache / "packs").glob("lmdb-*.tmp-*/data.mdb")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # some records written, most not
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    half = list((cache / "packs").glob("lmdb-*"))
    assert len(half) == 1 and ".tmp-" in half[0].name  # only the temporary folder: never under its final name
    done = run_train(tmp_path, store, cache, *args, multirun=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    packs = list((cache / "packs").glob("lmdb-*"))
    assert len(packs) == 1 and ".tmp-" not in packs[0].name  # rebuilt; the killed one's folder removed
    assert open_pack(packs[0]).records == 60
    assert [r.info.status for r in train_runs(store)] == ["FINISHED"]


@needs("lmdb")
@pytest.mark.slow
def test_a_corrupt_pack_and_a_truncated_record_stop_the_run_before_training(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    root = jpeg_folder(tmp_path / "images")
    made = {}
    for fmt in ("lmdb", "shards"):
        made[fmt] = tmp_path / f"pack-{fmt}"
        assert (
            wif_pack(
                [
                    "data=folder",
                    f"data.root={root}",
                    "data.shard_mb=0.02",
                    f"data.cache_dir={cache_dir}",
                    "--to",
                    fmt,
                    "--out",
                    str(made[fmt]),
                ]
            )
            == 0
        )
    corrupt = tmp_path / "corrupt-lmdb"
    shutil.copytree(made["lmdb"], corrupt)
    with open(corrupt / "data.mdb", "r+b") as f:
        f.write(b"\xff" * 8192)  # both meta pages
    cut_shards = tmp_path / "cut-shards"
    shutil.copytree(made["shards"], cut_shards)
    member = truncate_tar_member(cut_shards / "train-000000.tar")
    cases = [
        (corrupt, "lmdb", "data.mdb cannot be read by LMDB"),
        (cut_shards, "shards", f"record train/{member.split('.')[0]} is"),
    ]  # lmdb's: the test below
    for pack, fmt, says in cases:
        proc = run_train(tmp_path, store, cache_dir, *SMALL, f"data.format={fmt}", f"data.path={pack}", multirun=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out[-3000:]
        lines = [line for line in out.splitlines() if "Bad setting" in line]
        assert len(lines) == 1 and f"pack {pack}" in lines[0] and says in lines[0], out[-3000:]
        assert "Traceback" not in out
    assert train_runs(store) == []  # stopped before any run was created, let alone trained


@needs("lmdb")
def test_a_truncated_lmdb_record_is_named(tmp_path: Path) -> None:
    out = small_lmdb_pack(tmp_path)
    env = pytest.importorskip("lmdb").open(str(out), subdir=True, readonly=True, lock=False)
    with env.begin() as txn:
        value = txn.get(b"train/00000004")
    env.close()
    lmdb_put(out, b"train/00000004", value[: len(value) // 2])
    with pytest.raises(PackError) as err:
        check_pack(open_pack(out), str(tmp_path / "cache"))
    message = str(err.value)
    assert f"pack {out}: record train/00000004 is {len(value) // 2 - 4} bytes" in message and "(truncated)" in message
    assert "\n" not in message


@needs("lmdb")
def test_a_record_that_does_not_decode_is_named(tmp_path: Path) -> None:
    out = small_lmdb_pack(tmp_path)
    garbage = b"this is no image"
    lmdb_put(out, b"train/00000003", (0).to_bytes(4, "little") + garbage)  # a well-formed record ...
    index = json.loads((out / "index.json").read_text())
    index["train"]["lengths"][3], index["train"]["crc32"][3], index["train"]["labels"][3] = (
        len(garbage),
        crc(garbage),
        0,
    )
    raw = json.dumps(index).encode()
    (out / "index.json").write_bytes(raw)
    meta = json.loads((out / "pack.json").read_text())
    meta["index_sha256"] = hashlib.sha256(raw).hexdigest()  # ... that its index vouches for
    meta["files"]["data.mdb"] = (out / "data.mdb").stat().st_size
    (out / "pack.json").write_text(json.dumps(meta))
    with pytest.raises(PackError) as err:
        check_pack(open_pack(out), str(tmp_path / "cache"))
    assert f"pack {out}: record train/00000003 does not decode" in str(err.value) and "\n" not in str(err.value)


@needs("lmdb")
def test_data_encoded_is_written_as_files_and_packed_with_the_bytes_it_decodes(tmp_path: Path) -> None:
    common = (
        "data=encoded",
        "data.num_train=50",
        "data.num_test=10",
        "data.fraction=0.4",
        "data.augment=none",
        "data.shard_mb=0.01",
    )
    plain = load_datasets(data_cfg(tmp_path / "cache", *common))  # the JPEG bytes held in memory
    expected = _train_images(plain.train)
    for fmt in FORMATS:
        data = format_datasets(data_cfg(tmp_path / "cache", *common, f"data.format={fmt}"))
        assert _train_images(data.train) == expected, fmt
    written = list((tmp_path / "cache").glob("encoded-files-*/train/*/*.jpg"))
    assert len(written) == 50


@pytest.mark.parametrize(
    "overrides, says",
    [
        (("data=synthetic", "data.format=lmdb"), "data.format=lmdb stores images decoded per sample; data=synthetic"),
        pytest.param(
            ("data=encoded", "data.format=shards", "engine=spdl", "loader.num_workers=2"),
            "data.format=shards streams its shards through a DataLoader; engine=spdl",
            marks=needs("spdl"),
        ),
        pytest.param(
            ("data=encoded", "data.format=lmdb", "engine=dali", "loader.num_workers=2"),
            "data.format=lmdb with engine=dali",
            marks=needs("nvidia.dali"),
        ),
        (("data=encoded", "data.path=/somewhere"), "data.path=/somewhere names a pack, but data.format=null"),
        (("data=encoded", "data.page_cache=cold"), "data=encoded without data.format reads no files"),
        (("data=encoded", "data.format=shards", "data.shard_mb=0"), "data.shard_mb=0.0 must be above 0"),
    ],
)
def test_formats_that_cannot_run_are_refused_in_one_line(overrides, says) -> None:
    from omegaconf import OmegaConf

    from tests.conftest import compose_cfg
    from wif.config import ConfigError, validate

    with pytest.raises(ConfigError) as err:
        validate(OmegaConf.to_object(compose_cfg(*overrides)))
    assert says in str(err.value) and "\n" not in str(err.value)
