"""A time budget for a sweep (sweep.budget_min): the planning rules on constructed cases. Real budgeted sweeps of
train.py: tests/test_budget_sweeps.py."""

from __future__ import annotations

import pytest

from tests.conftest import compose_cfg
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
