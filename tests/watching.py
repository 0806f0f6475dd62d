"""Scripts run under the watch in subprocesses (`watch`: wif-watch -- COMMAND, printing; `run_script`; `run_loop`)
and what they said or logged (`epochs`, `watch_runs`): tests/test_watch*.py, tests/test_no_line_changed*.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

from mlflow.tracking import MlflowClient

from tests.conftest import ROOT
from wif.watcher.orders import ENV

EPOCH = re.compile(r"wif\.watch: epoch (\d+): ([\d.]+) s, (\d+) batches.*?(?:waited for data ([\d.]+) s|\((\d+)% of)")


def watch(tmp_path: Path, *command: str, loader: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """`wif-watch -- COMMAND` with WIF_WATCH=print: each watched epoch's line on stderr, nothing logged."""
    env = {**os.environ, "WIF_WATCH": "print", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("WIF_WATCH_ORDERS", None)
    named = ["--loader", loader] if loader else []
    return subprocess.run(
        [sys.executable, "-m", "wif.watcher.hook", *named, "--", *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def epochs(stderr: str) -> List[Dict[str, float]]:
    """The watch's epoch lines: time, batches, the wait (0 where it did not wait) and whether it ended early."""
    out = []
    for line in stderr.splitlines():
        m = EPOCH.search(line)
        if m:
            wait = float(m.group(4)) if m.group(4) else 0.0
            out.append({"time": float(m.group(2)), "batches": int(m.group(3)), "wait": wait, "early": "early" in line})
    return out


def run_script(
    tmp_path: Path, store: str, script: str, *args: str, env: Dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """A script as a user runs it: its own process, its working directory, the store in the environment."""
    full = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    full.pop("WIF_WATCH_ORDERS", None)
    argv = [script] if os.path.isabs(script) else ["-m", f"examples.{script}"]
    return subprocess.run(
        [sys.executable, *argv, *args], cwd=tmp_path, env=full, capture_output=True, text=True, timeout=timeout
    )


def watch_runs(store: str) -> list:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'watch'")


HEAD = """
import sys, time, torch, wif
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # items that wait 2 ms, as a read from storage does
    def __len__(self):
        return 96
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((4,), float(i)), i % 2

data = Slow()
loader = DataLoader(data, batch_size=16)
"""


def run_loop(tmp_path: Path, body: str, store: str, orders: Optional[dict] = None, timeout: float = 300):
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent(body))
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop(ENV, None)
    if orders is not None:
        env[ENV] = json.dumps(orders)
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
