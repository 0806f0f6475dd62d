"""data.format=shards: tar shards in WebDataset's layout, read in sequence with plain `tarfile`.

`<key>.<ext>` holds an image's bytes and `<key>.cls` its label, about data.shard_mb MiB a shard (docs/formats.md).
Each shard mixes the classes. An epoch shuffles the shards, deals them to the workers and shuffles the samples
through a buffer, yielding every image of its split once.
"""

from __future__ import annotations

import os
import random
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from wif.config import Augment
from wif.data.datasets import Split, make_transform
from wif.data.formats.pack import Pack, PackError, Progress, check_record, crc, decode, new_index
from wif.data.formats.source import PARTS, Listing

ORDER_SEED = 0  # the packing order: a setting of the pack, the same for every run
MiB = 1024 * 1024


def shard_name(part: str, k: int) -> str:
    """Shard k of a part's file name."""
    return f"{part}-{k:06d}.tar"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add `data` to `tar` as a file named `name`, with fixed metadata."""
    import io

    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def write(tmp: Path, listing: Listing, shard_mb: float, progress: Progress) -> Tuple[dict, List[str]]:
    """Each part's images into shards of about `shard_mb` MiB; returns the index and the shard files.

    Args:
        tmp: the pack's temporary folder.
        listing: the source's files and labels.
        shard_mb: a shard's size in MiB.
        progress: takes the records and bytes written.
    """
    index, files, done, written = new_index(), [], 0, 0
    for part in PARTS:
        n = len(listing.paths[part])
        entry = index[part]
        for key in ("shard", "labels", "lengths", "crc32"):
            entry[key] = [0] * n
        order = np.random.default_rng(ORDER_SEED).permutation(n)
        k, tar, size = 0, None, 0
        for i in order.tolist():
            if tar is None or size >= shard_mb * MiB:
                if tar is not None:
                    tar.close()
                    k += 1
                files.append(shard_name(part, k))
                tar, size = tarfile.open(tmp / files[-1], "w", format=tarfile.USTAR_FORMAT), 0
            path, label = listing.paths[part][i], int(listing.labels[part][i])
            data = Path(path).read_bytes()
            ext = os.path.splitext(path)[1].lstrip(".").lower() or "jpg"
            _add(tar, f"{i:08d}.{ext}", data)
            _add(tar, f"{i:08d}.cls", str(label).encode())
            entry["shard"][i], entry["labels"][i] = k, label
            entry["lengths"][i], entry["crc32"][i] = len(data), crc(data)
            size += len(data)
            done, written = done + 1, written + len(data)
            progress(done, written)
        if tar is not None:
            tar.close()
    return index, files


def read_shard(path: str, wanted: Optional[AbstractSet[int]] = None) -> Iterator[Tuple[int, bytes, Optional[int]]]:
    """(index, image bytes, label) of each sample of a shard, or those in `wanted`, in order; others skipped."""
    samples: Dict[int, Dict[str, bytes]] = {}
    with tarfile.open(path, "r:") as tar:
        for member in tar:
            if not member.isfile():
                continue
            key, _, ext = member.name.partition(".")
            if wanted is not None and int(key) not in wanted:
                continue
            data = tar.extractfile(member).read()
            sample = samples.setdefault(int(key), {})
            sample["cls" if ext == "cls" else "image"] = data
            if "cls" in sample and "image" in sample:
                del samples[int(key)]
                yield int(key), sample["image"], int(sample["cls"])
    for key, sample in samples.items():  # a sample missing its image or label
        yield key, sample.get("image", b""), int(sample["cls"]) if "cls" in sample else None


def verify(pack: Pack, decode_all: bool = False) -> None:
    """Every shard readable to its end, holding exactly its records, each at its length, crc32 and label."""
    for part in PARTS:
        entry = pack.index[part]
        expected: Dict[int, List[int]] = {}
        for i, k in enumerate(entry["shard"]):
            expected.setdefault(k, []).append(i)
        for k, wanted in sorted(expected.items()):
            name, seen = shard_name(part, k), set()
            try:
                for i, data, label in read_shard(str(pack.path / name)):
                    if i >= len(entry["shard"]) or entry["shard"][i] != k:
                        raise pack.fail(f"shard {name} holds record {part}/{i:08d}, which its index puts elsewhere")
                    check_record(pack, part, i, data=data, label=label, decode_all=decode_all)
                    seen.add(i)
            except PackError:
                raise
            except (tarfile.TarError, EOFError, OSError, ValueError) as err:
                raise pack.fail(f"shard {name} cannot be read to its end ({type(err).__name__}: {err})") from None
            missing = sorted(set(wanted) - seen)
            if missing:
                raise pack.fail(f"record {part}/{missing[0]:08d} is missing from shard {name}")


@dataclass(frozen=True)
class ShardPart:
    """Where a split's images lie in a shard pack: the pack, its part, the shards that hold them, their indices."""

    pack_path: str
    part: str  # "train" or "test"
    shards: List[int]  # the shards holding at least one of `indices`
    indices: np.ndarray
    labels: torch.Tensor  # every label of the part, by index


