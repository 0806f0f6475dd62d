"""An advice run to its answer and checked (tests/test_real_scripts.py, tests/test_package_scripts.py, ...):
`advise_command` runs `wif-advise OPTIONS -- COMMAND` to exit 0; the asserts check its answer and its runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from mlflow.tracking import MlflowClient

PICK = re.compile(r"^Pick: .+ \(95% interval \d+\.\d+-\d+\.\d+\)", re.M)
KEEP = re.compile(r"^Keep what you have: ", re.M)


def advise_command(tmp_path: Path, store: str, options: Sequence[str], command: Sequence[str], **env: str) -> str:
    """`wif-advise OPTIONS -- COMMAND` from tmp_path on the store; its output (stdout then stderr), said."""
    environ = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONUNBUFFERED": "1", **env}
    environ.pop("WIF_WATCH_ORDERS", None)
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "wif.advisor.advise_cli", *options, "--", *command],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - t0
    (tmp_path / "advise.out").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
    tail = "\n".join(done.stdout.strip().splitlines()[-15:])
    print(f"\n--- wif-advise on {command[1]}: exit {done.returncode}, {wall:.0f} s\n{tail}")
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return done.stdout


def assert_answered_and_stored(out: str, store: str) -> None:
    assert PICK.search(out) or KEEP.search(out), out[-3000:]
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    assert exp is not None, "no experiment in the store"
    found = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'advise'")
    roles: Dict[str, int] = {}
    for r in found:
        roles[r.data.tags["wif.advise_role"]] = roles.get(r.data.tags["wif.advise_role"], 0) + 1
    assert roles.get("parent") == 1 and roles.get("measure"), roles
    # every run ended; the ones the advice stopped when its --minutes ran out are FAILED, each said in its output
    status = [(r.info.run_name, r.info.status) for r in found]
    assert all(s in ("FINISHED", "FAILED") for _, s in status), status
    assert any(r.data.tags["wif.advise_role"] == "measure" and r.info.status == "FINISHED" for r in found), status
    stopped = len(re.findall(r"the advice's --minutes ran out", out))
    assert sum(s == "FAILED" for _, s in status) == stopped, (status, stopped)
    said = re.search(r"^(\d+) runs in \d+ s, nested under MLflow run (\w+)", out, re.M)
    assert said, out[-2000:]
    parent = next(r for r in found if r.data.tags["wif.advise_role"] == "parent")
    assert parent.info.run_id == said.group(2) and len(found) == int(said.group(1)) + 1, (said.group(0), roles)
    assert all(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in found if r is not parent)


def assert_data_bound_on_a_cpu(found: List[Any]) -> None:
    """The advice's parent run: limited by data, its interference logged, and no GPU figure on a CPU."""
    parent = next(r for r in found if r.data.tags["wif.advise_role"] == "parent")
    assert (
        parent.data.tags["wif.advise.limit"] == "data"
        and {"interference", "interference_s"} <= parent.data.metrics.keys()
    )
    assert "gpu_busy_step" not in parent.data.metrics  # CUDA only: never a false 0 on a CPU
