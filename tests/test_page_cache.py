"""data.page_cache=cold (docs/formats.md): the data's files are evicted before each epoch without root, the
first cold epoch reads them from storage, a warm one does not, and where eviction cannot work (tmpfs) cold
is refused in one line before any run."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import needs, run_train, train_runs
from tests.images import data_cfg, jpeg_folder
from wif.config import ConfigError
from wif.data.datasets import split_indices
from wif.data.folder import folder_files
from wif.data.formats.splits import prepare_storage
from wif.measure.pagecache import evict, eviction_refused, resident_fraction, tree_read_bytes

SHM = Path("/dev/shm")


def _files(root: Path):
    return sorted(str(p) for p in root.rglob("*.jpg"))


def test_eviction_empties_the_cache_and_the_next_read_comes_from_storage(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(4 << 20))
    refused = eviction_refused([str(path)])
    if refused:
        pytest.skip(refused)
    with open(path, "rb") as f:
        f.read()
    assert resident_fraction([str(path)]) > 0.9
    evict([str(path)])
    assert resident_fraction([str(path)]) < 0.1
    before = tree_read_bytes()
    with open(path, "rb") as f:
        f.read()
    assert tree_read_bytes() - before >= 0.8 * (4 << 20)
    before = tree_read_bytes()
    with open(path, "rb") as f:  # warm now
        f.read()
    assert tree_read_bytes() - before < 0.05 * (4 << 20)


@pytest.mark.slow
def test_the_cold_cache_is_cold_and_the_warm_one_is_warm(tmp_path: Path, store: str, cache_dir: Path) -> None:
    root = jpeg_folder(tmp_path / "images", per_class=20, test_per_class=4, size=192)  # on /tmp: a real disk here
    refused = eviction_refused(_files(root))
    if refused:
        pytest.skip(refused)
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=folder",
        f"data.root={root}",
        "data.fraction=1.0",
        "data.val_split=0.25",
        "loader=baseline",
        "loader.num_workers=2",
        "trainer.epochs=2",
        "data.page_cache=warm,cold",
        "sweep.shuffle=false",
    )  # warm first
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    # the files the training split reads, picked as every run picks them
    cfg = data_cfg(tmp_path / "c", "data=folder", f"data.root={root}", "data.fraction=1.0", "data.val_split=0.25")
    files, _ = folder_files(cfg)
    train_idx, _ = split_indices(len(files["train_y"]), 1.0, 0.25, 0)
    train_bytes = sum(os.path.getsize(files["train_paths"][i]) for i in train_idx)
    client = MlflowClient(store)
    runs = {r.data.params["data.page_cache"]: r for r in train_runs(store, status="FINISHED")}
    history = {
        mode: {
            key: [m.value for m in sorted(client.get_metric_history(r.info.run_id, key), key=lambda m: m.step)]
            for key in ("storage_read_bytes", "page_cache_resident_frac")
        }
        for mode, r in runs.items()
    }
    cold, warm = history["cold"], history["warm"]
    assert len(cold["storage_read_bytes"]) == 2 and max(cold["page_cache_resident_frac"]) < 0.10, cold
    assert min(cold["storage_read_bytes"]) >= 0.8 * train_bytes, (cold, train_bytes)  # read by the 2 workers
    print(f"cold: {cold}; warm: {warm}; the training split's files: {train_bytes} bytes")
    # warm: the files stay as the OS left them (here: read by the folder check just before), so the epoch
    # after the warm-up (which may page in code a worker runs for the first time) reads next to nothing
    assert min(warm["page_cache_resident_frac"]) > 0.9, warm
    assert warm["storage_read_bytes"][-1] < 0.05 * train_bytes, (warm, train_bytes)
    assert np.mean(cold["storage_read_bytes"]) > 10 * max(warm["storage_read_bytes"][-1], 1.0)


@pytest.fixture
def shm_folder():
    """A small image folder on /dev/shm (tmpfs): where evicting pages cannot work."""
    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    root = SHM / f"wif-test-{uuid.uuid4().hex[:8]}"
    try:
        jpeg_folder(root, per_class=2, test_per_class=1)
        if not eviction_refused(_files(root)):
            pytest.skip("/dev/shm drops evicted pages here: not a tmpfs")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@needs("lmdb")
def test_a_job_refuses_cold_on_tmpfs_for_the_folder_and_for_a_pack_in_the_cache(
    shm_folder: Path, tmp_path: Path
) -> None:
    folder = data_cfg(tmp_path / "c", "data=folder", f"data.root={shm_folder}", "data.page_cache=cold")
    with pytest.raises(ConfigError) as err:
        prepare_storage(folder)
    assert "data.page_cache=cold" in str(err.value) and "tmpfs" in str(err.value) and str(shm_folder) in str(err.value)
    in_shm = data_cfg(
        shm_folder / "cache", "data=folder", f"data.root={shm_folder}", "data.format=lmdb", "data.page_cache=cold"
    )  # the pack goes to a cache on tmpfs
    with pytest.raises(ConfigError, match="tmpfs"):
        prepare_storage(in_shm)


@pytest.mark.slow
def test_a_sweep_with_cold_on_tmpfs_is_refused_before_its_first_job(
    shm_folder: Path, tmp_path: Path, store: str, cache_dir: Path
) -> None:
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=folder",
        f"data.root={shm_folder}",
        "data.fraction=1.0",
        "data.val_split=0.25",
        "data.page_cache=cold",
        "loader=baseline,pin",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    reasons = [line for line in out.splitlines() if "data.page_cache=cold:" in line]
    assert len(reasons) == 1 and "tmpfs" in reasons[0] and "2 of 2 jobs" in out, out[-3000:]
    assert train_runs(store) == []


@needs("lmdb")
@pytest.mark.slow
def test_cold_epochs_read_storage_or_the_run_says_it_was_not_cold(tmp_path: Path, store: str, cache_dir: Path) -> None:
    """An LMDB pack and an image folder, with 0 workers and with persistent ones: every measured epoch read
    from storage with the data's pages evicted, or the run is tagged not cold, and the report says so. The
    LMDB run with 0 workers reads through the main process's own map: evicting it means closing that first."""
    from wif.data.formats.splits import COLD_RESIDENT_LIMIT
    from wif.report.report_cli import main as report_main

    root = jpeg_folder(tmp_path / "images", per_class=20, test_per_class=4, size=96)
    refused = eviction_refused(_files(root))
    if refused:
        pytest.skip(refused)
    common = (
        "preset=smoke",
        "data=folder",
        f"data.root={root}",
        "data.fraction=1.0",
        "data.val_split=0.25",
        "data.page_cache=cold",
        "loader=baseline",
        "data.format=folder,lmdb",
        "trainer.epochs=3",
    )
    for workers in (("loader.num_workers=0",), ("loader.num_workers=2", "loader.persistent_workers=true")):
        proc = run_train(tmp_path, store, cache_dir, *common, *workers)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    client = MlflowClient(store)
    runs = train_runs(store, status="FINISHED")
    assert len(runs) == 4
    verdicts = {}
    for r in runs:
        h = {
            key: [m.value for m in sorted(client.get_metric_history(r.info.run_id, key), key=lambda m: m.step)]
            for key in ("storage_read_bytes", "page_cache_resident_frac", "page_cache_cold")
        }
        measured = {key: values[1:] for key, values in h.items()}  # after the warm-up epoch
        cold = all(b > 0 for b in measured["storage_read_bytes"]) and all(
            f <= COLD_RESIDENT_LIMIT for f in measured["page_cache_resident_frac"]
        )
        tag = r.data.tags["wif.page_cache_cold"]
        assert tag == str(cold).lower() and measured["page_cache_cold"] == [float(cold)] * 2, (r.info.run_name, h)
        verdicts[(r.data.params["data.format"], r.data.params["loader.num_workers"])] = cold
        if not cold:
            assert "stayed resident" in r.data.tags["wif.page_cache_note"]
    # fixed: neither the main process's LMDB map nor a persistent worker's (closed after each batch it reads)
    # holds the pack through the eviction; files hold nothing
    assert all(verdicts.values()) and len(verdicts) == 4, verdicts
    out = tmp_path / "report"
    assert report_main(["--tracking-uri", store, "--out", str(out), "--no-log", "--keep-contended"]) == 0
    text = (out / "summary.md").read_text()
    for r in runs:
        if r.data.tags["wif.page_cache_cold"] == "false":  # a persistent worker's map (docs/formats.md)
            assert "**Warning: not cold.**" in text and r.info.run_name in text


