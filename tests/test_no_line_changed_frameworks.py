"""No line changed, in the frameworks: Lightning's `Trainer.fit`, the HF `Trainer` and accelerate iterate the
training loader inside themselves, and it is watched there through DataLoader (wif.watcher.hook), under
`wif-watch --` and under `wif-advise --`. Real scripts in subprocesses, the real frameworks (skipped where
one is not installed), a real MLflow store. The plain loop's own: tests/test_no_line_changed.py."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.advising import advise, runs
from tests.answers import assert_data_bound_on_a_cpu
from tests.conftest import SideBySide, holds_unless_disturbed, selected_cases
from tests.watching import epochs, watch
from wif.advisor.script.mode import paste

FRAMEWORKS = {
    "lightning": ("lightning", "examples.train_lightning"),
    "hf": ("transformers", "examples.train_hf"),
    "accelerate": ("accelerate", "examples.train_accelerate"),
}
VAL_S = 6.4  # Lightning's one validation batch: 32 items that wait 200 ms each


def watch_framework(where: Path, name: str) -> subprocess.CompletedProcess:
    """The framework's example, 2 epochs of 4 batches under `wif-watch` (Lightning's validation item waits 200
    ms: 32 items, VAL_S)."""
    args = ["--epochs", "2", "--n-train", "128", "--batch-size", "32"]
    args += ["--val-delay-ms", "200"] if name == "lightning" else []
    return watch(where, sys.executable, "-m", FRAMEWORKS[name][1], *args)


# accelerate's DataLoaderShard iterates its DataLoader one batch ahead: that DataLoader's epoch ends before the
# loop's last step. One batch an epoch, a step of 0.3 s: an epoch timed at the DataLoader would be the fetch alone.
AHEAD = """
import time, torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
accelerator = Accelerator(cpu=True)
train = accelerator.prepare(DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=8))
for epoch in range(3):
    for (x,) in train:
        time.sleep(0.3)
