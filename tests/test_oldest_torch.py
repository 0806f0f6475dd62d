"""The torch wif promises is the torch it tests: on pyproject's floor (torch 2.11, torchvision 0.26, as the lent GPU
machines carry), one job of each loader option finishes and `wif-report` writes its report. `.ci/run` runs this
file and tests/test_ddp.py in a second venv holding that torch; on any other torch it skips, and test_study's
grid runs the same loaders three times over."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
import tomllib
import torch
import torchvision

from tests.conftest import ROOT, STUDY_LOADERS, run_train, train_runs


def floors() -> Dict[str, str]:
    """pyproject's lowest torch and torchvision ("torch>=2.11" -> {"torch": "2.11"})."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {m[1]: m[2] for d in deps if (m := re.fullmatch(r"(torch|torchvision)>=([\d.]+)", d))}


def _release(version: str) -> str:
    return version.split("+")[0]  # 2.11.0+cu130 -> 2.11.0


def on_floor(version: str, floor: str) -> bool:
    return _release(version).split(".")[: len(floor.split("."))] == floor.split(".")


FLOORS = floors()


def test_pyproject_names_both_floors_and_says_which_versions_are_on_them() -> None:
    assert set(FLOORS) == {"torch", "torchvision"}
    assert on_floor("2.11.0+cu130", "2.11") and on_floor("2.11.1", "2.11") and not on_floor("2.14.1", "2.11")


@pytest.mark.slow
@pytest.mark.skipif(
    not (on_floor(torch.__version__, FLOORS["torch"]) and on_floor(torchvision.__version__, FLOORS["torchvision"])),
    reason=f"torch {torch.__version__} and torchvision {torchvision.__version__} are not pyproject's "
    f"floor ({FLOORS}): .ci/run runs this in its second venv; test_study's grid covers loaders here",
)
def test_each_loader_option_finishes_and_the_report_is_written(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(tmp_path, store, cache_dir, "loader=glob(*)", "preset=smoke", "data.fraction=0.1", timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    runs = train_runs(store, status="FINISHED")
    assert sorted(r.data.tags["wif.loader"] for r in runs) == sorted(STUDY_LOADERS)
    assert {r.data.tags["wif.version.torch"] for r in runs} == {_release(torch.__version__)}
    out = tmp_path / "report"  # contended or not: a CI machine's own test processes may count as others
    report = subprocess.run(
        [sys.executable, "-m", "wif.report", "--tracking-uri", store, "--out", str(out), "--keep-contended"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert {"summary.md", "summary.csv", "overview.png"} <= {p.name for p in out.iterdir()}
    assert all(lo in (out / "summary.md").read_text() for lo in STUDY_LOADERS)
