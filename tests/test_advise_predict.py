"""wif.advisor.predict on constructed cases whose epoch time is known by hand."""

import math

import pytest

from wif.advisor.predict import Loader, Step, batch_sizes, item_time, predict, rank, relative_error, simulate

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
    # A CPU-bound fetch (1 core a worker) beside a step that keeps both cores busy: the epoch can be no
    # shorter than the CPU work over the cores, (0.2 s x 1 core + 0.2 s x 2 cores) / 2 cores = 0.3 s.
    sizes = batch_sizes(640, 64)
    step = Step(compute_s=0.02, cores=2, on_cpu=True)
    serial = predict(sizes, step, Loader(0, 0.02 / 64), cores=2)
    free = predict(sizes, Step(compute_s=0.02, cores=0, on_cpu=True), Loader(2, 0.02 / 64), cores=2)
    contended = predict(sizes, step, Loader(2, 0.02 / 64, cpu_cores=2), cores=2)
    assert serial.epoch_s == pytest.approx(0.4)
    assert free.epoch_s == pytest.approx(0.2 + 64 * 0.02 / 64, rel=0.01)  # with free cores the fetch hides
    assert contended.slowdown > 1.3
    assert contended.epoch_s == pytest.approx(0.3, rel=0.05)
    # A fetch that waits on storage takes no core: the same workers hide it.
    waiting = predict(sizes, step, Loader(2, 0.02 / 64, cpu_cores=0), cores=2)
    assert waiting.slowdown == 1.0 and waiting.epoch_s == pytest.approx(free.epoch_s)


def test_prefetch_depth_lets_a_fast_worker_run_ahead_of_a_bursty_step():
    sizes = [64] * 8
    shallow = simulate(sizes, 1, 0.001, 0.064, prefetch=1)
    assert shallow == pytest.approx(simulate(sizes, 1, 0.001, 0.064, prefetch=4))  # step-bound: depth is free
    assert simulate(sizes, 2, 0.002, 0.0, prefetch=1) == pytest.approx(4 * 64 * 0.002)


def test_item_time_inverts_a_loader_only_epoch():
    sizes = batch_sizes(768, 64, batches=6)
    epoch = simulate(sizes, 4, ITEM, 0.0) + 0.2
    assert item_time(sizes, 4, epoch, startup_s=0.2) == pytest.approx(ITEM)


def test_rank_and_error():
    assert rank([("a", 1.0), ("b", 0.5), ("c", 0.99)], current_s=1.0, margin=0.02) == [("b", 0.5)]
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert math.isnan(relative_error(1.0, 0.0))
