"""The worker searches: wif-tune's stepped walk and wif-advise's doubled one, on made-up loader speeds."""

from __future__ import annotations

from typing import List

from wif.tools.worker_search import double_workers, doubled_counts, pick_best, search_workers


def test_worker_search_goes_coarse_then_refines_and_stops_early() -> None:
    speed = {w: 100.0 + 50 * w if w <= 5 else 350.0 - 50 * (w - 5) for w in range(0, 33)}  # peak at 5
    calls: List[tuple] = []

    def measure(w: int, phase: str) -> float:
        calls.append((w, phase))
        return speed[w]

    assert search_workers(measure, max_workers=32, step=4, radius=3, min_gain=0.05) == 5
    coarse = [w for w, p in calls if p == "coarse"]
    assert coarse == [0, 4, 8]  # 8 is slower than 4: the coarse walk stops there, never reaching 32
    assert sorted(w for w, p in calls if p == "refine") == [1, 2, 3, 5, 6, 7]


def test_worker_search_leaves_out_counts_the_caller_shows_cannot_win() -> None:
    speed = {0: 100.0, 4: 400.0, 1: 100.0, 2: 200.0, 3: 300.0}
    calls = []

    def measure(w, phase):
        calls.append(w)
        return speed[w]

    assert search_workers(measure, max_workers=4, step=4, radius=3, min_gain=0.05, beaten=lambda w, best: w < best) == 4
    assert calls == [0, 4]  # 1..3 shown beaten by the caller's bound: never measured
    calls.clear()
    assert search_workers(measure, max_workers=4, step=4, radius=3, min_gain=0.05, beaten=lambda w, best: w < 2) == 4
    assert calls == [0, 4, 2, 3]


def test_worker_search_prefers_fewer_workers_and_survives_failures() -> None:
    assert pick_best({0: 100.0, 2: 103.0, 4: 104.0}, min_gain=0.05) == 0  # within 5%: fewest workers
    assert pick_best({0: None, 1: 10.0}, min_gain=0.05) == 1
    assert pick_best({0: None}, min_gain=0.05) is None
    fails_from_4 = lambda w, phase: None if w >= 4 else 100.0 * (w + 1)  # noqa: E731
    assert search_workers(fails_from_4, max_workers=16, step=4, radius=3, min_gain=0.05) == 3


def test_doubled_search_takes_about_log2_trials_on_16_and_64_cores() -> None:
    """wif-advise's search: a loader that sleeps on I/O keeps scaling past the cores, and one that levels off at
    6 workers; on 16 and 64 cores (up to 32 and 128 workers) the doubled search finds each in a few trials,
    where the stepped search of wif-tune takes 12 and 28 (the H100 node's advice: 12 trials, no race)."""
    sleeps = lambda w: 100.0 * max(w, 0.5)  # noqa: E731
    levels = lambda w: 100.0 * min(max(w, 0.5), 6)  # noqa: E731
    for cores, loader, best, trials, stepped in (
        (16, sleeps, 32, [0, 4, 8, 16, 32, 24], 12),
        (64, sleeps, 128, [0, 4, 8, 16, 32, 64, 128, 96], 28),
        (16, levels, 6, [0, 4, 8, 16, 6, 12], 10),
        (64, levels, 6, [0, 4, 8, 16, 6, 12], 10),
    ):
        tried: List[int] = []
        measure = lambda w, phase, tried=tried, loader=loader: tried.append(w) or loader(w)  # noqa: E731
        assert double_workers(measure, max_workers=2 * cores, min_gain=0.05) == best
        assert tried == trials, (cores, tried)
        tried.clear()
        search_workers(measure, max_workers=2 * cores, step=4, radius=3, min_gain=0.05)
        assert len(tried) == stepped, (cores, tried)


def test_doubled_search_stops_at_a_cut_trial_and_skips_counts_that_cannot_win() -> None:
    assert doubled_counts(4) == [0, 4] and doubled_counts(24)[-2:] == [16, 24] and doubled_counts(2) == [0, 2]
    tried: List[int] = []
    cut_from_8 = lambda w, phase: tried.append(w) or (None if w >= 8 else 100.0 * (w + 1))  # noqa: E731
    assert double_workers(cut_from_8, max_workers=32, min_gain=0.05) == 6  # 4's neighbours: 2 and 6
    assert tried == [0, 4, 8, 2, 6]
    tried.clear()
    assert double_workers(cut_from_8, max_workers=32, min_gain=0.05, beaten=lambda w, best: w < best) == 6
    assert tried == [0, 4, 8, 6]