def test_the_report_warns_of_a_run_whose_cold_epochs_were_not_cold(tmp_path: Path) -> None:
    """An engine's own long-lived workers may still map a pack: such a run is tagged, and the report says so."""
    from tests.stores import log_run, study_store
    from wif.report.report_cli import main as report_main

    client, uri, exp_id = study_store(tmp_path)
    for block in range(2):
        for loader, time in (("baseline", 2.0), ("pin_nb_w4_pf2", 1.0)):
            run_id = log_run(client, exp_id, loader, 0.1, block, time * (1 + 0.01 * block), device="cpu")
            warm = loader == "pin_nb_w4_pf2" and block == 1
            client.set_tag(run_id, "wif.page_cache_cold", str(not warm).lower())
            if warm:
                client.set_tag(
                    run_id,
                    "wif.page_cache_note",
                    "2 of 2 measured epochs were not cold: up to 10% of "
                    "the data's pages stayed resident after eviction",
                )
    out = tmp_path / "report"
    assert report_main(["--tracking-uri", uri, "--out", str(out), "--no-log"]) == 0
    text = (out / "summary.md").read_text()
    assert "**Warning: not cold.**" in text and "pin_nb_w4_pf2@0.1#1" in text and "stayed resident" in text


@needs("lmdb")
def test_under_a_cold_cache_each_batch_lets_go_of_the_lmdb_map_host_or_device_decoded(tmp_path: Path) -> None:
    """A persistent worker reads batches (DataLoader's __getitems__) and lives through the eviction: after each
    batch its process holds no map of the pack, whether it hands out decoded images or their bytes
    (data.decode=device). Warm, the map stays open between batches."""
    from wif.data.decode import encoded_split
    from wif.data.formats import lmdb_format
    from wif.data.formats.splits import format_datasets

    root = jpeg_folder(tmp_path / "images", per_class=6, test_per_class=2, size=32)
    for cache, held in (("cold", False), ("warm", True)):
        cfg = data_cfg(
            tmp_path / "cache",
            "data=folder",
            f"data.root={root}",
            "data.fraction=1.0",
            "data.format=lmdb",
            f"data.page_cache={cache}",
        )
        train = format_datasets(cfg).train
        for split in (train, encoded_split(train, cfg, train=True)):
            lmdb_format.close_all()
            batch = split.__getitems__([0, 1, 2])
            assert (train.decoder.path in lmdb_format._OPEN) is held, (cache, type(split).__name__)
            assert len(batch) == 3 and int(batch[0][1]) == int(split[0][1])  # the samples __getitem__ gives
    lmdb_format.close_all()
