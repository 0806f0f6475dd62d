"""`benchmarks/truth.py`, the calibration panel: its short form on one script, run for real (wif-advise, then the
scripts timed plainly), and what it does with a pick's paste line and with a command that outlives its timeout.
No claim on timings: the panel's figures are a benchmark (docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("truth", ROOT / "benchmarks" / "truth.py")
truth = importlib.util.module_from_spec(spec)
spec.loader.exec_module(truth)


def test_a_paste_line_becomes_the_scripts_flags() -> None:
    plain = (
        "In your script: DataLoader(<your dataset and other arguments>, num_workers=4, persistent_workers=True, "
        "prefetch_factor=4, pin_memory=False, in_order=False) (made at loop.py:19)"
    )
    assert truth.flags_of(plain) == [
        *("--num-workers", "4", "--persistent-workers", "--prefetch-factor", "4"),
        *("--no-pin-memory", "--no-in-order"),
    ]
    hf = (
        "In your script: TrainingArguments(<your other arguments>, dataloader_num_workers=2, "
        "dataloader_prefetch_factor=None, dataloader_persistent_workers=False, dataloader_pin_memory=False)"
    )
    assert truth.flags_of(hf) == ["--num-workers", "2", "--no-persistent-workers", "--no-pin-memory"]


def test_a_command_past_its_timeout_is_ended_with_its_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cmd = ["bash", "-c", f"sleep 60 & echo $! > {pids}; sleep 60"]  # a child that would outlive its parent's end
    t0 = time.monotonic()
    done = truth.run_group(cmd, timeout_s=1.0, cwd=tmp_path, env=dict(os.environ))
    assert done.rc is None and time.monotonic() - t0 < 30
    assert truth.failure(done, 1.0) == "timed out after 1 s"
    child = int(pids.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow  # not alone: a pick or a keep, each row's structure is checked, never its timings
def test_the_short_panel_prints_a_claim_and_a_truth_per_pick(tmp_path: Path) -> None:
    out = tmp_path / "truth.json"
    argv = ["--scripts", "epochs", "--small", "--minutes", "2", "--turns", "1", "--out", str(out)]
    argv += ["--overrides", "measure.contended_pct=1000"]  # as tests/test_advise_script.py: no run again
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "truth.py"), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert [r["script"] for r in rows] == ["epochs"] and report["turns"] == 1
    lines = done.stdout.splitlines()
    for row in rows:
        if "--minutes" in row.get("failed", ""):  # a loaded machine: the advice's minutes ran out before its answer
            pytest.skip(f"{row['script']}: wif-advise within --minutes 2 on this machine: {row['failed']}")
        assert not row.get("failed"), row
        if row["pick"] == "keep":  # no claim to time: whether the race shows a gain is a timing, not checked here
            assert row["said"].startswith("Keep what you have: ") and "truth" not in row, row
            assert f"{row['script']:<14}{row['said']}" in lines
            continue
        assert row["speedup_ci_low"] <= row["speedup"] <= row["speedup_ci_high"]
        assert row["flags"][:1] == ["--num-workers"] and row["said"].startswith(f"Pick: {row['pick']}, ")
        assert len(row["own_s"]) == len(row["pick_s"]) == 1 and row["truth"] == row["own_s"][0] / row["pick_s"][0]
        assert row["truth_spread"] == [row["truth"]] * 2 and isinstance(row["held"], bool)
        assert math.isclose(row["error_pct"], 100 * (row["speedup"] / row["truth"] - 1))
        assert (row["miss_pct"] == 0) == row["held"]
        assert any(line.startswith(f"{row['script']:<14}{row['pick']} ") for line in lines)
    timed = [r for r in rows if r["pick"] != "keep"]
    assert lines[-1].startswith(f"{len(timed)} rows timed, 0 failed" if timed else "no row timed (0 failed)")
    if not timed:
        pytest.skip(f"no pick to time on this machine: {'; '.join(r['said'] for r in rows)}")
