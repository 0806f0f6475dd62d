"""An image folder (`data=folder`) checked once, before any run starts.

Without it a file that is not an image stops a run only when a DataLoader worker reaches it, after hours of
training, and a sweep pays that for every job. Here every file is decoded once, the way training decodes it
(`wif.data._read_image`), on a pool of processes forked for the check alone (the supervising process runs
no torch compute). The verdict is cached under the data cache dir, keyed on each file's name, size and
mtime: the next run of the same folder only lists it, and a changed or added file is decoded again alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Sequence, Tuple

from wif.config import ConfigError, DataConfig
from wif.orphans import die_with_parent
from wif.sysinfo import usable_cores

log = logging.getLogger("wif")

CACHE_VERSION = 1
LIST_LIMIT = 20  # unreadable files named in the message; the cache file lists them all
CHUNK = 64  # files per task handed to a checking process
PROGRESS_LOG_S = 10.0  # without a terminal, a progress line this often
PROGRESS_TTY_S = 0.1  # on a terminal, the bar's refresh interval

# torchvision prefixes its decoders' errors with their C++ source: "decode_image, /path/decode_image.cpp:61, "
_SOURCE_LOCATION = re.compile(r"^[\w.]+, \S+\.\w+:\d+, ")

Listing = Dict[str, Tuple[int, int]]  # path relative to the root -> (size, mtime in ns)


@dataclass
class Verdict:
    root: Path
    total: int
    bad: Dict[str, str]  # path relative to the root -> why it cannot be read
    decoded: int  # files decoded by this check (0: the whole verdict came from the cache)
    seconds: float
    cache: Path

    def unreadable_paths(self) -> FrozenSet[str]:
        """The unreadable files as `wif.data.folder_files` spells their paths."""
        return frozenset(str(self.root / rel) for rel in self.bad)

    def message(self) -> str:
        names = sorted(self.bad)
        more = f" and {len(names) - LIST_LIMIT} more" if len(names) > LIST_LIMIT else ""
        return (f"data=folder: {len(names)} of {self.total} image files under {self.root} cannot be read: "
                f"{', '.join(names[:LIST_LIMIT])}{more} (first error: {self.bad[names[0]]}). Remove or replace "
                f"them, or set data.skip_bad=true to train without them (all of them are listed in {self.cache}).")


def check_folder(cfg: DataConfig) -> Verdict:
    """Decode every image file of the folder not already judged at its current size and mtime; raises
    ConfigError for a folder whose layout cannot be used (no train/ or test/, an empty class, ...)."""
    from wif.data import folder_files

    t0 = time.perf_counter()
    files, _ = folder_files(cfg)
    paths: List[str] = list(files["train_paths"]) + list(files["test_paths"])
    root = Path(str(cfg.root)).expanduser()
    prefix = str(root / "x")[:-1]  # "" for the root ".", else the root and a separator, as folder_files joins
    listing: Listing = {}
    for path in paths:
        st = os.stat(path)
        listing[path[len(prefix):]] = (st.st_size, st.st_mtime_ns)
    cache = _cache_file(cfg, root)
    known, known_bad = _read_cache(cache)
    bad = {rel: known_bad[rel] for rel, entry in listing.items() if known.get(rel) == entry and rel in known_bad}
    todo = [rel for rel, entry in listing.items() if known.get(rel) != entry]
    if todo:
        log.info("data=folder: checking %d image files under %s on %d process(es), once: the verdict is cached",
                 len(todo), root, _processes(len(todo)))
        bad.update(_decode_all(todo, prefix, cfg.image_size))
        _write_cache(cache, root, listing, bad)
    verdict = Verdict(root, len(listing), bad, len(todo), time.perf_counter() - t0, cache)
    if todo:
        log.info("data=folder: %d files checked in %.1f s, %d unreadable", len(todo), verdict.seconds, len(bad))
    return verdict


def require_readable(cfg: DataConfig) -> Verdict:
    """The check, with its consequence: unreadable files stop the run (ConfigError) unless data.skip_bad."""
    verdict = check_folder(cfg)
    if verdict.bad and not cfg.skip_bad:
        raise ConfigError(verdict.message())
    if verdict.bad:
        log.warning("data=folder: leaving out %d unreadable image files of %d (data.skip_bad=true)",
                    len(verdict.bad), verdict.total)
    return verdict


def unreadable(cfg: DataConfig) -> FrozenSet[str]:
    """The files a run leaves out with data.skip_bad=true (from the cache the check before the run wrote)."""
    return check_folder(cfg).unreadable_paths()


# ----------------------------------------------------------------------------- the cache
def _cache_file(cfg: DataConfig, root: Path) -> Path:
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(cfg.cache_dir).expanduser() / "folder-check" / f"{key}.json"


def _read_cache(cache: Path) -> Tuple[Dict[str, Tuple[int, int]], Dict[str, str]]:
    try:
        saved = json.loads(cache.read_text())
        if saved.get("version") != CACHE_VERSION:
            return {}, {}
        return {rel: tuple(entry) for rel, entry in saved["files"].items()}, dict(saved["bad"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none yet, or damaged: check again
        return {}, {}


def _write_cache(cache: Path, root: Path, listing: Listing, bad: Dict[str, str]) -> None:
    """Write a temporary file, then rename: a reader never sees half a verdict."""
    body = {"version": CACHE_VERSION, "root": str(root.resolve()), "bad": bad,
            "files": {rel: list(entry) for rel, entry in listing.items()}}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=cache.name + ".", dir=cache.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(body, handle, separators=(",", ":"))
        os.replace(tmp, cache)
    except OSError as err:
        log.warning("data=folder: could not cache the check's verdict in %s (%s); the next run checks again.",
                    cache, err)


# ----------------------------------------------------------------------------- decoding
def _processes(n_files: int) -> int:
    return max(1, min(usable_cores(), -(-n_files // CHUNK)))


def _start_checker() -> None:
    """A checking process: one thread (the pool is the parallelism), ended by the pool's SIGTERM or its
    parent's death, never by the supervisor's own handlers it inherited."""
    import torch

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends the pool
    die_with_parent()
    torch.set_num_threads(1)


def _decode_chunk(task: Tuple[str, Sequence[str], int]) -> Tuple[int, List[Tuple[str, str]]]:
    """Runs in a checking process: (files done, [(relative path, why) for each unreadable one])."""
    from wif.data import _read_image

    prefix, rels, size = task
    bad = []
    for rel in rels:
        try:
            _read_image(Path(prefix + rel), size)
        except ConfigError as err:
            why = " ".join(str(err.__cause__ or err).split())
            bad.append((rel, _SOURCE_LOCATION.sub("", why)))
    return len(rels), bad


def _decode_all(rels: List[str], prefix: str, size: int) -> Dict[str, str]:
    tasks = [(prefix, rels[i:i + CHUNK], size) for i in range(0, len(rels), CHUNK)]
    bad: Dict[str, str] = {}
    progress = _Progress(len(rels))
    # fork: the checking processes start at once and need nothing re-imported; they end with the check
    with mp.get_context("fork").Pool(_processes(len(rels)), initializer=_start_checker) as pool:
        for done, found in pool.imap_unordered(_decode_chunk, tasks):
            bad.update(found)
            progress.advance(done)
        pool.close()
        pool.join()
    progress.close()
    return bad


class _Progress:
    """A progress bar on a terminal (stderr); elsewhere (a log file, CI) a line every PROGRESS_LOG_S."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.shown = self.t0

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.shown < (PROGRESS_TTY_S if self.tty else PROGRESS_LOG_S):
            return
        self.shown = now
        if self.tty:
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(f"\r  checking images [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total}  {self.done / (now - self.t0):.0f} files/s")
            sys.stderr.flush()
        else:
            log.info("data=folder: checked %d of %d files", self.done, self.total)

    def close(self) -> None:
        if self.tty and self.shown > self.t0:
            sys.stderr.write("\n")
            sys.stderr.flush()
