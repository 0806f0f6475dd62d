"""wif-plan: the price of a sweep from earlier runs of the same testbed, or from a probe, in a real SQLite MLflow
store."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import new_store
from wif.measure import names
from wif.sweep.plan import main
from wif.sweep.prices import Prices
from wif.sweep.pricing import Shape, price
from wif.sweep.probe import RunCost, history_prices


def _fake_run(
    client: MlflowClient, exp: str, cell: str, epochs: str, metrics: Dict[str, float], race_id: str | None = None
) -> None:
    """A FINISHED training run of `cell` on the cpu/tiny testbed, with trainer.epochs=`epochs` and `metrics`."""
    tags = {names.TAG_KIND: "train", names.TAG_DEVICE: "cpu", names.TAG_MODEL: "tiny", names.TAG_CELL: cell}
    if race_id:
        tags[names.TAG_RACE_ID] = race_id
    run = client.create_run(exp, tags=tags)
    client.log_param(run.info.run_id, "trainer.epochs", epochs)
    for key, value in metrics.items():
        client.log_metric(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id, "FINISHED")


def test_price_adds_each_cells_overhead_and_epochs() -> None:
    history = [RunCost("a@0.1", 1.0, 10, 10.0, False), RunCost("b@0.1", 3.0, 10, 30.0, False)]
    prices = Prices(history=history_prices(history))
    cells = {"a@0.1": 3, "b@0.1": 1, "new@0.1": 2}
    shapes = {cell: Shape(0.1, 5) for cell in cells}
    p = price(cells=cells, shapes=shapes, prices=prices, epochs=20)
    # a: 1 s overhead, 1 s/epoch; b: 3 s, 3 s/epoch; new (never run): the median cell, 2 s and 2 s/epoch.
    # One median overhead for all (wif-plan before) priced a at 2 s a run, unlike the budgeted sweep
    assert (p.runs, p.epochs) == (6, 120) and p.seconds == pytest.approx(3 * 21 + 63 + 2 * 42)
    cheap = price(cells=cells, shapes=shapes, prices=prices, epochs=7, runs_share=0.5)
    assert (cheap.runs, cheap.epochs) == (3, 21) and cheap.seconds == pytest.approx(0.5 * (3 * 8 + 24 + 2 * 16))
    assert price(cells={"a@0.1": 1}, shapes=shapes, prices=Prices(), epochs=20) is None


def test_a_probe_prices_each_cell_at_its_own_fraction_and_batches() -> None:
    """A probe of 4 batches at fraction 0.7 (0.01 s to the first batch, then 0.01 s a batch; 0.02 s of
    validation, 0.01 s of it its start) prices a full epoch of 18 batches at 0.19 s + 0.02 s, one of 3 batches at
    0.1 at 0.04 s + 0.01 + 0.01/7 s; each run adds the probes' start (0.3 s) and the rest of the probe run (0.1
    s). (The cells' batches were once read as their block, and every epoch priced at one batch: half the grid's
    time.)"""
    from wif.sweep.probe import ProbeCost

    probe = ProbeCost(
        wall_s=0.3 + 0.1 + 2 * (0.05 + 0.02),
        run_s=0.1 + 2 * (0.05 + 0.02),
        epoch_s=0.05,
        first_batch_s=0.01,
        val_s=0.02,
        batches=4,
        fraction=0.7,
        loop_s=0.05,
    )
    got = price(
        cells={"baseline@0.7": 2, "baseline@0.1": 1},
        shapes={"baseline@0.7": Shape(0.7, 18), "baseline@0.1": Shape(0.1, 3)},
        prices=Prices(probes={"baseline": probe}),
        epochs=3,
    )
    full = 0.3 + 0.1 + 3 * (0.19 + 0.02)
    small = 0.3 + 0.1 + 3 * (0.04 + 0.01 + 0.01 * 0.1 / 0.7)
    assert got is not None and (got.runs, got.epochs) == (3, 9)
    assert got.seconds == pytest.approx(2 * full + small)


def test_wif_plan_prices_a_grid_from_the_store(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(store)
    exp = client.create_experiment("who_is_faster")
    for _ in range(2):  # baseline: 1 s an epoch, pin: 2 s
        _fake_run(client, exp, "baseline@0.1", "3", {names.TIME_TOTAL_S: 3.0, names.JOB_OVERHEAD_S: 1.0})
        _fake_run(client, exp, "pin@0.1", "3", {names.TIME_TOTAL_S: 6.0, names.JOB_OVERHEAD_S: 1.0})
    auto = {names.TIME_TOTAL_S: 8.0, names.JOB_OVERHEAD_S: 1.0, names.EPOCHS_RUN: 8}
    _fake_run(client, exp, "baseline@0.1", "auto", auto, race_id="r1")
    race = client.create_run(exp, tags={"wif.kind": "race", "wif.race_id": "r1"})
    client.log_param(race.info.run_id, "race.cells", 2)
    client.log_param(race.info.run_id, "race.max_blocks", 2)
    client.set_terminated(race.info.run_id, "FINISHED")
    _fake_run(client, exp, "baseline@0.1", "3", {names.TIME_TOTAL_S: 300.0, names.JOB_OVERHEAD_S: 1.0})
    client.set_tag(client.search_runs([exp], "metrics.time_total_s = 300")[0].info.run_id, "wif.model", "googlenet")

    assert (
        main(
            [
                "loader=baseline,pin",
                "repeat=range(0,4)",
                "preset=smoke",
                "device=cpu",
                "trainer.epochs=20",
                "--tracking-uri",
                store,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    # per epoch: baseline median(1, 1, 1) s, pin 2 s; overhead 1 s; the googlenet run is another testbed
    assert "2 cells x 4 repeats, 20 epochs a run" in out and "from 5 earlier runs" in out
    assert "a job's overhead (job_overhead_s: its process, data and set-up) 1.00 s, its run 6.00 s" in out
    assert f"fixed grid: 8 runs, 160 epochs, about {(4 * 21 + 4 * 41) / 60:.1f} min" in out
    # the race ran 1 of its 2 x 2 runs (25%); auto runs took 8 epochs
    assert f"race + auto: 2 runs, 16 epochs, about {(1 * 9 + 1 * 17) / 60:.1f} min" in out
    assert "8 epochs a run as earlier auto runs took, 25% of the runs as earlier races ran" in out


def test_wif_plan_without_history_says_how_to_get_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        main(
            [
                "loader=baseline,pin",
                "preset=smoke",
                "device=cpu",
                "--no-probe",
                "--tracking-uri",
                f"sqlite:///{tmp_path / 'm.db'}",
            ]
        )
        == 0
    )
    assert "no earlier finished run of this testbed" in capsys.readouterr().out
    assert main(["trainer.epochs=abc", "device=cpu", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 2


@pytest.mark.slow
def test_wif_plan_on_an_empty_store_probes_each_setting_and_prices_from_it(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the probe is a train.py sweep: its Hydra folders land here
    monkeypatch.setenv("WIF_CACHE_DIR", str(cache_dir))
    store = new_store(tmp_path)
    grid = ["loader=baseline,bg", "data.fraction=0.1,0.4", "repeat=range(0,3)", "preset=smoke", "device=cpu"]
    assert main([*grid, "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert "probing each setting" in out and "wif-plan: probe: 2 settings probed in" in out
    assert re.search(r"fixed grid: 12 runs, 36 epochs, about [\d.]+ min", out), out
    assert re.search(r"race \+ auto: \d+ runs, \d+ epochs, about [\d.]+ min", out), out
    client = MlflowClient(store)
    probes = client.search_runs([client.get_experiment_by_name("who_is_faster-probe").experiment_id])
    assert len(probes) == 2 and {r.data.tags["wif.kind"] for r in probes} == {"probe"}
    assert client.get_experiment_by_name("who_is_faster") is None or not client.search_runs(
        [client.get_experiment_by_name("who_is_faster").experiment_id], "tags.`wif.kind` = 'train'"
    )

    assert main([*grid, "--tracking-uri", store]) == 0  # the probe is kept: asked again, nothing runs
    again = capsys.readouterr().out
    assert "priced from the store's probe of every setting" in again and "probing" not in again
