"""The data-bound operating point (JPEG decoded per sample) and the loader knobs of issue 10."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import compose_cfg, run_train, train_runs
from wif.config import ConfigError, validate
from wif.data.datasets import DecodedSplit, load_datasets
from wif.data.loaders import Reading, build_batches
from wif.data.synthetic import encoded_arrays
from wif.report.report_cli import main as report


def _conf(cache: Path, *overrides: str):
    return OmegaConf.to_object(compose_cfg("preset=smoke", f"data.cache_dir={cache}", *overrides))


def test_encoded_set_is_the_synthetic_set_as_jpeg_and_cached(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "data=encoded", "data.num_train=200", "data.num_test=50", "data.fraction=1.0")
    arrays = encoded_arrays(conf.data)
    assert len(arrays["train_offsets"]) == 201 and arrays["train_blob"].dtype.name == "uint8"
    folder = next(p for p in tmp_path.iterdir() if p.name.startswith("encoded-"))
    stamp = (folder / "train_blob.npy").stat().st_mtime_ns
    encoded_arrays(conf.data)
    assert (folder / "train_blob.npy").stat().st_mtime_ns == stamp  # reused
    data = load_datasets(conf.data)
    assert isinstance(data.train, DecodedSplit) and len(data.train) == 160
    x, y = data.train[0]
    assert x.shape == (3, 64, 64) and x.dtype == torch.float32 and 0 <= int(y) < 10


def test_decoding_happens_in_the_workers(tmp_path: Path) -> None:
    """With workers the main process only receives batches: the decode and augment CPU time is theirs."""
    conf = _conf(tmp_path, "data=encoded", "data.augment=standard", "data.fraction=1.0", "loader.num_workers=2")
    data = load_datasets(conf.data)
    batches = build_batches(data.train, conf.loader, Reading(batch_size=64, train=True, seed=0))
    me = psutil.Process()
    before = me.cpu_times()
    n = sum(len(y) for _, y in batches)  # workers exit and are reaped at the end of the epoch
    after = me.cpu_times()
    own = (after.user + after.system) - (before.user + before.system)
    workers = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    assert n == len(data.train) and workers > 2 * own, (workers, own)


@pytest.mark.parametrize(
    "overrides,named",
    [
        (("loader.in_order=false",), "loader.in_order"),
        (("loader.multiprocessing_context=spawn",), "loader.multiprocessing_context"),
        (("data.augment=flip",), "data.augment"),
        (("data=encoded", "data.jpeg_quality=0"), "data.jpeg_quality"),
    ],
)
def test_bad_knob_combinations_are_refused(overrides: tuple, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        validate(OmegaConf.to_object(compose_cfg("preset=smoke", *overrides)))


def test_an_unknown_start_method_is_named() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg("loader.multiprocessing_context=threads")
    assert "expected one of [fork, forkserver, spawn]" in str(err.value.__cause__)  # what train.py prints


# A quarter of preset=smoke's training images and a third of its test images: what a test's run needs.
SMALL = ("data.num_train=500", "data.num_test=64")


@pytest.mark.slow
def test_encoded_runs_train_and_resident_says_it_decoded(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=encoded",
        "data.fraction=0.7",
        "loader=pin_nb_w4_pf2,gpu_resident",
        *SMALL,
        "data.batch_size=32",  # 280 augmented images learn within three epochs in batches of 32 (val_acc 0.37-0.56)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {r.data.tags["wif.loader"]: r for r in train_runs(store, status="FINISHED")}
    assert runs["gpu_resident"].data.tags["wif.resident_decoded"] == "True"
    for run in runs.values():
        assert run.data.metrics["val_acc"] > 0.2 and run.data.params["data.source"] == "encoded"


@pytest.mark.slow
def test_knobs_study_lands_its_cells(tmp_path: Path, store: str, cache_dir: Path) -> None:
    """A slice of `+study=knobs` (one loader, the fork start method) on the smoke preset."""
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "+study=knobs",
        "preset=smoke",
        *SMALL,  # its cells and the report's speedups, not their size
        "trainer.epochs=2",  # a warm-up and a measured epoch: each epoch starts the non-persistent cells' workers
        "loader=pin_nb_w4_pf2",
        "loader.multiprocessing_context=fork",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {r.data.tags["wif.cell"] for r in train_runs(store, status="FINISHED")}
    assert cells == {
        "pin_nb_w4_pf2+fork@0.4",
        "pin_nb_w4_pf2+persistent+fork@0.4",
        "pin_nb_w4_pf2+out_of_order+fork@0.4",
        "pin_nb_w4_pf2+persistent+out_of_order+fork@0.4",
    }
    out = tmp_path / "report"  # speedups against the study's reference, PyTorch's defaults (tracking.baseline)
    assert report(["--tracking-uri", store, "--out", str(out), "--no-log", "--keep-contended"]) == 0
    assert "speedup vs pin_nb_w4_pf2+fork" in (out / "summary.md").read_text()
    rows = pd.read_csv(out / "summary.csv").set_index("loader")
    assert rows.loc["pin_nb_w4_pf2+fork", "speedup"] == 1.0 and rows["speedup"].notna().all(), rows["speedup"]
