"""Orders to `wif.watch` from `wif-advise -- python my_train.py ...`: which measurement this process of the script is.

The orders come through the environment, as JSON in WIF_WATCH_ORDERS, so the script runs unchanged. A mode:

    `train`: the script as it is, each epoch capped at `batches` batches. It runs `epochs` epochs. With `auto`
        it runs until the study's stopping rule says the median is pinned, as `trainer.epochs=auto` does.
    `bound`: the first batches replayed, as `data=fixed` is. The first epoch reads them as its warm-up. Every
        later epoch hands the step the same batches again, so the loader costs nothing.
    `loader_only`: the loader iterated alone for `epochs` epochs at its first pass. The step never runs.
    `probe`: the loader's settings written to `out` at its first epoch, with the time of its first few
        batches. The script ends there.

With `loader` settings, the script's DataLoader is rebuilt with them, even inside its wrapper. Its dataset,
sampler or batch sampler, collate_fn, worker_init_fn and generator are kept. When the measurement has what
it needs, the process leaves with SystemExit 0 at the end of that epoch. The figures go to the run that
wif-advise opened (`run_id`), which wif-advise ends from the exit code.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, NoReturn, Optional, Tuple

import torch
from torch.utils.data import DataLoader, IterableDataset

from wif.measure import names
from wif.run.record import MEMORY_PEAKS
from wif.run.stopping import StopRule, decide
from wif.run.training import CappedBatches
from wif.watcher import ranks
from wif.watcher.found import Found, is_dataloader, length_of, rebuild
from wif.watcher.proof import Unreached, promised, unmet
from wif.watcher.replay import Copies, Keep, Replay
from wif.watcher.windows import Windows

ENV = "WIF_WATCH_ORDERS"
FORKED_FROM = "WIF_WATCH_FORKED_FROM"  # a script forked warm (wif.advisor.script.warm): the pid it was forked from
MODES = ("train", "bound", "loader_only", "probe")
PROBE_BATCHES, PROBE_S = 8, 10.0  # the probe times up to this many batches after the first, within this long


class Orders:
    """One measurement's orders, read once per process."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        self.spec = spec
        self.uri, self.run_id, self.mode = spec["uri"], spec["run_id"], spec.get("mode", "train")
        if self.mode not in MODES:
            raise SystemExit(f"wif.watch: {ENV} has mode={self.mode!r}; one of {', '.join(MODES)}")
        self.cap: Optional[int] = spec.get("batches")
        self.windows = Windows(batches=self.cap)  # See NOTE [ Windows ] in wif.watcher.windows
        self.epochs: Optional[int] = spec.get("epochs")
        self.rule = StopRule(**spec["auto"]) if spec.get("auto") else None
        self.done, self.reason = False, ""
        self.replay: List[Any] = []
        self.copies = Copies()  # the bound's copies of its kept batches, left out of each window (wif.watcher.replay)
        self.rebuilt: Optional[DataLoader] = None
        self.script_loader: Optional[DataLoader] = None  # the script's own, as the first epoch found it
        self.promise: Optional[Dict[str, Any]] = None  # what the iterated DataLoader must show (wif.watcher.proof)
        self.found: Optional[Dict[str, Any]] = None  # `probe`: the loader's settings, once
        self.times: Optional[List[float]] = None  # `probe`: the first epoch's batch times, once it has begun

    @classmethod
    def from_env(cls) -> Optional["Orders"]:
        """The orders in WIF_WATCH_ORDERS; None where it is unset."""
        text = os.environ.get(ENV)
        return cls(json.loads(text)) if text else None

    def probe(self, settings: Dict[str, Any], has_dataloader: bool) -> None:
        """`probe`: what the loader is, written for wif-advise; the script ends here without a DataLoader."""
        if self.found is not None:  # a later epoch of the same loader: `sample` ends the script there
            return
        self.found = {**settings, "has_dataloader": has_dataloader}
        write_json(self.spec["out"], self.found)
        if not has_dataloader:
            _end_script()

    def sample(self, batches: Any, proven: Callable[[], bool]) -> Iterator[Any]:
        """`probe`: the first batches of the training loop as it runs, each timed with its fetch and its step.

        Their median after the first goes beside the settings as `batch_s`; the advice sizes its runs by it. The
        script ends after those batches, or at the epoch's end once the claim is `proven`. A loop that leaves the
        epoch sooner (a break, Lightning's fetcher counting its batches) ends as the loader's next epoch starts.
        """
        if self.times is not None:
            self._probed()
        times = self.times = []
        t = time.perf_counter()
        for batch in batches:
            yield batch
            now = time.perf_counter()
            times.append(now - t)
            t = now
            if (len(times) > PROBE_BATCHES or sum(times) > PROBE_S) and proven():
                break
        if proven():
            self._probed()

    def _probed(self) -> None:
        """The probe's batch time written beside the settings, and the script ends."""
        times = self.times or []
        if times and self.found is not None:
            steady = times[1:] or times
            self.found["batch_s"] = sorted(steady)[len(steady) // 2]
            write_json(self.spec["out"], self.found)
        _end_script()

    # ------------------------------------------------------------------ the loader
    def take(self, batches: Any, found: Optional[Found]) -> None:
        """The epoch's DataLoader rebuilt once with the candidate's settings, and put in each epoch's wrapper."""
        settings = self.spec.get("loader")
        if not settings:
            return
        if found is None:
            raise SystemExit(f"wif.watch: cannot set {settings} on a {type(batches).__name__}: no DataLoader inside it")
        holder, attr, loader = found
        if loader is self.rebuilt:
            return
        if holder is not None and not attr:
            raise SystemExit(
                f"wif.watch: cannot set {settings} on the DataLoader inside a {type(batches).__name__} (a generator "
                "over it): pass wif.watch the DataLoader, or a wrapper that holds it as an attribute"
            )
        if self.script_loader is None:
            self.script_loader = loader
        if self.rebuilt is None or self.rebuilt.dataset is not loader.dataset:
            self.rebuilt = rebuild(loader, settings)
            self.promise = promised(loader, self.rebuilt)
        if holder is not None:
            setattr(holder, attr, self.rebuilt)

    def prove(self, anchor: Any, started: Optional[Iterable[Tuple[Any, Any]]]) -> None:
        """At an epoch's first batch: Unreached where its DataLoader is not as ordered; `started` is hook.STARTED."""
        if self.promise is not None and started is not None:
            why = unmet(self.promise, anchor, started)
            if why:
                raise Unreached(why)

    def source(self, batches: Any) -> Any:
        """What the epoch iterates: the rebuilt DataLoader where the watched object was one."""
        return self.rebuilt if self.rebuilt is not None and is_dataloader(batches) else batches

    def cut(self, n: Optional[int]) -> Optional[int]:
        """An epoch's batches under the orders: its whole windows, or all of it where it is shorter than one.

        None where the epoch has no length. See NOTE [ Windows ] in wif.watcher.windows.
        """
        if not self.cap or n is None or n <= self.cap:
            return n
        return n - n % self.cap

    def length(self, batches: Any) -> int:
        """`len()` of the watched iterable under the orders: its batches, cut to whole windows."""
        n = length_of(self.source(batches))
        if n is None:  # an IterableDataset without a length: the cap is all the orders know
            if self.cap:
                return self.cap
            raise TypeError(f"{type(batches).__name__} has no len()")
        return self.cut(n)

    def batches(self, batches: Any, done: int) -> Any:
        """The epoch's batches as the orders have them: cut to whole windows; the bound's replayed after its first."""
        source = self.source(batches)
        n = length_of(source)
        cut = self.cut(n)
        if self.mode == "bound" and done > 0 and self.replay:
            return Replay(self.replay, self.length(batches), self.copies)
        capped = CappedBatches(source, cut) if cut is not None and cut < n else source
        rebuilt = self.rebuilt
        if (
            done == 0
            and rebuilt is not None
            and isinstance(rebuilt.dataset, IterableDataset)
            and rebuilt.num_workers > 1
        ):
            capped = _Sharded(capped, rebuilt.num_workers, type(rebuilt.dataset).__name__)
        if self.mode == "bound" and done == 0:
            return Keep(capped, self.replay, window=self.cap, count=cut, copies=self.copies)
        return capped

    # ------------------------------------------------------------------ when to leave
    def after_epoch(self, epochs: List[Dict[str, float]], record: Any, ranked: bool = False) -> None:
        """Whether the measurement has what it needs; `ranked`: rank 0 decides for every rank (wif.watcher.ranks)."""
        if self.rule is not None:
            memory = {k: [e.get(k, 0.0) for e in epochs] for k in MEMORY_PEAKS if k in epochs[-1]}
            decision = decide([e[names.EPOCH_TIME_S] for e in epochs], memory, self.rule)
            self.done, self.reason = decision.stop, decision.reason
        elif self.epochs is not None and len(epochs) >= self.epochs:
            self.done, self.reason = True, f"{self.epochs} epochs (fixed)"
        if ranked:
            self.done = ranks.decided(self.done)
        if self.done:
            record.stop_reason = self.reason

    def leave(self, record: Any) -> None:
        """The measurement has what it needs: log, and end the script's process."""
        record.finish()
        _end_script()


def _end_script() -> NoReturn:
    """The watch ends the script here: exit 0, its process group destroyed at exit as its own end would have."""
    ranks.destroy_at_exit()
    raise SystemExit(0)


def write_json(path: str, data: Dict[str, Any]) -> None:
    """`data` at `path`, whole or not at all: written to this process's own part beside it, then renamed."""
    part = f"{path}.{os.getpid()}.part"
    with open(part, "w") as out:
        json.dump(data, out)
    os.replace(part, path)


class _Sharded:
    """An IterableDataset given workers, checked to split its items among them.

    Each worker runs its own copy of the iterator. One that ignores `get_worker_info()` yields every item once
    per worker: the workers' first batches are the same. The measurement ends there, saying so.
    """

    def __init__(self, batches: Any, workers: int, name: str) -> None:
        self.batches, self.workers, self.name = batches, workers, name

    def __iter__(self) -> Iterator[Any]:
        first: List[Any] = []
        for batch in self.batches:
            if len(first) < self.workers:
                first.append(batch)
                if len(first) == self.workers and all(_same(first[0], b) for b in first[1:]):
                    raise SystemExit(
                        f"wif.watch: the {self.name} does not split its items among DataLoader workers (by "
                        f"torch.utils.data.get_worker_info()): with {self.workers} workers each would yield every "
                        "item, so wif-advise does not time worker settings on it"
                    )
            yield batch

    def __len__(self) -> int:
        return len(self.batches)


def _same(a: Any, b: Any) -> bool:
    """Whether two batches hold the same values, in the same structure."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
