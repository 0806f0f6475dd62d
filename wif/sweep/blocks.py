"""The sweep's blocks: one repeat of every cell, run in an order shuffled per block.

With repeat listed first in `hydra.sweeper.params`, Hydra's expansion makes each repeat one block: a pass
over every cell. A fixed order would put the same cell first in every block, after the same neighbour.
Warm caches, thermal state or a neighbour's leftover workers would then bias it the same way every block.
Shuffling within blocks turns that bias into noise the model averages out, as Google Benchmark's random
interleaving does. The seed comes from the block. So a resumed sweep replays the same order, and its blocks
stay complete.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Sequence

BLOCK_KEY = "repeat"


def block_of(job: Sequence[str]) -> str:
    """The job's block: the value of its `repeat=` override ('' for a sweep that does not vary it)."""
    for override in job:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == BLOCK_KEY:
            return value
    return ""


def shuffle_within_blocks(jobs: Sequence[Sequence[str]]) -> List[List[str]]:
    """Blocks in their order of first appearance, the jobs of each in an order seeded by the block."""
    blocks: Dict[str, List[List[str]]] = {}
    for job in jobs:
        blocks.setdefault(block_of(job), []).append(list(job))
    ordered: List[List[str]] = []
    for block, members in blocks.items():
        random.Random(f"wif-block-{block}").shuffle(members)  # str seeds hash the same in every process
        ordered += members
    return ordered


def blocks_line(jobs: Sequence[Any]) -> str:
    """'2 of 4 blocks complete, block 2: 5 of 33 jobs': how far a list of jobs, done or run, gets."""
    per: Dict[int, List[Any]] = {}
    for job in jobs:
        per.setdefault(job.block, []).append(job)
    complete = [b for b, js in sorted(per.items()) if all(j.done for j in js)]
    partial = [
        (b, sum(j.done for j in js), len(js))
        for b, js in sorted(per.items())
        if b not in complete and any(j.done for j in js)
    ]
    out = [f"{len(complete)} of {len(per)} blocks complete"]
    out += [f"block {b}: {n} of {m} jobs" for b, n, m in partial]
    return ", ".join(out)
