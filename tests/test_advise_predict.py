"""wif.advisor.predict on constructed cases whose epoch time is known by hand."""

import math

import pytest

from wif.advisor.predict import (
    Loader,
    Prediction,
    Step,
    batch_sizes,
    cannot_win,
    close_call,
    distinct,
    item_time,
    predict,
    rank,
    relative_error,
    simulate,
)

ITEM = 0.004  # 4 ms an item: a sleep standing for a network read (the measured case)
GPU_STEP = Step(compute_s=0.001, on_cpu=False)


def test_batch_sizes_keep_the_partial_last_batch_and_cap():
    assert batch_sizes(80, 64) == [64, 16]
    assert batch_sizes(768, 64) == [64] * 12
    assert batch_sizes(768, 64, batches=5) == [64] * 5


def test_data_bound_in_the_main_process_is_the_sum_of_its_fetches():
    p = predict(batch_sizes(768, 64), GPU_STEP, Loader(0, ITEM), cores=2)
    assert p.epoch_s == pytest.approx(768 * ITEM + 12 * 0.001)
    assert p.bound == "loader"


def test_a_worker_fetches_whole_batches():
    # 2 batches (64 + 16) with 4 workers: the 64-item batch sets the pace, not 80 items / 4 workers.
    two = predict(batch_sizes(80, 64), GPU_STEP, Loader(4, ITEM), cores=2)
    assert two.epoch_s == pytest.approx(64 * ITEM + 2 * 0.001, rel=0.01)  # measured: 0.29 s
    assert two.epoch_s > 80 * ITEM / 4 * 1.5
    # 12 batches with 4 workers: ceil(12/4) = 3 batch fetches (measured 0.81 s against 3.10 s at 0 workers).
    twelve = predict(batch_sizes(768, 64), GPU_STEP, Loader(4, ITEM), cores=2)
    assert twelve.epoch_s == pytest.approx(3 * 64 * ITEM, rel=0.02)
    # 13 batches: one worker has a fourth, so the epoch grows by a whole batch fetch.
    thirteen = predict(batch_sizes(832, 64), GPU_STEP, Loader(4, ITEM), cores=2)
    assert thirteen.epoch_s == pytest.approx(4 * 64 * ITEM, rel=0.02)


def test_compute_bound_is_the_steps_time_plus_the_first_batch():
    sizes = batch_sizes(640, 64)
    step = Step(compute_s=0.1, on_cpu=False)
    p = predict(sizes, step, Loader(2, 0.0001), cores=2)
    assert p.bound == "compute"
    assert p.epoch_s == pytest.approx(10 * 0.1 + 64 * 0.0001, rel=1e-6)  # only the fill does not overlap
    assert predict(sizes, step, Loader(8, 0.0001), cores=2).epoch_s == pytest.approx(p.epoch_s)


def test_copy_bound_hidden_only_with_pinned_non_blocking_copies():
    sizes = batch_sizes(640, 64)
    step = Step(compute_s=0.01, copy_s=0.05, on_cpu=False)
    plain = predict(sizes, step, Loader(2, 0.00001), cores=8)
    hidden = predict(sizes, step, Loader(2, 0.00001, copy_hidden=True), cores=8)
    assert plain.epoch_s == pytest.approx(10 * (0.05 + 0.01), rel=0.01)
    assert hidden.epoch_s == pytest.approx(10 * 0.01, rel=0.01)


def test_start_up_bound_until_workers_persist():
    sizes = batch_sizes(128, 64)
    fresh = predict(sizes, GPU_STEP, Loader(2, 0.0001, persistent=False, startup_s=0.5), cores=2)
    kept = predict(sizes, GPU_STEP, Loader(2, 0.0001, persistent=True, startup_s=0.5), cores=2)
    assert fresh.epoch_s == pytest.approx(0.5 + kept.epoch_s, rel=1e-6)
    assert fresh.startup_s == 0.5 and kept.startup_s == 0.0


