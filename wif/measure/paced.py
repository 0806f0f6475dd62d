"""Per-epoch figures sent to MLflow from a thread of their own, paced so that sending takes at most a set share
of a core: a write to a SQLite store costs about 9 ms of CPU, 4% of a 0.25-s epoch on a core the loop's own
threads also use. Each send's CPU time (`time.thread_time`) is measured; the next waits until that cost is
`share` of the time since, and takes every epoch queued meanwhile in one call. Long epochs go out one by one as
they end; short ones a few at a time, on a dashboard seconds later.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from wif.measure.tracking import Tracker

Row = Tuple[int, Dict[str, float], Dict[str, Any]]


class PacedSender:
    """`put` an epoch's (step, metrics, tags) and go on; `close` sends what is left and says what failed."""

    def __init__(self, tracker: Tracker, run_id: str, share: float = 0.01, name: str = "wif-watch-log") -> None:
        self.tracker, self.run_id, self.share = tracker, run_id, share
        self.inbox: "queue.SimpleQueue[Optional[Row]]" = queue.SimpleQueue()
        self.error = ""
        self.sends = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def put(self, step: int, metrics: Mapping[str, float], tags: Mapping[str, Any]) -> None:
        self.inbox.put((step, dict(metrics), dict(tags)))

    def close(self, timeout: float = 120) -> str:
        """Everything queued sent (or the wait ended); the first error, '' if none."""
        self.inbox.put(None)
        self.thread.join(timeout)
        return self.error

    def _run(self) -> None:
        ready_at, closing = 0.0, False
        while not closing:
            rows: List[Row] = []
            item = self.inbox.get()
            while item is not None:
                rows.append(item)
                wait = ready_at - time.monotonic()
                try:
                    item = self.inbox.get(timeout=wait) if wait > 0 else self.inbox.get_nowait()
                except queue.Empty:
                    break
            closing = item is None
            if rows:
                cpu = time.thread_time()
                try:
                    self.tracker.log_steps(self.run_id, rows)
                    self.sends += 1
                except Exception as err:  # noqa: BLE001 - the store refused: said at the end, the training goes on
                    self.error = self.error or f"{type(err).__name__}: {err}"
                ready_at = time.monotonic() + (time.thread_time() - cpu) / self.share
