"""A time budget for a sweep (sweep.budget_min): the planning rules on constructed cases, and real budgeted
sweeps of train.py in a subprocess (the plan said before the first job, no job started that could not
finish, the end on time, and a larger budget resuming what is missing)."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import compose_cfg, holds_unless_disturbed, run_train, train_runs
from wif.measure.names import Cell
from wif.sweep import budget as b
from wif.sweep import prices as p
from wif.sweep import probe as pr
from wif.sweep.callback import blocks_line
from wif.sweep.prices import batches_per_epoch


def job(cell: str, block: int = 0, batches: int = 10, epochs: int | None = 3, done: bool = False) -> p.Job:
    fraction = float(Cell.parse(cell).fraction)
    return p.Job(
        key=(cell, f"repeat={block}"),
        cell=cell,
        fraction=fraction,
        block=block,
        batches=batches,
        epochs=epochs,
        done=done,
    )


def test_a_probe_extrapolates_to_a_full_epoch_and_keeps_the_rest_fixed() -> None:
    # 4 batches: the first waits 0.5 s (workers start), the loop takes 0.1 s a batch, the workers' shutdown 0.1 s
    # after the last; validation 0.8 s at fraction 0.4, of which its workers' start and shutdown (0.6 s) are fixed
    probe = pr.ProbeCost(
        wall_s=5.0, run_s=4.0, epoch_s=1.0, first_batch_s=0.5, val_s=0.8, batches=4, fraction=0.4, loop_s=0.9
    )
    cost = probe.cost(batches=21, fraction=0.2)
    assert cost.overhead_s == pytest.approx(1.0)  # launch to return, less the run
    assert cost.fixed_s == pytest.approx(4.0 - 2 * (1.0 + 0.8))  # set-up, test, warm-up's extra
    assert cost.epoch_s == pytest.approx((0.5 + 0.1 + 21 * 0.1) + (0.6 + 0.2 * 0.2 / 0.4))
    assert cost.seconds(3) == pytest.approx(1.0 + 0.4 + 3 * 3.4)
    # a probe that did not log its loop (an older run): no tail, the epoch past its first batch is per batch
    old = pr.ProbeCost(wall_s=5.0, run_s=4.0, epoch_s=0.9, first_batch_s=0.5, val_s=0.2, batches=4, fraction=0.4)
    assert old.cost(21, 0.4).epoch_s == pytest.approx(0.5 + 21 * 0.1 + 0.2)


def test_a_probe_epoch_outlasts_the_loaders_prefetch_twice() -> None:
    """Capped at 4 batches, 4 workers x prefetch_factor 2 fetched 8 while the step took 4, and their start-up
    was priced as per batch: a 2-block smoke grid was priced 32% high."""
    assert pr.probe_batches(0) == pr.PROBE_BATCHES == 4
    assert pr.probe_batches(8) == 16 and pr.probe_batches(64) == 128


def test_auto_epochs_are_priced_at_their_most_plausible() -> None:
    assert (p.auto_epochs([], 7, 100).expected, p.auto_epochs([], 7, 100).upper) == (7, 100)
    assert p.auto_epochs([8, 9], 7, 100).upper == 100  # too few seen to bound the next
    seen = p.auto_epochs([7, 9, 12], 7, 100)
    assert (seen.expected, seen.upper) == (9, 18)  # 1.5x the most any took
    assert p.auto_epochs([70, 80, 90], 7, 100).upper == 100  # never above max_epochs


def test_an_auto_job_starts_where_its_smallest_run_fits_and_gets_a_deadline() -> None:
    """The H100's budget ran 0 jobs: each auto job was priced at max_epochs=100 before 3 auto runs had lowered
    it. An auto job now starts where its warm-up and 2 steady epochs fit, and may take its upper price or what
    the budget leaves, whichever is less (its deadline stops it there); a job of fixed epochs still needs its
    upper price."""
    prices = p.Prices(history={"a@0.1": p.CellCost(overhead_s=10.0, fixed_s=0.0, epoch_s=2.0)})
    auto, fixed = job("a@0.1", epochs=None), job("a@0.1", epochs=100)
    assert prices.upper_s(auto) == pytest.approx(p.SAFETY * (10.0 + 100 * 2.0))
    assert prices.start_s(auto) == pytest.approx(p.SAFETY * (10.0 + 3 * 2.0))
    assert prices.start_s(fixed) == prices.upper_s(fixed)
    left = 33.1  # the H100's: pin_nb@0.1 was refused at 287.4 s with 33.1 s left
    assert b.may_start(prices.start_s(auto), left) and not b.may_start(prices.upper_s(auto), left)
    assert prices.allowed_s(auto, left) == pytest.approx(left - p.END_RESERVE_S)
    assert prices.allowed_s(auto, 1000.0) == pytest.approx(prices.upper_s(auto))
    # 70 jobs left at its fraction: an equal share of what is left, never below its smallest run
    assert prices.allowed_s(auto, 1000.0, undone=70) == pytest.approx(prices.start_s(auto))
    assert prices.allowed_s(auto, 1000.0, undone=20) == pytest.approx((1000.0 - p.END_RESERVE_S) / 20)


def test_prices_learn_from_the_jobs_this_sweep_ran() -> None:
    prices = p.Prices(history={"a@0.1": p.CellCost(1.0, 0.0, 1.0), "b@0.1": p.CellCost(1.0, 0.0, 3.0)})
    assert prices.expected_s(job("a@0.1")) == pytest.approx(4.0)
    assert prices.expected_s(job("new@0.1")) == pytest.approx(7.0)  # never run: the median cell
    assert prices.upper_s(job("a@0.1")) == pytest.approx(p.SAFETY * 4.0)
    assert prices.expected_s(job("a@0.1", done=True)) == 0.0  # finished before: skipped, free
    prices.measure(job("a@0.1"), wall_s=8.0, run_s=6.0, epochs=3)  # twice the guess
    assert prices.expected_s(job("a@0.1")) == pytest.approx(8.0)  # measured: its own
    assert prices.expected_s(job("b@0.1")) == pytest.approx(2 * 10.0)  # guessed: scaled by how far guesses were


def test_block_0_prices_the_rest_without_a_probe() -> None:
    """A 3-minute CPU sweep spent 53 s probing before its first job. Unpriced, an auto job may start (its deadline
    keeps its smallest run) with its share of what is left; the first job measured prices every cell, its epoch
    scaled by each cell's batches."""
    prices = p.Prices()
    first = job("a@0.1", batches=10, epochs=None)
    assert not prices.priced and prices.cost(first) is None
    assert b.may_start(prices.start_s(first), left_s=100.0)
    assert prices.allowed_s(first, left_s=100.0, undone=10) == pytest.approx((100.0 - p.END_RESERVE_S) / 10)
    prices.measure(first, wall_s=8.0, run_s=6.0, epochs=3)
    assert prices.priced and prices.ratios == []  # no outside guess to correct
    assert prices.cost(job("b@0.1", batches=10, epochs=None)) == p.CellCost(overhead_s=2.0, fixed_s=0.0, epoch_s=2.0)
    assert prices.cost(job("b@0.4", batches=40, epochs=None)).epoch_s == pytest.approx(8.0)
    assert prices.start_s(job("b@0.1", epochs=None)) == pytest.approx(p.SAFETY * (2.0 + 3 * 2.0))
    # a job's start is the sweep's, whatever its cell; the first job's, which made the data's cache, left out
    prices.measure(job("b@0.1", batches=10, epochs=None), wall_s=7.0, run_s=6.0, epochs=3)
    assert prices.cost(first).overhead_s == prices.cost(job("c@0.1")).overhead_s == pytest.approx(1.0)


