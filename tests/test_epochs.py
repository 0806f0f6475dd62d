"""One account of an epoch (wif.measure.epochs): its figures, the warm-up rule and the steady summary, on
simulated epochs with known answers; and the harness, the watch and the in-process API giving the same
summary for the same epochs, each through its own record."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

import pytest

from wif.config import Config, MeasureConfig
from wif.measure import epochs
from wif.measure.contention import HostCpuMeter
from wif.measure.sampler import TreeSampler


def clock(t: float, wait: float, compute: float, *, samples: int = 64, gpu: bool = False) -> Dict[str, float]:
    """An epoch's clock as wif.run.loop.TimedFeed gives it (CUDA's figures where `gpu`)."""
    return {
        "epoch_time_s": t,
        "samples": samples,
        "data_wait_s": wait,
        "copy_s": 0.25 * wait,
        "compute_s": compute,
        "first_batch_s": wait / 4,
        "gpu_blocked_s": 0.01 if gpu else None,
        "gpu_idle_s": 0.02 if gpu else None,
        "compute_threads": 2,
    }


def run_of(times: List[float], gpu: bool = False) -> List[Dict[str, float]]:
    """A run's epochs as the harness keeps them: the figures, when each started, no validation."""
    out = []
    for i, t in enumerate(times):
        e = {"epoch": i, **epochs.figures(clock(t, 0.4 * t, 0.5 * t, gpu=gpu)), "samples": 64}
        out.append({**e, "t_start": 100.0 + 10 * i, "val_time_s": None})
    return out


def test_an_epochs_figures_are_its_times_their_shares_and_its_throughput() -> None:
    f = epochs.figures(clock(2.0, 0.5, 1.2, samples=100))
    assert f["throughput_img_s"] == 50.0 and f["data_wait_share"] == 0.25 and f["compute_share"] == 0.6
    assert f["gpu_idle_s"] is None and f["gpu_blocked_s"] is None  # off CUDA: not measured, never logged
    assert set(epochs.EPOCH_KEYS) - {"cpu_util_pct", "gpu_util_pct", "tree_cpu_s"} <= set(f)  # the sampler adds those
    empty = epochs.figures(clock(0.0, 0.0, 0.0))  # an epoch of no batches
    assert empty["throughput_img_s"] == empty["data_wait_share"] == 0.0


@pytest.mark.parametrize(("n", "warmup", "left"), [(5, 1, 1), (1, 1, 0), (2, 1, 1), (3, 2, 2), (2, 2, 0), (4, 0, 0)])
def test_the_warm_up_is_left_out_only_where_the_run_has_more(n: int, warmup: int, left: int) -> None:
    assert epochs.left_out(n, warmup) == left
    assert len(epochs.steady(list(range(n)), warmup)) == n - left


def test_the_summary_of_known_epochs() -> None:
    run = run_of([3.0, 1.0, 2.0, 4.0])  # the warm-up (3.0) is set apart; steady 1, 2, 4
    s = epochs.summary(run, 1)
    assert s["epoch_time_median_s"] == 2.0 and s["warmup_epoch_time_s"] == 3.0 and s["epochs_run"] == 4
    assert s["epoch_time_mean_s"] == pytest.approx(7 / 3)
    assert s["throughput_mean_img_s"] == pytest.approx(statistics.mean([64.0, 32.0, 16.0]))
    assert s["data_wait_share_mean"] == pytest.approx(0.4) and s["compute_mean_s"] == pytest.approx(0.5 * 7 / 3)
    assert "gpu_idle_mean_s" not in s and "gpu_blocked_mean_s" not in s  # not measured off CUDA
    on_gpu = epochs.summary(run_of([3.0, 1.0], gpu=True), 1)
    assert on_gpu["gpu_idle_mean_s"] == pytest.approx(0.02) and on_gpu["epoch_time_median_s"] == 1.0
    assert epochs.summary(run[:1], 1)["epoch_time_median_s"] == 3.0  # one epoch: summarized over itself


def test_the_harness_the_watch_and_the_api_summarize_alike() -> None:
    """The same epochs through the study's RunRecord, the watch's Record and time_epochs' EpochTimes: each
    adds what only it knows, and the steady summary they share is the same, key for key."""
    from wif.run.record import RunRecord
    from wif.tools.api import EpochTimes
    from wif.watcher.record import Record

    run = run_of([0.9, 0.5, 0.7, 0.6, 0.8])
    want = epochs.summary(run, epochs.WARMUP_EPOCHS)
    assert Config().trainer.warmup_epochs == epochs.WARMUP_EPOCHS  # the harness's default is the watch's rule

    meter = HostCpuMeter(os.getpid())
    for _ in range(len(run) + 1):  # the harness marks the run's start and each epoch's end
        meter.mark()
    harness = RunRecord(Config(), None, lambda: "", "test", TreeSampler(os.getpid(), MeasureConfig()), meter)
    harness.epochs = run
    by_harness = harness.summary(t_end=200.0)

    hook = sys.excepthook
    watched = Record({}, None, None, log=False)
    try:
        watched.epochs = run
        by_watch = watched.summary()
    finally:
        watched.finish()
        sys.excepthook = hook

    by_api = EpochTimes(run, epochs.WARMUP_EPOCHS).summary
    for name, value in want.items():
        assert by_harness[name] == by_watch[name] == by_api[name] == value, name


# A process that forks 3 children after 0.3 s, as a DataLoader starts its workers, prints the clock, and waits.
# A PSS read kept from then on covered all 4: a read is kept only where the tree held still during it.
STARTS_WORKERS = """
import os, sys, time
time.sleep(0.3)
for n in range(3):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
print(time.monotonic(), flush=True)
time.sleep(30)
"""


def test_workers_that_start_after_the_first_pss_read_are_read_however_small_the_budget() -> None:
    """A PSS read held before the workers, or dropped as they forked, spent a short run's whole budget: its
    workers had no PSS figure, and the advice priced RAM by RSS, each worker's shared pages counted again.
    The watch's sampler reads such workers past the budget (the harness reads them at each epoch's end)."""
    proc = subprocess.Popen([sys.executable, "-c", STARTS_WORKERS], stdout=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid, MeasureConfig(pss_interval_s=0.2, pss_budget_pct=0.01), unread_reads=3)
    try:
        sampler.start()
        started = float(proc.stdout.readline())
        time.sleep(2.0)
    finally:
        sampler.stop()
        proc.kill()
        proc.wait()
    read_after = [t for t in sampler.samples.slow.t if t > started]
    assert read_after, f"no PSS read covered the workers (reads at {sampler.samples.slow.t}, workers by {started})"