def test_cpu_workers_take_the_cores_the_step_uses():
    # A CPU-bound fetch (0.2 core-seconds an epoch) beside a step of 0.2 s.
    sizes = batch_sizes(640, 64)
    fills = Step(compute_s=0.02, cores=2, on_cpu=True)  # its threads fill both cores
    serial = predict(sizes, fills, Loader(0, 0.02 / 64), cores=2)
    assert serial.epoch_s == pytest.approx(0.4)  # fetched in the step's process: 0.2 + 0.2
    # Beside a step that fills the cores, fetching and computing take turns, the fetches on as many cores as
    # there are workers: one worker is no faster than the main process; two take both cores in their turns.
    for workers, alone in ((1, 0.2), (2, 0.1), (4, 0.06)):  # 10 whole batches of 0.02 s, round robin
        cpu = min(0.2 / alone, 2)  # the loader's busy cores, at most the 2 there are
        turns = cpu * alone / min(workers, 2)
        turn = predict(sizes, fills, Loader(workers, 0.02 / 64, cpu_cores=cpu), cores=2)
        assert turn.slowdown == pytest.approx(1 + turns / 0.2) and turn.compute_s == pytest.approx(0.2 + turns)
        assert turn.epoch_s == pytest.approx(0.02 + 0.2 + turns, rel=1e-6)  # the first batch, then turns
    # A fetch that mostly waits (1 of its 4 ms on a core) takes its turns for its CPU part alone.
    mostly_waits = predict(sizes, fills, Loader(2, 0.2 / 64, cpu_cores=0.5), cores=2)  # 1.0 s alone, 0.5 core-s
    assert mostly_waits.compute_s == pytest.approx(0.2 + 0.5 / 2)
    assert mostly_waits.epoch_s == pytest.approx(1.0 + 2 * 0.045, rel=1e-6)  # the last fetches, then two steps
    # A one-thread step leaves a core free: the fetches fit there and hide, up to that core's 0.2 core-seconds.
    one = Step(compute_s=0.02, cores=1, on_cpu=True)
    free = predict(sizes, one, Loader(2, 0.02 / 64, cpu_cores=2), cores=2)
    assert free.slowdown == 1.0 and free.epoch_s == pytest.approx(0.02 + 0.2, rel=1e-6)
    over = predict(sizes, one, Loader(2, 0.03 / 64, cpu_cores=2), cores=2)  # 0.3 core-seconds: 0.1 takes turns
    assert over.slowdown == pytest.approx(1.25) and over.epoch_s == pytest.approx(0.03 + 10 * 0.025, rel=1e-6)
    # A loader-bound epoch: a tiny step leaves the workers the cores between its steps.
    tiny = predict(sizes, Step(compute_s=0.001, cores=2, on_cpu=True), Loader(2, 0.2 / 64, cpu_cores=2), cores=2)
    assert tiny.epoch_s == pytest.approx(0.2 + 10 * 0.001 + 1.0, rel=1e-6)  # 1.0 s of fetches at 2 cores
    assert tiny.epoch_s < predict(sizes, Step(compute_s=0.001, cores=2), Loader(0, 0.2 / 64), cores=2).epoch_s / 1.6
    # A fetch that waits on storage takes no core: the same workers hide it beside a step that fills the cores.
    waiting = predict(sizes, fills, Loader(2, 0.02 / 64, cpu_cores=0), cores=2)
    assert waiting.slowdown == 1.0 and waiting.epoch_s == pytest.approx(0.02 + 0.2, rel=1e-6)
    # On a GPU the step takes no host core: nothing stretches.
    gpu = predict(sizes, Step(compute_s=0.02, cores=1, on_cpu=False), Loader(2, 0.02 / 64, cpu_cores=2), cores=2)
    assert gpu.slowdown == 1.0


def test_prefetch_depth_lets_a_fast_worker_run_ahead_of_a_bursty_step():
    sizes = [64] * 8
    shallow = simulate(sizes, Loader(workers=1, item_s=0.001, prefetch=1), compute_s=0.064)
    deep = simulate(sizes, Loader(workers=1, item_s=0.001, prefetch=4), compute_s=0.064)
    assert shallow == pytest.approx(deep)  # step-bound: depth is free
    assert simulate(sizes, Loader(workers=2, item_s=0.002, prefetch=1)) == pytest.approx(4 * 64 * 0.002)