print("trained")
"""


def watch_ahead(where: Path) -> subprocess.CompletedProcess:
    (where / "ahead.py").write_text(AHEAD)
    return watch(where, sys.executable, "ahead.py")


@pytest.fixture(scope="module")
def frameworks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SideBySide:
    """Each installed framework's example, 2 epochs under `wif-watch`, and accelerate's loop one batch ahead:
    the selected ones side by side (Lightning first: its validations wait 2 x VAL_S, taking no CPU)."""
    together = SideBySide()
    wanted = {
        "lightning": "test_lightnings_training_loop_is_watched_epoch_by_epoch_without_its_validation",
        "hf": "test_a_frameworks_training_loop_is_watched_epoch_by_epoch",
        "accelerate": "test_a_frameworks_training_loop_is_watched_epoch_by_epoch",
    }
    for name, test in wanted.items():
        if importlib.util.find_spec(FRAMEWORKS[name][0]) is not None and selected_cases(request, test):
            together.start(name, functools.partial(watch_framework, tmp_path_factory.mktemp(name), name))
    ahead = "test_a_loader_that_accelerate_iterates_one_batch_ahead_is_timed_to_the_loops_last_step"
    if importlib.util.find_spec("accelerate") is not None and selected_cases(request, ahead):
        together.start("ahead", functools.partial(watch_ahead, tmp_path_factory.mktemp("ahead")))
    return together


def assert_two_epochs_of_4_batches(done: subprocess.CompletedProcess) -> List[Dict[str, float]]:
    """The run ended well, and said 2 watched epochs of 4 batches, none ended early: the epochs said."""
    assert done.returncode == 0, done.stderr[-3000:]
    said = epochs(done.stderr)
    assert [e["batches"] for e in said] == [4, 4] and not any(e["early"] for e in said), done.stderr[-3000:]
    return said


@pytest.mark.parametrize("name", ("accelerate", "hf"))
def test_a_frameworks_training_loop_is_watched_epoch_by_epoch(frameworks: SideBySide, name: str) -> None:
    """The framework iterates the loader: each of its 2 training epochs is one watched epoch of 4 batches, the
    validation passes are not watched."""
    pytest.importorskip(FRAMEWORKS[name][0])
    assert_two_epochs_of_4_batches(frameworks.result(name))


def test_lightnings_training_loop_is_watched_epoch_by_epoch_without_its_validation(frameworks: SideBySide) -> None:
    """Lightning's Trainer iterates the loader: each of its 2 training epochs is one watched epoch of 4 batches,
    the validation passes are not watched and are not in the training epoch's time (Lightning's fetcher takes
    its batches by count and never asks for the end: the epoch ends where the validation loader starts; its one
    validation batch waits VAL_S here, so an epoch that counted it would be VAL_S longer than its own wait)."""
    pytest.importorskip("lightning")
    said = assert_two_epochs_of_4_batches(frameworks.result("lightning"))
    # the step's share: 4 small batches, 1.5-1.9 s at a load of 8 on 2 cores; a counted validation adds VAL_S
    assert all(e["time"] - e["wait"] < VAL_S - 2.4 for e in said), said


def test_a_loader_that_accelerate_iterates_one_batch_ahead_is_timed_to_the_loops_last_step(
    frameworks: SideBySide,
) -> None:
    pytest.importorskip("accelerate")
    done = frameworks.result("ahead")
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
    said = epochs(done.stderr)
    assert [e["batches"] for e in said] == [1, 1, 1], done.stderr[-3000:]
    assert all(e["time"] >= 0.3 for e in said), said  # each epoch holds its step


def test_the_lines_to_paste_are_in_the_frameworks_own_terms() -> None:
    args = {"num_workers": 4, "persistent_workers": True, "prefetch_factor": 4, "pin_memory": False}
    hf, again = paste({"framework": "transformers", "made_at": "t.py:9 in main"}, args, ["python", "t.py"])
    assert hf == (
        "TrainingArguments(<your other arguments>, dataloader_num_workers=4, dataloader_persistent_workers=True, "
        "dataloader_prefetch_factor=4, dataloader_pin_memory=False)"
    )
    assert again == "those TrainingArguments fields, then as before: python t.py"
    lit, _ = paste({"framework": "lightning", "made_at": "m.py:52 in train_dataloader"}, args, ["python", "m.py"])
    assert lit.startswith("in your train_dataloader() (made at m.py:52 in train_dataloader): DataLoader(<your ")
    plain, _ = paste({"framework": ""}, {**args, "in_order": False}, ["python", "m.py"])
    assert plain.endswith("pin_memory=False, in_order=False)")


@pytest.mark.alone
@pytest.mark.slow
def test_an_unchanged_hf_trainer_script_is_advised_on_its_training_loader(tmp_path: Path, store: str) -> None:
    """`wif-advise -- python -m examples.train_hf`, the script unchanged, items waiting 8 ms at 0 workers:
    data-bound, a worker setting raced faster, and the lines to paste as TrainingArguments' fields. Each trial's
    order reached the loader the Trainer iterates: its run finished with that many workers (from f01ff10 on, the
    HF Trainer's trials timed 0 workers under every name, until the orders replaced the DataLoader inside
    accelerate's DataLoaderShard). Lightning's and accelerate's own: tests/test_package_scripts.py."""
    pytest.importorskip("transformers")
    done = advise(
        tmp_path,
        store,
        # the smallest race that can pick: 2 blocks of 2 runs, each a warm-up and 2 steady epochs. Its interval
        # is wide (3.19x raced, 2.07-4.92): the items wait 8 ms, not 4, so that workers are clearly faster
        *("--minutes", "3", "--epochs", "2", "--race-candidates", "1", "--max-blocks", "2", "--max-epochs", "3"),
        "measure.contended_pct=1000",  # no run again: on a busy machine the reruns would leave the trials no time
        "--",
        sys.executable,
        "-m",
        "examples.train_hf",
        *("--epochs", "40", "--n-train", "128", "--batch-size", "32", "--delay-ms", "8"),
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:] + out[-3000:]
    found = runs(store)
    assert found and all(r.info.status == "FINISHED" for r in found)
    assert "its training loader (run by" in out and "over a " in out and "train_hf.py:" in out, out[:2000]
    trials = [r for r in found if r.data.tags["wif.advise_role"] == "loader"]
    holds_unless_disturbed(bool(trials), found, f"the worker trials ran within the minutes: {out[-3000:]}")
    for r in trials:  # the order reached the loader: its workers ran
        assert r.data.metrics.get("workers_peak", 0) == int(r.data.params["loader.num_workers"]), r.info.run_name
    holds_unless_disturbed("Pick: w" in out, found, "workers overlap the sleeps: a worker setting is picked")
    assert "TrainingArguments(<your" in out, out[-2000:]
    assert_data_bound_on_a_cpu(found)