def test_the_plan_is_a_prefix_of_the_order_that_fits() -> None:
    prices = p.Prices(history={"a@0.1": p.CellCost(1.0, 0.0, 1.0)})  # 4 s a job
    order = [job("a@0.1", block) for block in range(5)]
    fit, rest = b.fits(order, prices, left_s=p.END_RESERVE_S + 13.0)
    assert (len(fit), len(rest)) == (3, 2)
    assert b.fits([job("a@0.1", 0, done=True)] + order[:1], prices, p.END_RESERVE_S + 4.0)[1] == []
    assert b.may_start(prices.upper_s(order[0]), p.END_RESERVE_S + p.SAFETY * 4.0)
    assert not b.may_start(prices.upper_s(order[0]), p.END_RESERVE_S + p.SAFETY * 4.0 - 0.1)
    assert (
        blocks_line(
            [
                job("a@0.1", 0, done=True),
                job("a@0.4", 0, done=True),
                job("a@0.1", 1, done=True),
                job("a@0.4", 1),
                job("a@0.1", 2),
            ]
        )
        == "1 of 3 blocks complete, block 1: 1 of 2 jobs"
    )


def test_a_race_under_a_budget_runs_the_fractions_it_can_decide_first() -> None:
    first_look = {0.1: 30.0, 0.4: 90.0, 0.7: 200.0}
    assert b.choose_fractions(first_look, 1000.0) == [0.1, 0.4, 0.7]
    assert b.choose_fractions(first_look, 130.0) == [0.1, 0.4]  # 0.7 could not reach its first look
    assert b.choose_fractions(first_look, 20.0) == [0.1]  # none fits: the cheapest gets furthest
    assert b.choose_fractions({}, 20.0) == []


def test_probe_jobs_and_batches() -> None:
    assert batches_per_epoch(2000, 0.1, 0.2, 64, None) == 3  # 200 images, 40 for validation, 160 / 64
    assert batches_per_epoch(2000, 0.7, 0.2, 64, 4) == 4
    probe = pr.probe_job(["repeat=3", "loader=bg", "trainer.epochs=auto", "race.id=abc"], "who_is_faster")
    assert "repeat=3" not in probe and "trainer.epochs=auto" not in probe and "race.id=abc" not in probe
    assert {
        "repeat=0",
        "trainer.epochs=2",
        "trainer.max_batches=4",
        "loader=bg",
        "tracking.experiment=who_is_faster-probe",
    } <= set(probe)
    assert "trainer.max_batches=16" in pr.probe_job(["loader=pin_nb_w4_pf2"], "who_is_faster", 16)


def test_a_budget_that_started_no_job_is_not_read_as_jobs_run_elsewhere() -> None:
    """A budgeted sweep whose budget started none of its 30 jobs ran nothing: its tally must not be read from
    the store as a submitting launcher's (which said '30 skipped (already finished)')."""
    from wif.sweep.callback import SweepTally

    assert SweepTally(total=30).ran_elsewhere()  # submitit: nothing ended here, the store knows
    assert not SweepTally(total=30, budget="budget 2 min: ended by the budget; 0 jobs run").ran_elsewhere()


def test_a_bad_budget_is_refused_in_one_line() -> None:
    from omegaconf import OmegaConf

    from wif.config import ConfigError, validate

    with pytest.raises(ConfigError, match=r"sweep.budget_min=-1.0 must be a positive number of minutes"):
        validate(OmegaConf.to_object(compose_cfg("sweep.budget_min=-1")))
    validate(OmegaConf.to_object(compose_cfg("sweep.budget_min=6")))


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
