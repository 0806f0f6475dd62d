"""What every pack shares: its folder, `pack.json` and the index.

`pack.json` holds the format, the record count, each file's size and the sha256 of `index.json`. Opening a
pack checks them (`open_pack`). A pack that fails a check stops the run with one line naming the pack and
the record or file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from wif.config import ConfigError
from wif.data.formats.source import PARTS

PACK_VERSION = 1
Progress = Callable[[int, int], None]  # (records written, bytes written)


class PackError(ConfigError):
    """A pack that cannot be used: truncated, corrupt, or a record that does not decode."""


@dataclass
class Pack:
    """A pack as opened: its folder, `pack.json` and index."""

    path: Path
    meta: Dict[str, Any]
    index: Dict[str, Dict[str, List[int]]]  # part -> labels, lengths, crc32 (and shard: the shard's number)

    @property
    def format(self) -> str:
        return self.meta["format"]

    @property
    def records(self) -> int:
        return int(self.meta["records"])

    @property
    def nbytes(self) -> int:
        return sum(self.meta["files"].values())

    def files(self) -> List[str]:
        """The data files (what a cold page cache evicts)."""
        return [str(self.path / name) for name in self.meta["files"]]

    def fail(self, what: str) -> PackError:
        """The error that names this pack and `what` is wrong with it."""
        return PackError(
            f"pack {self.path}: {what}. Delete it (a pack in the cache is then rebuilt) or make it again with wif-pack."
        )


def crc(data: bytes) -> int:
    """The crc32 the index keeps of a record."""
    return zlib.crc32(data) & 0xFFFFFFFF


def record_key(part: str, i: int) -> str:
    """Record i of a part, as packs and messages name it."""
    return f"{part}/{i:08d}"


def new_index() -> Dict[str, Dict[str, List[int]]]:
    """An empty index, for a writer to fill."""
    return {part: {"labels": [], "lengths": [], "crc32": [], "shard": []} for part in PARTS}


def remove_stale(out: Path) -> None:
    """Temporary folders of packs whose writer died (killed half-way): never used, removed here."""
    for tmp in out.parent.glob(out.name + ".tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(tmp, ignore_errors=True)


def finish(tmp: Path, out: Path, fmt: str, index: Dict[str, Any], files: List[str], extra: Dict[str, Any]) -> None:
    """Write index.json and pack.json into `tmp`, flush to disk, then rename `tmp` to `out`: a named pack is whole.

    Args:
        tmp: the temporary folder the writer filled.
        out: the pack's final folder.
        fmt: the pack's format.
        index: the records' index.
        files: the data files in `tmp`.
        extra: more for pack.json: the classes, the source and the packing settings.
    """
    raw = json.dumps(index).encode()
    (tmp / "index.json").write_bytes(raw)
    sizes = {name: (tmp / name).stat().st_size for name in files}
    meta = {
        "format": fmt,
        "version": PACK_VERSION,
        "records": sum(len(index[p]["labels"]) for p in PARTS),
        "parts": {p: len(index[p]["labels"]) for p in PARTS},
        "files": sizes,
        "index_sha256": hashlib.sha256(raw).hexdigest(),
        **extra,
    }
    (tmp / "pack.json").write_text(json.dumps(meta, indent=1))
    for name in [*files, "index.json", "pack.json"]:
        fd = os.open(tmp / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        os.rename(tmp, out)
    except OSError:  # another process finished the same pack first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)


def open_pack(path: Path, fmt: Optional[str] = None) -> Pack:
    """A pack's metadata and index, checked: files at their sizes, the index at its checksum and record count."""
    probe = Pack(path, {}, {})
    try:
        meta = json.loads((path / "pack.json").read_text())
        raw = (path / "index.json").read_bytes()
    except (OSError, ValueError) as err:
        raise probe.fail(f"cannot read pack.json or index.json ({err})") from None
    probe.meta = meta
    if fmt is not None and meta.get("format") != fmt:
        raise PackError(
            f"pack {path} is a {meta.get('format')} pack, but data.format={fmt}. Set data.format={meta.get('format')}."
        )
    if hashlib.sha256(raw).hexdigest() != meta.get("index_sha256"):
        raise probe.fail("index.json does not match the checksum in pack.json (corrupt index)")
    for name, size in meta["files"].items():  # shorter: truncated (reading it could crash); longer: see same_size
        actual = (path / name).stat().st_size if (path / name).exists() else -1
        if actual < size:
            raise probe.fail(
                f"{name} is {actual} bytes, pack.json says {size} (truncated)" if actual >= 0 else f"{name} is missing"
            )
    index = json.loads(raw)
    if sum(len(index[p]["labels"]) for p in PARTS) != meta["records"]:
        raise probe.fail(
            f"the index lists {sum(len(index[p]['labels']) for p in PARTS)} records, pack.json says {meta['records']}"
        )
    return Pack(path, meta, index)


def same_size(pack: Pack) -> None:
    """Every file at exactly its recorded size: after the records checked, a longer file was altered."""
    for name, size in pack.meta["files"].items():
        actual = (pack.path / name).stat().st_size
        if actual != size:
            raise pack.fail(f"{name} is {actual} bytes, pack.json says {size} (altered since it was made)")


def check_record(
    pack: Pack, part: str, i: int, data: Optional[bytes], label: Optional[int], decode_all: bool = False
) -> None:
    """Check one record against its index entry: present, at its length and crc32, with its label.

    Args:
        pack: the pack.
        part: the record's part.
        i: the record's index in its part.
        data: its bytes as stored; None: missing.
        label: its label as stored; None: not stored with it.
        decode_all: decode it as an image too.
    """
    entry = pack.index[part]
    key = record_key(part, i)
    if data is None:
        raise pack.fail(f"record {key} is missing")
    if len(data) != entry["lengths"][i]:
        raise pack.fail(f"record {key} is {len(data)} bytes, its index says {entry['lengths'][i]} (truncated)")
    if crc(data) != entry["crc32"][i]:
        raise pack.fail(f"record {key} does not match its crc32 (corrupt)")
    if label is not None and label != entry["labels"][i]:
        raise pack.fail(f"record {key} has label {label}, its index says {entry['labels'][i]}")
    if decode_all:
        decode(str(pack.path), key, data, size=None)


def decode(pack_path: str, key: str, data: bytes, size: Optional[int]):
    """A record's bytes as uint8 RGB at size x size, as read_image reads a file; PackError where it does not decode.

    Args:
        pack_path: the pack, for the message.
        key: the record's key, for the message.
        data: its bytes.
        size: the size to resize to; None: its own.
    """
    import torch
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import resize

    try:
        img = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError) as err:
        raise PackError(
            f"pack {pack_path}: record {key} does not decode as an image ({err}). Delete the pack (the "
            "cache rebuilds it) or make it again with wif-pack."
        ) from None
    return img if size is None else resize(img, [size, size], antialias=True)
