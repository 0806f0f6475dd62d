"""The watch with no line changed: every DataLoader's epoch goes through it, wherever the loop is.

Lightning's `Trainer.fit`, the Hugging Face `Trainer` and accelerate iterate the DataLoader inside the framework.
However each wraps the loader, it starts an epoch with `DataLoader.__iter__`. `patch` wraps `__iter__`, and
`__init__` to note where each loader was made. An object that makes its DataLoader and iterates it itself is
watched at its own `__iter__` (`_holder`), as accelerate's `DataLoaderShard`. The training loader's epoch is
then `wif.watch`'s epoch (`wif.watcher.watch.hooked`); every other loader runs as it is. TraceML patches
`__iter__` the same way. Lightning patches `__init__` for its own bookkeeping, so `__init__` keeps its signature.

It is patched in while torch itself is being imported (wif/watcher/boot/sitecustomize.py), so this module
imports the standard library, wif.watcher.origin and wif.watcher.proof alone (tests/test_layout.py).

`wif-watch -- python train.py ARGS...` (`main`) runs a script with the patch. Its training loader is the first
DataLoader iterated with gradients enabled that takes a step, or `--loader NAME`. WIF_WATCH=print says the
epochs and logs nothing.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any, Dict, Iterator, Optional, Sequence

from wif.watcher import origin, proof

ORIGINAL: Dict[str, Any] = {}  # DataLoader's own __iter__ and __init__
HELD: Dict[type, Any] = {}  # a holder's class (below) -> its own __iter__
ORDERS = "WIF_WATCH_ORDERS"  # wif.watcher.orders.ENV (that module imports torch)
BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")  # the folder put on PYTHONPATH
_said: list = []
PROG = "wif-watch"


def patch(cls: Any) -> None:
    """`cls` (torch's DataLoader) with its epochs watched and its loaders' birthplaces noted; once."""
    if ORIGINAL:
        return
    ORIGINAL["iter"], ORIGINAL["init"] = cls.__iter__, cls.__init__
    proof.note_hooked()

    @functools.wraps(cls.__init__)  # its signature kept: Lightning re-creates loaders from it
    def __init__(self: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
        ORIGINAL["init"](self, dataset, *args, **kwargs)
        origin.note(dataset)
        try:
            _holder(sys._getframe(1).f_locals.get("self"), self)
        except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
            _say_once(f"cannot look at what made this DataLoader ({type(err).__name__}: {err}); its epochs are watched")

    @functools.wraps(cls.__iter__)
    def __iter__(self: Any) -> Any:
        return _epoch(self)

    cls.__init__, cls.__iter__ = __init__, __iter__


def _holder(maker: Any, loader: Any) -> None:
    """Watches the epochs of `maker`'s class where it makes a DataLoader and iterates it in its own `__iter__`.

    The accelerate DataLoaderShard iterates its `base_dataloader` one batch ahead: that epoch ends a step early.
    """
    cls = type(maker)  # not maker.__class__: accelerate's says DataLoader
    if maker is None or maker is loader or isinstance(loader, cls) or cls in HELD:
        return
    own = getattr(cls, "__iter__", None)
    if not inspect.isfunction(own) or hasattr(own, "__wrapped__"):  # none, a C slot, or watched already
        return

    @functools.wraps(own)
    def __iter__(self: Any) -> Any:
        return _epoch(self)

    try:
        cls.__iter__ = __iter__
    except (TypeError, AttributeError):  # a class that cannot be patched: its DataLoader's epochs are watched
        return
    HELD[cls] = own


def _epoch(loader: Any) -> Any:
    """An epoch of `loader` as the watch has it; its own where it is not watched."""
    try:
        from wif.watcher.watch import hooked

        epoch = hooked(loader, _Own(loader))
    except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
        if os.environ.get(ORDERS):  # a measuring run of wif-advise: its failure is the run's, said there
            raise
        _say_once(f"cannot watch this {type(loader).__name__} ({type(err).__name__}: {err}); it runs unwatched")
        epoch = None
    return _Own(loader).own() if epoch is None else epoch


def _say_once(text: str) -> None:
    """The hook's own trouble: one line on stderr, the first time only, never a traceback in the training."""
    if not _said:
        _said.append(text)
        print(f"wif.watch: {text}", file=sys.stderr, flush=True)


def install() -> None:
    """The patch, where torch is imported already (a script forked warm, wif.advisor.script.warm)."""
    from torch.utils.data import DataLoader

    patch(DataLoader)


class _Own:
    """A loader's own epoch, as its class's own __iter__ makes it; the watch finds the loader in it."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.wif_name = type(loader).__name__

    def own(self) -> Iterator[Any]:
        """The epoch as the loader's class makes it, or the nearest held class it derives from."""
        held = next((HELD[c] for c in type(self.loader).__mro__ if c in HELD), None)
        if held is not None:
            return held(self.loader)
        epoch = ORIGINAL["iter"](self.loader)
        proof.note(self.loader, epoch)  # what the epoch really iterates: wif.watcher.proof
        return epoch

    def __iter__(self) -> Iterator[Any]:
        return self.own()

    def __len__(self) -> int:
        return len(self.loader)


def build_parser() -> Any:
    """`wif-watch`'s command line: `--loader`, then the command after `--`."""
    import argparse  # here, not at the top: the patch is imported inside `import torch`

    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [--loader NAME] -- COMMAND [ARGS...]",
        description="Time each epoch of your script's training loader and say whether it waited for data, with "
        "no line of the script changed (Lightning, the HF Trainer, accelerate, your own loop).",
    )
    p.add_argument("--loader", metavar="NAME", help="the training loader by its dataset's class or file:line")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`wif-watch`: the command exec'd with the hook on PYTHONPATH; 2 for a bad command line."""
    import shutil

    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    opts = build_parser().parse_args(args[:cut])
    command = args[cut + 1 :]
    if not command:
        print(f"{PROG}: nothing after `--`: give the command that trains: {PROG} -- python train.py", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:
        print(f"{PROG}: {command[0]}: no such program", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([BOOT, *filter(None, [env.get("PYTHONPATH")])])
    if opts.loader:
        env[origin.NAMED] = opts.loader
    os.execvpe(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
