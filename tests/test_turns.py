"""The suite's turn-taking (tests/turns.py): a test marked `alone` never runs beside another, and is not starved."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Dict, Tuple

from tests.turns import turn


def test_an_alone_test_waits_for_the_one_beside_it_and_the_next_waits_for_it(tmp_path: Path) -> None:
    held: Dict[str, Tuple[float, float]] = {}

    def hold(name: str, alone: bool, seconds: float) -> None:
        with turn(alone, str(tmp_path)):
            start = time.monotonic()
            time.sleep(seconds)
            held[name] = (start, time.monotonic())

    shared = threading.Thread(target=hold, args=("shared", False, 0.6))
    shared.start()
    time.sleep(0.2)  # the shared test runs; the alone one arrives and waits for it
    alone = threading.Thread(target=hold, args=("alone", True, 0.4))
    alone.start()
    time.sleep(0.2)  # a new test arrives while the alone one waits: it must not start first
    late = threading.Thread(target=hold, args=("late", False, 0.1))
    late.start()
    for t in (shared, alone, late):
        t.join(timeout=30)
    assert held["alone"][0] >= held["shared"][1], held  # waited for the test beside it
    assert held["late"][0] >= held["alone"][1], held  # the newcomer waited its turn: no starving
    assert held["late"][0] >= held["shared"][1], held
