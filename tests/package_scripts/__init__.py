"""Drivers of code that packages ship, run unchanged by `wif-advise -- python -m tests.package_scripts.NAME`.

Each driver is a few lines around a package's own classes (tests/test_package_scripts.py says which). The one
thing each adds is a wait on every item of the package's generated data: a read from a network disk, so that
the loader's settings matter. The package's code is imported from the installed package, never copied here.
"""

from __future__ import annotations

import argparse
import time


class SlowReads:
    """Mixed in before a package's Dataset class: each item is read after `read_s` seconds, then as it was."""

    read_s = 0.004

    def __getitem__(self, index: int):
        time.sleep(self.read_s)
        return super().__getitem__(index)


def options(doc: str) -> argparse.Namespace:
    """The drivers' command line: epochs, items, batch size, the wait an item and the folder."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--n-train", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--read-ms", type=float, default=4.0, help="each item waits this long, as a read would")
    p.add_argument("--data", default="", help="the image folder, where the driver reads one")
    return p.parse_args()
