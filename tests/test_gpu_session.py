"""scripts/gpu_session.sh: one stage of the GPU study a command. Its stages run for real on a lent GPU; here the
arguments are checked and the freeze stage, which installs nothing, runs (a rehearsal of the others is in
docs/gpu-node.md and runs train.py for minutes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_session.sh"


def session(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OUT": str(tmp_path / "out")},
    )


@pytest.mark.parametrize(
    "argv, said",
    [
        (["train"], "unknown stage train"),
        (["study", "--minutes", "12"], "--minutes 12: a number of minutes above 0 and at most 9"),
        (["study", "--minutes", "0"], "--minutes 0"),
        (["study", "--fast"], "unknown argument --fast"),
        (["check,study,train"], "unknown stage train"),
        (["check,,report"], "unknown stage ''"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, argv: List[str], said: str) -> None:
    run = session(tmp_path, *argv)
    assert run.returncode == 2 and said in run.stderr and run.stderr.count("\n") == 1, run.stderr


def test_freeze_brings_back_the_package_list_and_the_node(tmp_path: Path) -> None:
    run = session(tmp_path, "freeze")
    assert run.returncode == 0, run.stderr
    out = tmp_path / "out"
    freeze = (out / "freeze.txt").read_text()
    assert "torch==" in freeze and "mlflow" in freeze
    import torch

    node = (out / "node.txt").read_text().split()  # the GPU line (or "no nvidia-smi"), then Python, torch, CUDA
    assert node[-3] == torch.__version__ and node[-1] == str(torch.cuda.is_available()), node
    assert "gpu_session.sh freeze" in (out / "log.txt").read_text()
