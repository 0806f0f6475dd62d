"""The bound's batches: its first window's kept, then handed out again, each time a copy of its own.

The orders' `bound` mode measures the script's step with a loader that costs nothing. The copy is made inside
the loop's `next()`, so its seconds are counted (`Copies`) and left out of the window (wif.watcher.windows).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Iterator, List, Optional

import torch

from wif.run.loop import map_tensors

REPLAYED = 8  # batches kept for the bound: the DALI LoaderEvaluator's idea, within a few hundred MB at 224 px


class Copies:
    """The seconds spent copying kept batches, summed: what the window leaves out, since no loader copies them."""

    def __init__(self) -> None:
        self.s = 0.0

    def fresh(self, batch: Any) -> Any:
        """`fresh(batch)`, its time summed."""
        t0 = time.perf_counter()
        out = fresh(batch)
        self.s += time.perf_counter() - t0
        return out


class Keep:
    """The bound's first window, passed on, its first REPLAYED batches kept; then the kept ones replayed.

    An epoch longer than one window goes on in replays, to its `count` batches. That is the bound of a script
    of one long epoch. A `count` of None replays for as long as the loop asks.
    """

    def __init__(
        self,
        batches: Any,
        kept: List[Any],
        window: Optional[int],
        count: Optional[int],
        copies: Optional[Copies] = None,
    ) -> None:
        self.batches, self.kept, self.window, self.count = batches, kept, window, count
        self.copies = copies or Copies()

    def __iter__(self) -> Iterator[Any]:
        taken = 0
        for batch in itertools.islice(self.batches, self.window):
            if len(self.kept) < REPLAYED:
                self.kept.append(self.copies.fresh(batch))  # before the step sees it: a step may change it in place
            taken += 1
            yield batch
        if self.window is None or taken < self.window or not self.kept:
            return  # the epoch ended within its first window
        if self.count is None or self.count > taken:
            yield from Replay(self.kept, None if self.count is None else self.count - taken, self.copies)

    def __len__(self) -> int:
        return len(self.batches)


class Replay:
    """The kept batches again, round and round, `count` of them (None: for as long as the loop asks)."""

    def __init__(self, kept: List[Any], count: Optional[int], copies: Optional[Copies] = None) -> None:
        self.kept, self.count, self.copies = kept, count, copies or Copies()

    def __iter__(self) -> Iterator[Any]:
        return (self.copies.fresh(batch) for batch in itertools.islice(itertools.cycle(self.kept), self.count))

    def __len__(self) -> int:
        if self.count is None:
            raise TypeError("an endless replay has no len()")
        return self.count


def fresh(batch: Any) -> Any:
    """A copy of a batch's tensors in its tuples, lists and dicts: a step may change it in place."""
    return map_tensors(batch, torch.Tensor.clone)