def test_item_time_inverts_a_loader_only_epoch():
    sizes = batch_sizes(768, 64, batches=6)
    epoch = simulate(sizes, Loader(workers=4, item_s=ITEM)) + 0.2
    assert item_time(sizes, 4, epoch, startup_s=0.2) == pytest.approx(ITEM)


def test_rank_and_error():
    assert rank([("a", 1.0), ("b", 0.5), ("c", 0.99)], current_s=1.0, margin=0.02) == [("b", 0.5)]
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert math.isnan(relative_error(1.0, 0.0))


def test_the_race_leaves_out_what_the_model_cannot_tell_from_a_faster_candidate():
    """Four workers and four with a deeper prefetch, both predicted to feed a step that is the slower part:
    the same epoch either way, so only one is raced; a loader-limited candidate as close is still raced (its
    prefetch can change its epoch), and one clearly slower is too."""
    sizes = batch_sizes(768, 32)
    step = Step(compute_s=0.05, cores=1.0)
    fast = Loader(4, ITEM / 4, 0.0, 2)
    deep = Loader(4, ITEM / 4, 0.0, 4)
    slow = Loader(1, ITEM, 0.0, 2)
    p = {n: predict(sizes, step, lo, 2) for n, lo in (("w4", fast), ("w4-pf4", deep), ("w1", slow))}
    assert p["w4"].bound == p["w4-pf4"].bound == "compute" and p["w1"].bound == "loader"
    ranked = sorted(((n, x.epoch_s) for n, x in p.items()), key=lambda kv: kv[1])
    assert distinct(ranked, p, 2, 0.02) == ["w4", "w1"]
    assert distinct(ranked, p, 1, 0.02) == ["w4"]
    # Loader-limited and as close: raced where the worker counts differ (the workers' share of the cores is
    # what the model may get wrong), left out where they are the same workers with another knob.
    a, b = Prediction(1.0, 1.0, 0.5, 0.0, 1.0, workers=4), Prediction(1.01, 1.01, 0.5, 0.0, 1.0, workers=3)
    assert distinct([("a", 1.0), ("b", 1.01)], {"a": a, "b": b}, 2, 0.02) == ["a", "b"]
    same = Prediction(1.01, 1.01, 0.5, 0.0, 1.0, workers=4)
    assert distinct([("a", 1.0), ("b", 1.01)], {"a": a, "b": same}, 2, 0.02) == ["a"]
    apart = Prediction(1.05, 1.05, 0.5, 0.0, 1.0, workers=4)  # the same workers, but further than the margin
    assert distinct([("a", 1.0), ("b", 1.05)], {"a": a, "b": apart}, 2, 0.02) == ["a", "b"]


def test_fewer_workers_that_cannot_beat_the_best_need_no_trial():
    """The issue's 4-ms case: 768 items at 233 img/s in-process, four workers predicted at 0.865 s an epoch.
    Three workers fetch at most 3 x 233 img/s, 1.10 s for the loader alone: they cannot win; had four been
    predicted at 1.2 s (the step slower), three could (their loader 1.10 s), so they are tried."""
    assert cannot_win(768, 3, 233.0, 0.865, 0.02)
    assert cannot_win(768, 1, 233.0, 0.865, 0.02)
    assert not cannot_win(768, 3, 233.0, 1.2, 0.02)
    assert not cannot_win(768, 0, 233.0, 0.865, 0.02)  # 0 workers: the configured run measured it
    assert not cannot_win(768, 3, math.nan, 0.865, 0.02)  # no in-process rate: nothing known
    # against the model itself: a count it predicts slower than the bound says is never left untried
    step = Step(compute_s=0.005, cores=1.0)
    sizes = batch_sizes(768, 32)
    four = predict(sizes, step, Loader(4, 1 / 233.0), 2).epoch_s
    for w in (1, 2, 3):
        mine = predict(sizes, step, Loader(w, 1 / 233.0), 2).epoch_s
        assert not cannot_win(768, w, 233.0, four, 0.02) or mine > four * 1.02


