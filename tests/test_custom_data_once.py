"""data=custom: the user's dataset factory is called once per run, by the run's own process, which checks what
it built before the run's MLflow record exists: a slow factory pays once, a bad one is refused in one line,
exit 2, with no run in the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_train, train_runs

CUSTOM = ("preset=smoke", "trainer.epochs=2", "data=custom", "data.batch_size=32")


def _calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_the_factory_is_called_once_per_run_and_once_for_the_sweeps_check(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """Also: the factory's module sits in the working folder, which is not on the process's path (train.py's own
    folder is), as a user's module beside them under `wif-study` (before: "cannot import module 'mine'")."""
    calls = tmp_path / "calls.txt"
    (tmp_path / "mine.py").write_text("from tests.user_factories import counted_squares  # noqa: F401\n")
    counted = ("data._target_=mine.counted_squares", f"+data.kwargs.calls={calls}")
    proc = run_train(tmp_path, store, cache_dir, *CUSTOM, *counted, multirun=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert _calls(calls) == 1  # it was 2: a check in a forked process, then the run
    (run,) = train_runs(store, status="FINISHED")
    assert run.data.tags["wif.n_train"] and run.data.tags["wif.device"] == "cpu"  # what was said before the record
    calls.unlink()
    sweep = run_train(tmp_path, store, cache_dir, *CUSTOM, *counted, "loader=baseline,pin", "resume=false")
    assert sweep.returncode == 0, (sweep.stdout + sweep.stderr)[-3000:]
    assert _calls(calls) == 3  # the sweep's check before its first job, then once per run
    assert len(train_runs(store, status="FINISHED")) == 2  # resume=false: the sweep's baseline supersedes the first


@pytest.mark.slow
def test_a_factory_that_raises_is_refused_in_one_line_with_no_run(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(
        tmp_path, store, cache_dir, *CUSTOM, "data._target_=tests.user_factories.raising_dataset", multirun=False
    )
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "Bad setting" in line]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in out, out[-3000:]
    assert "data._target_=tests.user_factories.raising_dataset raised ValueError: cannot open the bucket" in lines[0]
    assert train_runs(store) == []
