"""Whether the training took a step: a backward pass or an optimizer step, seen while the watch asks.

The hook claims a loader at its first epoch with gradients on, and the claim stands once a step is seen in
that epoch (wif.watcher.session, NOTE [ The watch's states ]). An evaluation iterated with gradients on, as
the HF Trainer's is, takes none. The signal is global: `torch.autograd.backward`, which `Tensor.backward`
calls, wrapped, and torch's global optimizer step hook. Both are armed only until a claim is proven, so a
proven training pays nothing per step.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

_seen = [0]  # backward passes and optimizer steps while armed
_undo: List[Callable[[], None]] = []


def count() -> int:
    """The steps seen so far while armed."""
    return _seen[0]


def _stepped(*_: Any) -> None:
    _seen[0] += 1


def arm() -> None:
    """The steps counted from now on; once."""
    if _undo:
        return
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        _seen[0] += 1
        return original(*args, **kwargs)

    torch.autograd.backward = backward
    handle = register_optimizer_step_post_hook(_stepped)

    def undo() -> None:
        handle.remove()
        if torch.autograd.backward is backward:  # another wrapper over ours stays, and ours counts on unseen
            torch.autograd.backward = original

    _undo.append(undo)


def disarm() -> None:
    """No more counting: the claim is settled."""
    while _undo:
        _undo.pop()()
