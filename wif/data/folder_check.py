"""An image folder (`data=folder`) checked once, before any run starts.

Without it, a bad file stops a run only when a worker reaches it, maybe hours in, in every job of a sweep.
Here a pool of processes forked for the check decodes every file as training does (`wif.data.folder.read_image`).
The verdict is cached by each file's name, size and mtime, so a later run decodes only what changed.
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
from typing import Any, Dict, FrozenSet, List, Sequence, Tuple

from wif.config import ConfigError, DataConfig
from wif.data.folder import folder_files, read_image
from wif.measure.lifetime import die_with_parent
from wif.measure.sysinfo import usable_cores

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
    """What the check found: the folder's unreadable files, and what it cost."""

    root: Path
    total: int
    bad: Dict[str, str]  # path relative to the root -> why it cannot be read
    decoded: int  # files decoded by this check (0: the whole verdict came from the cache)
    seconds: float
    cache: Path

    def message(self) -> str:
        """The error a run stops with: the unreadable files, and what to do."""
        names = sorted(self.bad)
        more = f" and {len(names) - LIST_LIMIT} more" if len(names) > LIST_LIMIT else ""
        return (
            f"data=folder: {len(names)} of {self.total} image files under {self.root} cannot be read: "
            f"{', '.join(names[:LIST_LIMIT])}{more} (first error: {self.bad[names[0]]}). Remove or replace "
            f"them, or set data.skip_bad=true to train without them (all of them are listed in {self.cache})."
        )


def check_folder(cfg: DataConfig) -> Verdict:
    """Decode every image file not judged at its size and mtime; ConfigError for a layout that cannot be used."""
    t0 = time.perf_counter()
    files, _ = folder_files(cfg)
    paths: List[str] = list(files["train_paths"]) + list(files["test_paths"])
    root = Path(str(cfg.root)).expanduser()
    prefix = str(root / "x")[:-1]  # "" for the root ".", else the root and a separator, as folder_files joins
    listing = _stat_files(paths, prefix)
    cache = _cache_file(cfg, root)
    stamp = _fingerprint(listing)
    bad = _read_json(cache).get(stamp)  # the whole folder as it was last checked: nothing to decode
    todo: List[str] = []
    if bad is None:
        bad, todo = _judge_changes(listing, cache)
        if todo:
            log.info(
                f"data=folder: checking {len(todo)} image file(s) under {root} on {_processes(len(todo))} "
                "process(es), once: the verdict is cached"
            )
            bad.update(_decode_all(todo, prefix, cfg.image_size))
        _write_json(_entries_file(cache), {rel: [*entry, bad.get(rel)] for rel, entry in listing.items()})
        _write_json(cache, {stamp: bad})
    verdict = Verdict(
        root=root, total=len(listing), bad=bad, decoded=len(todo), seconds=time.perf_counter() - t0, cache=cache
    )
    if todo:
        log.info(
            "data=folder: checked in %.1f s; %d of %d files cannot be read", verdict.seconds, len(bad), verdict.total
        )
    return verdict


def _stat_files(paths: List[str], prefix: str) -> Listing:
    """Each file's size and mtime, by its path relative to the root."""
    listing: Listing = {}
    for path in paths:
        try:
            st = os.stat(path)
            listing[path[len(prefix) :]] = (st.st_size, st.st_mtime_ns)
        except OSError:  # a dangling link, or gone since it was listed: never cached, its decode says why
            listing[path[len(prefix) :]] = (-1, time.time_ns())
    return listing


def _judge_changes(listing: Listing, cache: Path) -> Tuple[Dict[str, str], List[str]]:
    """(the unreadable files the last check judged, unchanged since; the files to decode again)."""
    known = _read_json(_entries_file(cache))  # file -> [size, mtime, why or None] of the last check
    bad = {
        rel: known[rel][2]
        for rel, entry in listing.items()
        if known.get(rel, [])[:2] == list(entry) and known[rel][2] is not None
    }
    todo = [rel for rel, entry in listing.items() if known.get(rel, [])[:2] != list(entry)]
    return bad, todo


