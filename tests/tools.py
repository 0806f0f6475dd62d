"""wif-tune and wif-batch-size run for real in a subprocess (`run_tool`), and the runs of a kind they logged
(`tool_runs`): tests/test_tools.py, tests/test_tune.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

from mlflow.tracking import MlflowClient


def tool_runs(store: str, kind: str) -> list:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    return [] if exp is None else client.search_runs([exp.experiment_id], f"tags.`wif.kind` = '{kind}'")


def run_tool(
    tmp_path: Path, store: str, cache_dir: Path, module: str, *args: str, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "MLFLOW_TRACKING_URI": store, "WIF_CACHE_DIR": str(cache_dir), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=600
    )