class ShardSplit(IterableDataset):
    """One split of a part read from its shards: each image once an epoch, shuffled for training, raw when `encoded`."""

    encoded = False

    def __init__(
        self, where: ShardPart, transform: Callable, size: Optional[int], native: bool, shuffle: bool, buffer: int
    ) -> None:
        """Read the images `where` says.

        Args:
            where: the pack, part, shards and indices to read.
            transform: the split's per-sample steps after decoding.
            size: the size images are resized to on decoding; None: their own.
            native: images at their own size, for `materialize`.
            shuffle: shuffle shards and samples: the training split.
            buffer: the shuffle buffer's samples.
        """
        self.pack_path, self.part, self.shards, self.native = where.pack_path, where.part, where.shards, native
        self.wanted = frozenset(int(i) for i in where.indices)
        self.labels, self.transform, self.size = where.labels, transform, size
        self.shuffle, self.buffer = shuffle, buffer
        # several ranks (torchrun's RANK and WORLD_SIZE): each reads its own shards, the workers split those
        self.rank, self.world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    def __len__(self) -> int:
        return len(self.wanted)

    def materialize(self, size: int) -> Split:
        """Every image decoded once, without augmentation, in index order: for holding the set on the device."""
        plain = make_transform(Augment.none, size, train=False, native=self.native)
        found: Dict[int, torch.Tensor] = {}
        for k in self.shards:
            for i, data, _ in read_shard(os.path.join(self.pack_path, shard_name(self.part, k)), self.wanted):
                found[i] = plain(decode(self.pack_path, f"{self.part}/{i:08d}", data, size=self.size))
        order = sorted(found)
        return Split(torch.stack([found[i] for i in order]), self.labels[torch.tensor(order)])

    def _plan(self) -> Tuple[List[int], random.Random]:
        """This worker's shards for this epoch: every n-th of one shared order, and its random source."""
        info = get_worker_info()
        if info is None:
            base, wid, n = int(torch.randint(0, 2**62, (1,)).item()), 0, 1
        else:
            base, wid, n = info.seed - info.id, info.id, info.num_workers
        shards = list(self.shards)
        if self.shuffle:
            random.Random(base).shuffle(shards)
        slot, slots = self.rank * n + wid, self.world * n
        return shards[slot::slots], random.Random(base + 1 + slot)

    def __iter__(self):
        mine, rng = self._plan()
        buf: List[Tuple[int, bytes]] = []
        for k in mine:
            for i, data, _ in read_shard(os.path.join(self.pack_path, shard_name(self.part, k)), self.wanted):
                if not self.shuffle:
                    yield self._sample(i, data)
                    continue
                buf.append((i, data))
                if len(buf) >= self.buffer:
                    j = rng.randrange(len(buf))
                    buf[j], buf[-1] = buf[-1], buf[j]
                    yield self._sample(*buf.pop())
        rng.shuffle(buf)
        for item in buf:
            yield self._sample(*item)

    def _sample(self, i: int, data: bytes):
        """Sample i as the split hands it out: decoded and transformed, or its bytes as stored."""
        if self.encoded:
            return torch.frombuffer(bytearray(data), dtype=torch.uint8), self.labels[i]
        image = decode(self.pack_path, f"{self.part}/{i:08d}", data, size=self.size)
        return self.transform(image), self.labels[i]