def require_readable(cfg: DataConfig) -> Verdict:
    """The check, with its consequence: unreadable files stop the run (ConfigError) unless data.skip_bad."""
    verdict = check_folder(cfg)
    if verdict.bad and not cfg.skip_bad:
        raise ConfigError(verdict.message())
    if verdict.bad:
        log.warning(
            "data=folder: leaving out %d unreadable image files of %d (data.skip_bad=true)",
            len(verdict.bad),
            verdict.total,
        )
    return verdict


def unreadable(cfg: DataConfig) -> FrozenSet[str]:
    """The files a run leaves out with data.skip_bad=true, from the check's cache, as `folder_files` spells them."""
    verdict = check_folder(cfg)
    return frozenset(str(verdict.root / rel) for rel in verdict.bad)


# NOTE [ Two cache files per folder ]
# The verdict is keyed on a digest of the whole listing: the next run of an unchanged folder reads a few bytes.
# Every file's size, mtime and verdict are kept beside it: a changed folder decodes the changes alone.


def _cache_file(cfg: DataConfig, root: Path) -> Path:
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(cfg.cache_dir).expanduser() / "folder-check" / f"{key}.json"


def _entries_file(cache: Path) -> Path:
    return cache.with_suffix(".files.json")


def _fingerprint(listing: Listing) -> str:
    text = "\n".join(f"{rel}\t{size}\t{mtime}" for rel, (size, mtime) in listing.items())
    return hashlib.sha256(f"{CACHE_VERSION}\n{text}".encode()).hexdigest()


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        saved = json.loads(path.read_text())
        return saved if isinstance(saved, dict) and saved.pop("version", None) == CACHE_VERSION else {}
    except (OSError, ValueError):  # none yet, or damaged: check again
        return {}


def _write_json(path: Path, body: Dict[str, Any]) -> None:
    """Write a temporary file, then rename: a reader never sees half a verdict."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump({"version": CACHE_VERSION, **body}, handle, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as err:
        log.warning(
            "data=folder: could not cache the check's verdict in %s (%s); the next run checks again.", path, err
        )


def _processes(n_files: int) -> int:
    return max(1, min(usable_cores(), -(-n_files // CHUNK)))


def _start_checker() -> None:
    """A checking process of one thread, ended by the pool's SIGTERM or its parent's death, not inherited handlers."""
    import torch

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends the pool
    die_with_parent()
    torch.set_num_threads(1)


def _decode_chunk(task: Tuple[str, Sequence[str], int]) -> Tuple[int, List[Tuple[str, str]]]:
    """Decode a chunk of files in a checking process; returns the files done and each unreadable one's why."""
    prefix, rels, size = task
    bad = []
    for rel in rels:
        try:
            read_image(Path(prefix + rel), size)
        except ConfigError as err:
            why = " ".join(str(err.__cause__ or err).split())
            bad.append((rel, _SOURCE_LOCATION.sub("", why)))
    return len(rels), bad


def _decode_all(rels: List[str], prefix: str, size: int) -> Dict[str, str]:
    import torchvision.io  # noqa: F401 - imported once here, not again in every checking process

    tasks = [(prefix, rels[i : i + CHUNK], size) for i in range(0, len(rels), CHUNK)]
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
        """Count `n` more files done; show the progress when it is time."""
        self.done += n
        now = time.monotonic()
        if now - self.shown < (PROGRESS_TTY_S if self.tty else PROGRESS_LOG_S):
            return
        self.shown = now
        if self.tty:
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(
                f"\r  checking images [{'#' * filled}{'.' * (width - filled)}] "
                f"{self.done}/{self.total}  {self.done / (now - self.t0):.0f} files/s"
            )
            sys.stderr.flush()
        else:
            log.info("data=folder: checked %d of %d files", self.done, self.total)

    def close(self) -> None:
        """End the bar's line on a terminal."""
        if self.tty and self.shown > self.t0:
            sys.stderr.write("\n")
            sys.stderr.flush()
