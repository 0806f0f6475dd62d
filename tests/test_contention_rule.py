"""Contention is judged against the cores a run leaves idle: the H100 node's figures and a 2-core machine's."""

from __future__ import annotations

import os
import time

import pytest

from wif.measure import names
from wif.measure.contention import CORES, HostCpuMeter, is_contended


def figures(other_pct: float, idle_cores: float) -> dict:
    return {names.HOST_OTHER_CPU_PCT: other_pct, names.HOST_IDLE_CORES: idle_cores}


def test_a_busy_neighbour_on_16_cores_does_not_contend_but_on_2_it_does() -> None:
    # The H100 node (2026-11-27): others used 26-117% of a core while a probe run used about 1.5 of 16 cores.
    assert not is_contended(figures(117.0, 14.5), 25.0)
    assert not is_contended(figures(26.0, 14.5), 25.0)
    # The same neighbour on 2 cores, where the run leaves half a core idle: a quarter core is the limit.
    assert is_contended(figures(26.0, 0.5), 25.0)
    assert not is_contended(figures(20.0, 0.5), 25.0)
    # Others that take most of the idle cores on a large node do contend.
    assert is_contended(figures(1200.0, 14.5), 25.0)


def test_without_idle_cores_the_threshold_is_a_share_of_one_core() -> None:
    assert is_contended({names.HOST_OTHER_CPU_PCT: 30.0}, 25.0)
    assert not is_contended({names.HOST_OTHER_CPU_PCT: 20.0}, 25.0)
    assert not is_contended({}, 25.0)


def test_the_meter_reads_the_cores_this_process_leaves_idle() -> None:
    meter = HostCpuMeter(os.getpid())
    meter.mark()
    t, cpu = time.monotonic(), time.process_time()
    while time.monotonic() - t < 1.0:  # one core busy in this process, as far as the machine gives it one
        pass
    given = (time.process_time() - cpu) / (time.monotonic() - t)  # beside other tests, less than a core
    meter.mark()
    others = meter.others(0, 1)
    if not others:
        pytest.skip("no /proc/stat: the machine's CPU use cannot be read")
    assert given > 0.1 and abs(others[names.HOST_IDLE_CORES] - (CORES - given)) <= 0.2, (others, CORES, given)
