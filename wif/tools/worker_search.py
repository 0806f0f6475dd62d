"""The worker search of `wif-tune`, `wif.tune_workers` and wif-advise, with no I/O: it only asks a trial's images/s.

See docs/tuning.md, "Loader tuner".
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence

from wif.tools.tune_trials import Trial

Measure = Callable[[int, str], Optional[float]]  # (num_workers, phase) -> images/s, None if the trial failed


def pick_best(scores: Dict[int, Optional[float]], min_gain: float) -> Optional[int]:
    """The fewest workers whose throughput is within `min_gain` of the fastest; None if every trial failed."""
    ok = {w: s for w, s in scores.items() if s is not None}
    if not ok:
        return None
    top = max(ok.values())
    return min(w for w, s in ok.items() if s * (1 + min_gain) >= top)


class _Scores:
    """Each worker count's images/s, measured once."""

    def __init__(self, measure: Measure) -> None:
        self.measure = measure
        self.by_workers: Dict[int, Optional[float]] = {}

    def score(self, workers: int, phase: str) -> Optional[float]:
        """The count's images/s, measured the first time it is asked for."""
        if workers not in self.by_workers:
            self.by_workers[workers] = self.measure(workers, phase)
        return self.by_workers[workers]

    def coarse_best(self, counts: Iterable[int], min_gain: float) -> int:
        """The coarse pass over `counts`, 0 first, as `search_workers` says: where more workers stopped helping."""
        best = 0
        for w in counts:
            s, b = self.score(w, "coarse"), self.by_workers[best]
            if w > 0 and (s is None or (b is not None and s <= b * (1 + min_gain))):
                break
            best = w
        return best


def search_workers(
    measure: Measure,
    *,
    max_workers: int,
    step: int,
    radius: int,
    min_gain: float,
    beaten: Optional[Callable[[int, int], bool]] = None,
) -> Optional[int]:
    """The worker count docs/tuning.md's search picks; None where every trial failed.

    The coarse pass tries 0, step, 2*step, ... up to `max_workers`. It stops at the first count that fails,
    or is not faster than the best so far by more than `min_gain`. The refining pass tries every count within
    `radius` of the best. Each count is measured once.

    Args:
        measure: images/s of a worker count in a phase, "coarse" or "refine"; None where the trial failed.
        max_workers: the most workers tried.
        step: the coarse pass's step in workers.
        radius: the refining pass's reach around the best.
        min_gain: the share faster that more workers must be to count as helping.
        beaten: the caller's bound; a refining count where `beaten(count, best)` is not measured at all.
            wif-advise's: the count's loader alone is slower than the best's whole epoch.
    """
    scores = _Scores(measure)
    best = scores.coarse_best(range(0, max_workers + 1, step), min_gain)
    for w in range(max(best - radius, 0), min(best + radius, max_workers) + 1):
        if w in scores.by_workers or beaten is None or not beaten(w, best):
            scores.score(w, "refine")
    return pick_best(scores.by_workers, min_gain)


def double_workers(
    measure: Measure, *, max_workers: int, min_gain: float, beaten: Optional[Callable[[int, int], bool]] = None
) -> Optional[int]:
    """The worker count wif-advise's search picks: counts doubled, then halfway to each neighbour.

    The coarse pass tries 0, 4, 8, 16, ... and `max_workers` last, and stops as `search_workers`' does. A count
    that fails, as one the minutes cut does, ends it. The refining pass tries the counts halfway between the best
    and the coarse counts beside it. That is about log2(max_workers) + 3 trials; `search_workers` takes about
    max_workers / step.

    Args:
        measure: images/s of a worker count in a phase, "coarse" or "refine"; None where the trial failed.
        max_workers: the most workers tried.
        min_gain: the share faster that more workers must be to count as helping.
        beaten: the caller's bound; a refining count where `beaten(count, best)` is not measured at all.
    """
    scores = _Scores(measure)
    coarse = doubled_counts(max_workers)
    best = scores.coarse_best(coarse, min_gain)
    at = coarse.index(best)
    beside = coarse[max(at - 1, 0) : at + 2]
    for w in sorted({(best + n) // 2 for n in beside} - {best, *scores.by_workers}):
        if beaten is None or not beaten(w, best):
            scores.score(w, "refine")
    return pick_best(scores.by_workers, min_gain)


FIRST_WORKERS = 4  # the doubled search's first count above 0, as wif-tune's step: fewer rarely win on their own


def doubled_counts(max_workers: int) -> List[int]:
    """The coarse pass's counts: 0, then 4, 8, 16, ... below `max_workers`, and `max_workers` itself."""
    counts, w = [0], FIRST_WORKERS
    while w < max_workers:
        counts.append(w)
        w *= 2
    return counts + ([max_workers] if max_workers > 0 else [])


def best_trial(trials: Sequence[Trial], best_per_pin: Dict[bool, Optional[int]], min_gain: float) -> Optional[Trial]:
    """The pick among each pinning's best: the fewest workers within min_gain of the fastest, then no pinning."""
    finalists = [
        next(t for t in trials if (t.pin_memory, t.num_workers) == (pin, w))
        for pin, w in best_per_pin.items()
        if w is not None
    ]
    if not finalists:
        return None
    top = max(t.img_s for t in finalists)
    return min((t for t in finalists if t.img_s * (1 + min_gain) >= top), key=lambda t: (t.num_workers, t.pin_memory))
