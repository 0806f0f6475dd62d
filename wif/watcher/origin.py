"""Where a DataLoader was made, which framework iterates it, and the command line that ran it (secrets hidden).

Standard library only: `note` runs inside DataLoader.__init__ as patched by wif.watcher.hook, which is imported
while torch itself is.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Dict, List, Optional

MADE_AT: Dict[int, str] = {}  # id() of a dataset -> where its first DataLoader was made
NAMED = "WIF_WATCH_LOADER"  # the training loader named (wif-watch and wif-advise --loader): is_named
LIBRARIES = ("torch", "wif", "lightning", "pytorch_lightning", "lightning_fabric", "transformers", "accelerate")
PRELOADED = (
    "lightning.pytorch",
    "pytorch_lightning",
    "transformers.trainer",
    "accelerate",
    "timm",
)  # a warm start imports
THREADED = ("cv2",)  # a library that starts a thread a core in each worker, unless limited: OpenCV
FRAMEWORKS = (("transformers", "transformers"), ("lightning", "lightning"), ("pytorch_lightning", "lightning"))


def note(dataset: Any) -> None:
    """Notes where a DataLoader over `dataset` is made, the first over it: a framework's copy keeps the user's line."""
    if id(dataset) not in MADE_AT:
        MADE_AT[id(dataset)] = _site()


def made_at(dataset: Any) -> Optional[str]:
    """Where the first DataLoader over `dataset` was made ("file:line in function"), where the patch saw it."""
    return MADE_AT.get(id(dataset))


def _module(frame: Any) -> str:
    """The name of the module the frame runs in."""
    return str(frame.f_globals.get("__name__", ""))


def _site() -> str:
    """The first frame outside torch, wif and the frameworks; the framework's function beside it."""
    frame, inner = sys._getframe(3), None
    while frame is not None:
        top = _module(frame).split(".")[0]
        if top not in LIBRARIES and not frame.f_code.co_filename.startswith("<frozen"):
            break
        if inner is None and top == "transformers":  # the HF Trainer makes the loader itself
            inner = frame
        frame = frame.f_back
    here = _where(frame) if frame is not None else "?"
    return f"{here}, by {_module(inner)}.{inner.f_code.co_name}" if inner is not None else here


def _where(frame: Any) -> str:
    """The frame as "file:line in function", the file relative where it is below the working directory."""
    path = frame.f_code.co_filename
    try:
        near = os.path.relpath(path)
        path = path if near.startswith("..") else near
    except ValueError:  # another drive
        pass
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"


def framework() -> str:
    """Which framework's loop starts this epoch, by the stack: "transformers" (the HF Trainer), "lightning" or ""."""
    names = set()
    frame = sys._getframe(1)
    while frame is not None:
        names.add(_module(frame).split(".")[0])
        frame = frame.f_back
    return next((name for top, name in FRAMEWORKS if top in names), "")


def of(loader: Any) -> Dict[str, Any]:
    """The probe's report: the loader's dataset class, where it was made, the framework that iterates it, and
    the threaded libraries the script imported."""
    out: Dict[str, Any] = {"dataset": type(loader.dataset).__name__, "framework": framework()}
    out["modules"] = [name for name in PRELOADED if name in sys.modules]  # what a warm start may import first
    out["threaded"] = [name for name in THREADED if name in sys.modules]  # limiting their threads is a candidate
    made = made_at(loader.dataset)
    return {**out, "made_at": made} if made else out


def is_named(named: str, loader: Any) -> bool:
    """Whether `named` (WIF_WATCH_LOADER, --loader), a dataset's class or a place ("train.py:42"), is this loader."""
    return named == type(loader.dataset).__name__ or named in (made_at(loader.dataset) or "")


SECRET = re.compile(r"(token(?!izer)|secret|password|passwd|api[-_]?key|access[-_]?key|credential)", re.IGNORECASE)


def redacted(argv: List[str]) -> List[str]:
    """The command line as the run's tag, with the value of any option whose name says it is a secret hidden.

    For example `--hf-token abc`, `--api_key=abc` and `WANDB_API_KEY=abc`.
    """
    out: List[str] = []
    for i, arg in enumerate(argv):
        name, eq, _ = arg.partition("=")
        if eq and SECRET.search(name):
            out.append(f"{name}=***")
        elif i > 0 and argv[i - 1].startswith("-") and "=" not in argv[i - 1] and SECRET.search(argv[i - 1]):
            out.append("***")
        else:
            out.append(arg)
    return out
