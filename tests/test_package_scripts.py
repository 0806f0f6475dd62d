"""Code that packages ship, advised by `wif-advise -- python -m tests.package_scripts.NAME` on generated data.

Each package's code runs unchanged, imported from the installed package (pytest's header names the versions):
- Lightning: `lightning.pytorch.demos.boring_classes`' BoringModel and BoringDataModule, fit by its Trainer;
- accelerate: `accelerate.test_utils.training`'s RegressionModel and RegressionDataset, prepared by an
  Accelerator, in the loop of its `test_utils/scripts/test_script.py`;
- timm: `timm.data.create_loader` (its ImageDataset, transforms, fast_collate and PrefetchLoader) over a JPEG
  folder made here.

Their scripts in accelerate's `test_utils/scripts` test accelerate itself, three epochs of many loaders, and
Lightning's demos ship classes: so a driver of a few lines in tests/package_scripts runs each, its data's items
waiting 4 ms as a read would. The advice must reach an answer from a race, with its interval, find the loader
that the package made or runs, and have every order of workers reach that loader.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Sequence

import pytest
from mlflow.tracking import MlflowClient

from tests.answers import advise_command, assert_answered_and_stored, assert_data_bound_on_a_cpu

ROOT = Path(__file__).resolve().parents[1]
INTERVAL = r"95% interval \d+\.\d+-\d+\.\d+"
RACED = re.compile(rf"^(Pick|Keep what you have): .*{INTERVAL}", re.M)
# A short race of the current setting against the best candidate: an answer and its interval, not a timing (so
# these run beside other tests: a pick or a keep is checked alike). Race runs of 3 epochs: a warm-up and two
# steady ones (MIN_RACE_EPOCHS).
QUICK = [
    *("--minutes", "5", "--epochs", "2", "--race-candidates", "1", "--max-blocks", "2", "--max-epochs", "3"),
    "measure.contended_pct=1000",
]


def advise_driver(tmp_path: Path, store: str, driver: str, *args: str) -> str:
    """`wif-advise QUICK -- python -m tests.package_scripts.DRIVER --epochs 40 ARGS` from tmp_path: its output."""
    command = [sys.executable, "-m", f"tests.package_scripts.{driver}", "--epochs", "40", *args]
    return advise_command(tmp_path, store, QUICK, command, PYTHONPATH=str(ROOT))


def assert_raced_with_orders_in_effect(out: str, store: str, found: Sequence[str], terms: str = "") -> None:
    """An answer from the race, with its interval; the found-loader line says `found`; a pick is pasted in the
    framework's `terms`; and every run ordered workers ran that many (before the fix of issue 74, accelerate's
    DataLoaderShard read w0's rate at "w4")."""
    assert_answered_and_stored(out, store)
    assert RACED.search(out), out[-3000:]
    line = next(s for s in out.splitlines() if "its training loader" in s)
    assert all(part in line for part in found), line
    assert terms in out or "Pick:" not in out, out[-2000:]
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    everything = client.search_runs([exp.experiment_id])
    if terms:  # the frameworks' demos: a tiny model on items that wait
        assert_data_bound_on_a_cpu(everything)
    ordered = [r for r in everything if int(r.data.params.get("loader.num_workers", 0))]
    assert ordered, out[-3000:]
    said = {(r.info.run_name, r.data.params["loader.num_workers"], r.data.metrics.get("workers_peak")) for r in ordered}
    assert all(float(w) == peak for _, w, peak in said), f"orders that did not reach the loader: {sorted(said)}"


@pytest.mark.slow
def test_lightnings_boring_model_and_data_module(tmp_path: Path, store: str) -> None:
    """lightning.pytorch.demos.boring_classes: BoringModel fit on BoringDataModule, its loader batch 1."""
    pytest.importorskip("lightning")
    out = advise_driver(tmp_path, store, "lightning_boring")
    lines = "In your script: in your train_dataloader() (made at"
    assert_raced_with_orders_in_effect(out, store, ["(run by Lightning's Trainer)", "over a Subset"], lines)


@pytest.mark.slow
def test_accelerates_regression_model_and_dataset(tmp_path: Path, store: str) -> None:
    """accelerate.test_utils.training: RegressionModel on RegressionDataset, the DataLoader prepared."""
    pytest.importorskip("accelerate")
    out = advise_driver(tmp_path, store, "accelerate_regression")
    lines = "In your script: DataLoader(<your dataset"
    assert_raced_with_orders_in_effect(out, store, ["a DataLoaderShard over a SlowRegressionDataset"], lines)


@pytest.mark.slow
def test_timms_create_loader(tmp_path: Path, store: str) -> None:
    """timm.data.create_loader over timm's ImageDataset of 96 JPEGs: fast_collate and PrefetchLoader."""
    pytest.importorskip("timm")
    from benchmarks.timm_folder import make_folder

    make_folder(tmp_path / "images", images=96, held_out=0, classes=4, size=32)
    out = advise_driver(tmp_path, store, "timm_loader", "--data", "images/train")
    assert_raced_with_orders_in_effect(out, store, [f"timm{os.sep}data{os.sep}loader.py:", "in create_loader"])
