"""Real budgeted sweeps of train.py in a subprocess (sweep.budget_min): the plan said before the first job, no job
started that could not finish, the end on time, and a larger budget resuming what is missing. The planning rules on
constructed cases: tests/test_budget.py."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import holds_unless_disturbed, run_train, train_runs
from wif.sweep import prices as p

STARTING = re.compile(r"Budget: starting \S+ \(block \d+\): up to ([\d.]+) s, ([\d.]+) s left")


@pytest.mark.alone
@pytest.mark.slow
def test_a_budgeted_sweep_plans_first_starts_only_what_fits_and_resumes(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    # 36 jobs of about 0.7 s on a quiet 2-core machine: with Python's start, more than the 0.4 min budget
    args = [
        "preset=smoke",
        "loader=baseline,bg",
        "data.fraction=0.1",
        "repeat=range(0,18)",
        "device=cpu",
        "trainer.epochs=2",
        "measure.contended_pct=10000",
    ]
    t0 = time.monotonic()
    first = run_train(tmp_path, store, cache_dir, *args, "sweep.budget_min=0.4", timeout=300)
    wall = time.monotonic() - t0
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-3000:]
    lines = out.splitlines()
    (tmp_path / "first.log").write_text(out)  # kept for a failure's reading
    plan = next(i for i, line in enumerate(lines) if "Budget plan: fits" in line)
    probe_done = next(i for i, line in enumerate(lines) if "Probe done in" in line)
    started = [i for i, line in enumerate(lines) if "started on cpu" in line and i > probe_done]
    assert probe_done < plan < min(started, default=len(lines))  # the plan before the first job of the sweep
    last = next(line for line in reversed(lines) if "Sweep done" in line)
    assert "ended by the budget" in last and "not run:" in last and "to finish" in last
    # no job started that the budget said could not finish: each start's upper price fitted in what was left
    starts = [STARTING.search(line) for line in lines if "Budget: starting" in line]
    assert len(starts) == len(started)
    assert all(float(m.group(1)) + p.END_RESERVE_S <= float(m.group(2)) for m in starts)
    assert len([line for line in lines if "not started: it may take up to" in line]) in (1, 2)  # once a cell
    ran = train_runs(store, status="FINISHED")
    holds_unless_disturbed(
        wall < 0.4 * 60 * 1.1, ran, f"the whole command, Python's start included, within the budget (took {wall:.1f} s)"
    )
    assert len(ran) == len(started) < 36
    client = MlflowClient(store)
    probes = client.search_runs([client.get_experiment_by_name("who_is_faster-probe").experiment_id])
    assert {r.data.tags["wif.kind"] for r in probes} == {"probe"} and len(probes) == 2  # never a study run

    again = run_train(tmp_path, store, cache_dir, *args, "sweep.budget_min=5", timeout=400)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert f"{len(ran)} skipped" in out and "Probe:" not in out  # finished runs kept; the probe reused
    done = train_runs(store, status="FINISHED")
    holds_unless_disturbed(
        "nothing left undone" in next(line for line in reversed(out.splitlines()) if "Sweep done" in line),
        done,
        "5 minutes finish the sweep",
    )
    assert len(done) == 36 and len({(r.data.tags["wif.cell"], r.data.tags["wif.block"]) for r in done}) == 36


@pytest.mark.slow  # not alone: what it claims is read from the record and the log, whatever the budget let run
def test_a_budgeted_race_keeps_its_outcome_and_a_larger_budget_finishes_it(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    from wif.report.report_cli import main as report_main

    args = [
        "preset=smoke",
        "hydra/sweeper=race",
        "loader=baseline,bg",
        "data.fraction=0.1,0.4",
        "race.min_blocks=2",  # 8 jobs: 2 settings x 2 fractions x 2 blocks
        "race.max_blocks=2",
        "device=cpu",
        "trainer.epochs=2",
        "measure.contended_pct=10000",
    ]
    first = run_train(tmp_path, store, cache_dir, *args, "sweep.budget_min=0.3", timeout=300)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-3000:]
    assert "Budget plan: fractions" in out and "Budget plan: fits" in out
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster").experiment_id
    (record,) = client.search_runs([exp], "tags.`wif.kind` = 'race'")
    tags = record.data.tags
    assert tags["wif.budget.min"] == "0.3" and float(tags["wif.budget.probe_s"]) > 0
    assert tags["wif.budget.ended"] in next(line for line in out.splitlines() if "Sweep done" in line)
    ran = train_runs(store, status="FINISHED")
    if tags["wif.budget.by_budget"] == "true":  # as it should on any machine: 8 jobs do not fit in 18 s
        assert len(ran) < 8 and float(tags["wif.budget.undone_min"]) > 0
        assert "not run:" in tags["wif.budget.ended"] and "to finish" in tags["wif.budget.ended"]
        for fraction in ("0.1", "0.4"):  # each fraction said decided or not, and why a race ended
            ended = tags[f"wif.race.ended.f{fraction}"]
            assert (f"f{fraction} not decided" in tags["wif.budget.ended"]) == ("budget" in ended)
        if ran:  # the report says how the budget ended the race, in one line
            assert report_main(["--tracking-uri", store, "--out", str(tmp_path / "report"), "--no-log"]) == 0
            summary = (tmp_path / "report" / "summary.md").read_text()
            assert "The race ran under a time budget: budget 0.3 min" in summary

    again = run_train(tmp_path, store, cache_dir, *args, "sweep.budget_min=5", timeout=400)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert f"{len(ran)} skipped" in out and "nothing left undone" in out
    done = train_runs(store, status="FINISHED")
    assert len(done) == 8 and len({(r.data.tags["wif.cell"], r.data.tags["wif.block"]) for r in done}) == 8
    last = client.search_runs([exp], "tags.`wif.kind` = 'race'", order_by=["attributes.start_time DESC"])[0]
    assert last.data.tags["wif.budget.by_budget"] == "false" and last.data.tags["wif.budget.undone_min"] == "0.00"


@pytest.mark.alone
@pytest.mark.slow
def test_a_first_budgeted_auto_race_runs_its_jobs_unprobed_and_evaluates_what_it_was_told(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """On an empty store a race of auto jobs runs no probe: its first jobs price the rest. Its jobs validate and
    test sweep.eval_images images, and log those passes' time apart from the epochs."""
    args = [
        "preset=smoke",
        "hydra/sweeper=race",
        "loader=baseline,bg",
        "data.fraction=0.1",
        "race.max_blocks=3",
        "device=cpu",
        "trainer.epochs=auto",
        "measure.contended_pct=10000",
        "sweep.eval_images=32",
        "sweep.budget_min=1.25",
    ]
    run = run_train(tmp_path, store, cache_dir, *args, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "Probe:" not in out and "the first jobs run unpriced and price the rest" in out
    assert MlflowClient(store).get_experiment_by_name("who_is_faster-probe") is None
    ran = train_runs(store, status="FINISHED")
    assert ran, out[-3000:]
    for r in ran:
        p, m, t = r.data.params, r.data.metrics, r.data.tags
        assert p["data.val_images"] == p["data.test_images"] == "32"
        assert (t["wif.n_val"], t["wif.n_test"]) == ("32", "32")  # smoke: 40 validation, 500 test images
        assert m["val_time_total_s"] > 0 and m["test_time_s"] > 0
        epochs = sum(x.value for x in MlflowClient(store).get_metric_history(r.info.run_id, "epoch_time_s"))
        assert m["time_total_s"] == pytest.approx(epochs + m["val_time_total_s"] + m["test_time_s"], rel=1e-6)
    # the report shows a run's cost: its job's overhead, epochs, validation and test, medians over the runs
    from wif.report.report_cli import main as report_main

    assert report_main(["--tracking-uri", store, "--out", str(tmp_path / "report"), "--no-log"]) == 0
    summary = (tmp_path / "report" / "summary.md").read_text()
    median = {k: statistics.median(r.data.metrics[k] for r in ran) for k in ("job_overhead_s", "test_time_s")}
    assert f"A run's cost, median of {len(ran)}: {median['job_overhead_s']:.2f} s of job overhead" in summary
    assert f"{median['test_time_s']:.2f} s of test" in summary
    holds_unless_disturbed(len(ran) >= 2, ran, "block 0 at least, in 75 s")
