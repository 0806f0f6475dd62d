"""The training loader is the one that trains, and one loop is one session: real scripts in subprocesses, the
real HF Trainer (skipped where transformers is not installed), a real MLflow store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT
from tests.watching import epochs, run_loop, watch, watch_runs
from wif.watcher.hook import BOOT
from wif.watcher.orders import ENV

# A tiny HF Trainer: a 2-layer net that returns its loss, items that wait `delay` each. "steps": the same
# dataset object as train and eval set (a quick overfitting check), evaluated every 10 steps, 2 epochs of 32
# steps. "start": evaluated at the start and each epoch, the eval set of another class that waits 0.
HF = """
import sys, tempfile, time, torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

class Items(Dataset):
    def __init__(self, n, delay_s): self.n, self.delay_s = n, delay_s
    def __len__(self): return self.n
    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return {"x": torch.randn(8, generator=torch.Generator().manual_seed(i)), "labels": i % 2}

class Held(Items):
    pass

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    def forward(self, x, labels=None):
        logits = self.body(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

mode = sys.argv[1]
train = Items(128, 0.001 if mode == "steps" else 0.004)
evals = train if mode == "steps" else Held(64, 0.0)
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(), num_train_epochs=2, per_device_train_batch_size=4, per_device_eval_batch_size=32,
    eval_strategy=mode if mode == "steps" else "epoch", eval_steps=10, eval_on_start=mode == "start",
    save_strategy="no", report_to=[], disable_tqdm=True, logging_strategy="no", use_cpu=True,
)
trainer = Trainer(model=Net(), args=args, train_dataset=train, eval_dataset=evals)
trainer.train()
print("global_step", trainer.state.global_step)
"""


def test_an_hf_evaluation_over_the_training_set_never_ends_the_training_epoch(tmp_path: Path) -> None:
    """The Trainer evaluates every 10 steps over its training set: under `wif-watch` it runs all 64 steps, and
    the watch says its 2 training epochs of 32 batches (before: each evaluation closed the training epoch's
    iterator, HF ended the epoch, and the run stopped at step 20)."""
    pytest.importorskip("transformers")
    (tmp_path / "hf.py").write_text(HF)
    done = watch(tmp_path, sys.executable, "hf.py", "steps")
    assert done.returncode == 0 and "global_step 64" in done.stdout, done.stdout[-1000:] + done.stderr[-3000:]
    said = epochs(done.stderr)
    assert [e["batches"] for e in said] == [32, 32] and not any(e["early"] for e in said), done.stderr[-3000:]


def test_an_hf_evaluation_on_start_is_not_taken_for_the_training_loader(tmp_path: Path) -> None:
    """`eval_on_start=True`: the first loader iterated with gradients on is the evaluation's. wif-advise's
    probe names the training set, with its batch time, once a step proved it (before: the Held set, whose
    0.045-s epochs were advised as the training's)."""
    pytest.importorskip("transformers")
    (tmp_path / "hf.py").write_text(HF)
    out = tmp_path / "probed.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([BOOT, str(ROOT)]), "PYTHONUNBUFFERED": "1"}
    env[ENV] = json.dumps({"uri": "", "run_id": None, "mode": "probe", "out": str(out)})
    done = subprocess.run(
        [sys.executable, "hf.py", "start"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "global_step" not in done.stdout, done.stderr[-3000:]  # it left at the probe
    probed = json.loads(out.read_text())
    assert probed["dataset"] == "Items" and probed["framework"] == "transformers", probed
    assert probed["batch_size"] == 4 and probed["batch_s"] > 0, probed


GENERATOR = """
def batches():
    for i in range(3):
        yield torch.randn(4, 4)

for epoch in range(30):
    for x in wif.watch(batches(), run_name="anew"):
        pass
"""


def test_a_generator_made_anew_each_epoch_is_one_run(tmp_path: Path, store: str) -> None:
    """A generator of batches made each epoch inside `wif.watch(...)`: one MLflow run of its 30 epochs (before:
    30 runs of one window each, every one "epoch 1")."""
    done = run_loop(tmp_path, GENERATOR, store)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split(":")[1] for line in done.stderr.splitlines() if line.startswith("wif.watch: epoch")]
    assert lines == [f" epoch {i}" for i in range(1, 31)], done.stderr[-2000:]
    (found,) = watch_runs(store)
    history = MlflowClient(store).get_metric_history(found.info.run_id, "epoch_time_s")
    assert len(history) == 30 and found.data.metrics["epochs_run"] == 30 and found.info.status == "FINISHED"


DROPPED = """
import threading
from mlflow.tracking import MlflowClient

def samplers():
    return sum(t.name == "wif-sampler" for t in threading.enumerate())

def train():
    loader = DataLoader(Slow(), batch_size=16)
    for epoch in range(3):
        for x, y in wif.watch(loader, run_name="dropped"):
            pass
    print("training", samplers())

train()
t_end = time.monotonic() + 60
while any(t.name in ("wif-sampler", "wif-end") for t in threading.enumerate()) and time.monotonic() < t_end:
    time.sleep(0.05)  # the script works on without its loop
print("after", samplers())
(found,) = MlflowClient().search_runs([MlflowClient().get_experiment_by_name("who_is_faster").experiment_id])
print("run", found.info.status, int(found.data.metrics.get("epochs_run", 0)))
"""


def test_a_loop_that_is_gone_ends_its_session_before_the_script(tmp_path: Path, store: str) -> None:
    """A loop in a function, its loader dropped as it returns: its sampler thread ends and its run is closed,
    3 epochs logged, while the script works on (before: both lasted to the script's end)."""
    done = run_loop(tmp_path, DROPPED, store)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["training", "1", "after", "0", "run", "FINISHED", "3"], done.stderr[-2000:]
    (found,) = watch_runs(store)
    assert len(MlflowClient(store).get_metric_history(found.info.run_id, "epoch_time_s")) == 3
    assert "wif.watch: epoch 3" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
