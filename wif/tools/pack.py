"""`wif-pack`: pack an image source into LMDB or tar shards up front; train from it with data.path.

A run would pack it so into the cache (docs/formats.md). The pack says its progress: a bar, images/s and
bytes written. It is written under a temporary name beside PATH and renamed when complete. So a pack killed
half-way is never found under PATH. Then every record is checked against its index.

    wif-pack data=folder data.root=IMAGES --to lmdb --out PATH
    wif-study data=folder data.format=lmdb data.path=PATH
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from wif.config import ConfigError, DataFormat, DataSource
from wif.config.compose import STUDY_COMMAND, load_config, setup_logging, tool_parser
from wif.config.exits import EXIT_BAD_SETTING, EXIT_INTERRUPTED, EXIT_OK, quick_exit
from wif.data.folder_check import require_readable
from wif.data.formats.store import THROTTLE_ENV, build, check_pack, listing_of

PROG = "wif-pack"
BAR = 30


class _Bar:
    """The pack's progress on stderr: a bar on a terminal, redrawn every 0.1 s, else a line every 10 s."""

    def __init__(self, total: int, tty: bool) -> None:
        self.total, self.tty = total, tty
        self.t0 = self.last = time.perf_counter()
        self.throttle = float(os.environ.get(THROTTLE_ENV, "0") or 0)  # tests: slow each record to kill a pack half-way

    def __call__(self, done: int, written: int) -> None:
        """`done` records and `written` bytes so far, said when it is time to redraw."""
        if self.throttle:
            time.sleep(self.throttle)
        now = time.perf_counter()
        if now - self.last < (0.1 if self.tty else 10.0) and done < self.total:
            return
        self.last = now
        filled = BAR * done // max(self.total, 1)
        text = (
            f"{PROG}: [{'#' * filled}{'.' * (BAR - filled)}] {done}/{self.total} images, "
            f"{done / max(now - self.t0, 1e-9):.0f} images/s, {written / 2**20:.1f} MiB"
        )
        end = "" if self.tty and done < self.total else "\n"
        print(("\r" + text) if self.tty else text, end=end, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """wif-pack's flags beside the study's overrides."""
    parser = tool_parser(
        PROG, "Pack an image source into LMDB or tar shards (data.format), to train from with data.path."
    )
    parser.add_argument("--to", required=True, choices=[DataFormat.lmdb.value, DataFormat.shards.value])
    parser.add_argument("--out", required=True, type=Path, help="the pack's folder (must not exist yet)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """wif-pack: the source checked, packed under --out, and each record checked."""
    quick_exit()
    setup_logging(PROG)
    args = build_parser().parse_intermixed_args(argv)
    out = args.out.expanduser()
    try:
        conf = load_config([*args.overrides, f"data.format={args.to}"], args.config_dir)
        if conf.data.path is not None:
            raise ConfigError("wif-pack makes a pack; leave data.path out (it names a pack to train from).")
        if out.exists():
            raise ConfigError(f"--out {out} exists already; choose a new folder, or delete it to pack again.")
        if conf.data.source is DataSource.folder:
            require_readable(conf.data)  # every file decodes, so every record will
        listing = listing_of(conf.data)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    total = sum(len(p) for p in listing.paths.values())
    t0 = time.perf_counter()
    try:
        pack = build(
            listing,
            fmt=DataFormat(args.to),
            out=out,
            shard_mb=conf.data.shard_mb,
            progress=_Bar(total, sys.stderr.isatty()),
            source=conf.data.source.value,
        )
        seconds = time.perf_counter() - t0
        check_pack(pack, conf.data.cache_dir)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; nothing was written under {out}.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as err:  # a file that changed while it was packed
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    print(
        f"{PROG}: {pack.records} images ({pack.meta['parts']['train']} train, {pack.meta['parts']['test']} test), "
        f"{pack.nbytes / 2**20:.1f} MiB in {out} ({args.to}), {pack.records / seconds:.0f} images/s"
    )
    print(f"Train from it: {STUDY_COMMAND} data={conf.data.source.value} data.format={args.to} data.path={out}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
