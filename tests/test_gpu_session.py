"""scripts/gpu_session.sh: one stage of the GPU study a command. Its stages run for real on a lent GPU; here the
arguments are checked and the freeze stage, which installs nothing, runs (a rehearsal of the others is in
docs/gpu-node.md and runs train.py for minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from wif.measure import names

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


def log_advice(client, exp_id: str, advise_id: str, fraction: float, interference_s: float, busy: float) -> None:
    """Log an advice's parent and measuring runs as wif-advise records them on a GPU.

    docs/what-each-run-records.md gives the record.

    Args:
        client: the MLflow client of the store.
        exp_id: the experiment the runs go in.
        advise_id: the advice's id, tagged on both runs.
        fraction: the data fraction the advice measured.
        interference_s: the advice's interference, in seconds an epoch.
        busy: the GPU's busy share of a step; below 0.6 is launch-bound.
    """
    from mlflow.entities import Metric, Param

    parent = client.create_run(
        exp_id,
        run_name="advise",
        tags={names.TAG_KIND: "advise", names.TAG_ADVISE_ID: advise_id, names.TAG_ADVISE_ROLE: "parent"},
    ).info.run_id
    figures = {"interference": interference_s / 9.0, names.INTERFERENCE_S: interference_s, names.LIMIT_SHARE: 0.12}
    figures.update(gpu_busy_step=busy, launch_bound=float(busy < 0.6))
    client.log_batch(
        parent,
        metrics=[Metric(k, v, 0, 0) for k, v in figures.items()],
        params=[Param("data.fraction", str(fraction))],
    )
    for k, v in {"wif.advise.limit": "interference", "wif.advise.pick": "keep"}.items():
        client.set_tag(parent, k, v)
    client.set_terminated(parent, "FINISHED")
    client.create_run(
        exp_id,
        run_name="advise-measure-current",
        tags={
            names.TAG_KIND: "advise",
            names.TAG_ADVISE_ID: advise_id,
            names.TAG_ADVISE_ROLE: "measure",
            names.TAG_DEVICE: "cuda",
        },
    )


def test_gpu_checks_sets_each_advices_interference_against_the_measured_gap(tmp_path: Path) -> None:
    """scripts/gpu_checks.py, the GPU step issue's last test read from a store: an advice's interference (1.4 s an
    epoch at 0.7, 0.5 s at 0.4) against the study's baseline - gpu_resident step gap (1.5 s at both). Known
    answers: 0.93 of the gap, within 25%; 0.33, not within."""
    from tests.stores import log_run, study_store

    client, uri, exp_id = study_store(tmp_path)
    for fraction in (0.4, 0.7):
        for block in range(2):
            log_run(client, exp_id, "baseline", fraction, block=block, time=11.0 + block, compute=10.5, busy=25.0)
            log_run(client, exp_id, "gpu_resident", fraction, block=block, time=9.0 + block, compute=9.0, busy=31.0)
    for block in range(2):  # the same settings on a CPU, and a fraction no advice looked at: neither mixed in
        log_run(client, exp_id, "baseline", 0.4, block=block, time=30.0, compute=29.0, device="cpu", vram=None)
        log_run(client, exp_id, "gpu_resident", 0.4, block=block, time=20.0, compute=19.0, device="cpu", vram=None)
        log_run(client, exp_id, "baseline", 0.1, block=block, time=3.0, compute=2.5)
        log_run(client, exp_id, "gpu_resident", 0.1, block=block, time=2.5, compute=2.25)
    log_advice(client, exp_id, advise_id="a1", fraction=0.7, interference_s=1.4, busy=0.27)
    log_advice(client, exp_id, advise_id="a2", fraction=0.4, interference_s=0.5, busy=0.27)
    done = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "gpu_checks.py"), "--tracking-uri", uri],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SCRIPT.parents[1],
    )
    assert done.returncode == 0, done.stderr
    said = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    at7 = said["advice on the study at fraction 0.7 (cuda, FINISHED)"]
    assert "limit interference, GPU busy 27% of the step (launch-bound)" in at7 and "1.400 s an epoch" in at7
    gaps = [line for line in done.stdout.splitlines() if line.startswith("  measured at")]
    assert len(gaps) == 2 and all("baseline - gpu_resident = 1.500 s of step, 2.000 s of epoch" in g for g in gaps)
    assert "0.93 of the step gap: within 25%" in done.stdout and "0.33 of the step gap: NOT within 25%" in done.stdout
    unadvised = [line for line in done.stdout.splitlines() if line.startswith("measured at")]
    assert sorted(unadvised) == [
        "measured at 0.1 on cuda (no advice): baseline - gpu_resident = 0.250 s of step, 0.500 s of epoch",
        "measured at 0.4 on cpu (no advice): baseline - gpu_resident = 10.000 s of step, 10.000 s of epoch",
    ], done.stdout
    empty = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "gpu_checks.py"), "--tracking-uri", f"sqlite:///{tmp_path}/none.db"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        empty.returncode == 2 and empty.stderr.count("\n") == 1 and "gpu_checks.py: no MLflow store at" in empty.stderr
    )