def test_with_no_race_the_answer_says_why_from_the_prediction():
    from wif.advisor.answer import why_keep

    turns = {"w2": Prediction(0.5, 0.1, 0.45, 0.0, 1.6)}
    said = why_keep(None, [], turns, data_bound=True, on_cpu=True, margin=0.02)
    assert "take turns with the step" in said and "stretched up to 1.6x" in said and "trainer.threads" in said
    assert "take turns" not in why_keep(None, [], turns, data_bound=True, on_cpu=False, margin=0.02)
    assert "hardly waits for data" in why_keep(None, [], turns, data_bound=False, on_cpu=True, margin=0.02)


def test_before_the_race_the_prediction_says_the_workers_take_the_steps_cores():
    from wif.advisor.answer import candidate_table, shared_cores

    stretched = {"current": Prediction(1.0, 0.9, 0.1, 0.0, 1.0), "w2": Prediction(0.6, 0.3, 0.5, 0.0, 1.45, 2)}
    said = shared_cores(stretched, 2, 2.0)
    assert "2 cores, the step's threads on 2" in said
    assert "the workers take the cores the step uses" in said and "1.45x longer (w2)" in said
    apart = {"current": Prediction(1.0, 0.9, 0.1, 0.0, 1.0), "w2": Prediction(0.6, 0.3, 0.5, 0.0, 1.05, 2)}
    assert "fit beside the step" in shared_cores(apart, 16, 1.0)
    table = candidate_table(["current", "w2"], {"current": 100.0, "w2": 300.0}, stretched, None)
    assert "step x" in table.splitlines()[0] and "1.45" in table.splitlines()[2]


def test_a_keep_predicted_this_close_is_raced_not_said():
    """timm's train.py here: two workers predicted 7.020 s an epoch against 6.995 s at 0 (its own timing had
    them 10% slower): not faster by the margin, but closer than the CPU's predictions err, so raced."""
    assert close_call({"w2": 7.020, "w4": 7.218, "w1": 7.993}, 6.995) == "w2"
    assert close_call({"w2": 7.9, "w4": 8.2}, 6.995) is None  # predicted clearly slower: nothing to race
    assert close_call({}, 6.995) is None


def test_race_runs_take_the_epochs_the_allocation_asks_and_fit_the_time_left():
    """A race run takes its warm-up and Kalibera and Jones' steady epochs, sqrt(a run's start / an epoch's cost),
    at least 3 in all, fewer where the blocks would not fit. timm's train.py here: 10 s to start, 6.2-s epochs
    measured, race epochs 7.7-8.5 s: 3 epochs (not the 5 that 2 blocks in 208 s would allow: more blocks buy
    more than longer runs). A script that takes 60 s to start 1-s epochs: 1 + ceil(sqrt(60 / 1.3)) = 8."""
    from wif.advisor.advice import Options, race_epochs
    from wif.advisor.runner import Measured

    now = Measured("measure", "current", "run", "FINISHED", {}, [{"epoch_time_s": 6.2}] * 3, wall_s=28.6)
    assert race_epochs(208.0, now, [6.19], Options()) == 3
    assert race_epochs(208.0, now, [6.19], Options(), warmup=2) == 4
    slow_start = Measured("measure", "current", "run", "FINISHED", {}, [{"epoch_time_s": 1.0}] * 3, wall_s=63.0)
    assert race_epochs(1000.0, slow_start, [0.5], Options()) == 8
    assert race_epochs(1000.0, slow_start, [0.5], Options(max_epochs=6)) == 6
    # 2 blocks of 2 runs in 100 s: 25 s a run, 60 s of it the start: no epoch fits
    assert race_epochs(100.0, slow_start, [0.5], Options()) == 0
