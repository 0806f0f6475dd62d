"""Orders to `wif.watch` from `wif-advise -- python my_train.py ...`, through the environment (the script is
unchanged): which measurement this process of the script is for. Without WIF_WATCH_ORDERS there are none."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

ENV = "WIF_WATCH_ORDERS"


class Orders:
    """One measurement's orders (filled in by wif-advise's runner)."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.uri, self.run_id = spec["uri"], spec["run_id"]

    @classmethod
    def from_env(cls) -> Optional["Orders"]:
        text = os.environ.get(ENV)
        return cls(json.loads(text)) if text else None

    def take(self, batches: Any, found: Optional[tuple]) -> None:
        pass

    def before_epoch(self, done: int, record: Any) -> None:
        pass

    def batches(self, batches: Any) -> Any:
        return batches

    def after_epoch(self, epochs: list, record: Any) -> None:
        pass

    def length(self, batches: Any) -> int:
        return len(batches)
