"""No line changed: a script without `wif.watch`, its own loop here, has its training loader watched through
DataLoader itself (wif.watcher.hook) under `wif-watch --`. Real scripts in subprocesses, a real MLflow store.
The frameworks' loops (Lightning's `Trainer.fit`, the HF `Trainer`, accelerate) and `wif-advise --` on one:
tests/test_no_line_changed_frameworks.py."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import holds_unless_disturbed, new_store
from tests.watching import epochs, watch

ROOT = Path(__file__).resolve().parents[1]
STEADY = ("epoch_time_s", "data_wait_s")  # per epoch, the first (the warm-up) left out

# A loop as people write it, with no wif in it: a training loader and a validation loader under no_grad (the
# watch must pick the first), items that wait 4 ms (a read that takes no CPU), `--watch`: the same loop with
# the one line of wif.watch, to compare the two.
PLAIN = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

class Sleepy(Dataset):
    def __init__(self, n): self.n = n
    def __len__(self): return self.n
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(16), i % 2

class Held(Sleepy):
    pass

train, val = DataLoader(Sleepy(128), batch_size=16), DataLoader(Held(16), batch_size=8)
model = torch.nn.Linear(16, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
watch = __import__("wif").watch if "--watch" in sys.argv else (lambda loader: loader)
for epoch in range(int(sys.argv[1])):
    for x, y in watch(train):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        held = sum(model(x).argmax(1).eq(y).sum().item() for x, y in val)
print(f"trained; held-out right {held}")
sys.exit(3)
"""


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """The loop run 6 epochs under `wif-watch` and with its wif.watch line, side by side (both mostly sleep), twice
    each in turn, each logged to a store of its own."""
    where = tmp_path_factory.mktemp("plain")
    (where / "plain.py").write_text(PLAIN)
    out: Dict[str, Any] = {}

    def run(name: str) -> subprocess.CompletedProcess:
        hooked = name.startswith("hooked")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        env.pop("WIF_WATCH_ORDERS", None)
        env["MLFLOW_TRACKING_URI"] = out[f"{name}_store"] = new_store(where, f"{name}.db")
        how = [sys.executable, "-m", "wif.watcher.hook", "--"] if hooked else []
        argv = [*how, sys.executable, "plain.py", "6", *([] if hooked else ["--watch"])]
        return subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:  # a run's median wanders a few percent on its own: two pairs
        for pair in (("hooked", "lined"), ("hooked_b", "lined_b")):
            out.update(zip(pair, pool.map(run, pair)))
    return out


@pytest.mark.alone
def test_an_unchanged_loop_has_its_training_loader_watched_and_runs_as_it_would(plain: Dict) -> None:
    """The training loader's epochs are said, the validation pass under no_grad is not; the script's output
    and exit code are its own."""
    done = plain["hooked"]
    assert done.returncode == 3 and "trained; held-out right" in done.stdout, done.stderr[-2000:]
    said = epochs(done.stderr)
    assert [e["batches"] for e in said] == [8] * 6 and not any(e["early"] for e in said), done.stderr[-2000:]


def test_a_loader_named_by_its_dataset_is_the_one_watched(tmp_path: Path) -> None:
    """`wif-watch --loader Held` names the other loader, the validation's: then its epochs are the ones said."""
    (tmp_path / "plain.py").write_text(PLAIN)
    done = watch(tmp_path, sys.executable, "plain.py", "2", loader="Held")
    assert done.returncode == 3 and "trained; held-out right" in done.stdout, done.stderr[-2000:]
    assert [e["batches"] for e in epochs(done.stderr)] == [2, 2], done.stderr[-2000:]


@pytest.mark.alone
def test_the_figures_of_an_unchanged_loop_and_of_wif_watch_agree(plain: Dict) -> None:
    """The same loop, watched through DataLoader (no line changed) and through `wif.watch(train)`: the steady
    epochs' time within 5% and the share of it spent waiting for data within 5 points (two runs each, as logged).
    """
    figures, found = {}, []
    for name in ("hooked", "lined"):
        history: Dict[str, List[float]] = {k: [] for k in STEADY}
        for run_name in (name, f"{name}_b"):
            client = MlflowClient(plain[f"{run_name}_store"])
            experiments = [e.experiment_id for e in client.search_experiments()]
            runs = client.search_runs(experiments, "tags.`wif.kind` = 'watch'")
            assert len(runs) == 1, plain[run_name].stderr[-2000:]
            found += runs
            for k in STEADY:
                history[k] += [m.value for m in client.get_metric_history(runs[0].info.run_id, k)][1:]
        figures[name] = (
            statistics.median(history["epoch_time_s"]),
            statistics.median(w / t for w, t in zip(history["data_wait_s"], history["epoch_time_s"])),
        )
    (t_hook, share_hook), (t_line, share_line) = figures["hooked"], figures["lined"]
    holds_unless_disturbed(abs(t_hook / t_line - 1) < 0.05, found, f"the epochs agree within 5%: {figures}")
    holds_unless_disturbed(abs(share_hook - share_line) < 0.05, found, f"the wait shares within 5 points: {figures}")


def test_a_subclass_of_a_held_loader_is_iterated_by_its_own_class_not_as_a_dataloader() -> None:
    """A class the hook holds (it makes its DataLoader and iterates it itself) and a subclass of it: the epoch
    the watch runs for either is the holder's own iteration (before, a subclass fell to DataLoader.__iter__,
    which an object that is no DataLoader cannot run)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from wif.watcher import hook

    class Holder:
        def __init__(self) -> None:
            self.base = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)

        def __iter__(self):
            for (x,) in self.base:
                yield x.sum().item()

    class Sub(Holder):
        pass

    original = Holder.__iter__
    try:
        hook._holder(Holder(), DataLoader(TensorDataset(torch.zeros(1))))
        assert Holder in hook.HELD and Holder.__iter__ is not original
        assert list(hook._Own(Sub()).own()) == [1.0, 5.0]
    finally:
        Holder.__iter__ = original
        hook.HELD.pop(Holder, None)


# A DataLoader made inside an object the hook cannot look at (here its class's isinstance check raises): the
# training runs as it would, its DataLoader's epochs are watched, and the hook says so in one line.
UNLOOKABLE = """
import torch
from torch.utils.data import DataLoader, TensorDataset

class Opaque(type):
    def __instancecheck__(cls, obj):
        raise RuntimeError("no looking")

class Maker(metaclass=Opaque):
    def __init__(self):
        self.loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)

maker = Maker()
model = torch.nn.Linear(4, 1)
for epoch in range(2):
    for (x,) in maker.loader:
        model(x).sum().backward()
print("trained")
"""


def test_a_dataloader_made_where_the_hook_cannot_look_is_watched_and_said_once(tmp_path: Path) -> None:
    (tmp_path / "opaque.py").write_text(UNLOOKABLE)
    done = watch(tmp_path, sys.executable, "opaque.py")
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
    assert done.stderr.count("wif.watch: cannot look at what made this DataLoader (RuntimeError: no looking)") == 1
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert [e["batches"] for e in epochs(done.stderr)] == [2, 2], done.stderr[-3000:]
