"""The pick's lines to paste: the `wif-study` line, and the DataLoader arguments for one's own script."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from wif.advisor.settings import Candidate
from wif.config.compose import STUDY_COMMAND
from wif.dataloader_args import BY_NAME


def train_line(overrides: Sequence[str], pick: Candidate) -> str:
    """The `wif-study` line applying the pick, keeping the user's other overrides."""
    mine = set(pick.keys)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in mine]
    return " ".join([STUDY_COMMAND, *kept, *pick.overrides()])


def loader_args(pick: Candidate, pin: bool) -> Dict[str, Any]:
    """The pick's DataLoader keyword arguments, by name: a framework's own fields are made from them."""
    k = pick.keys
    args: Dict[str, Any] = {"num_workers": pick.workers}
    if pick.workers > 0:
        args.update(persistent_workers=pick.persistent, prefetch_factor=pick.prefetch)
    args["pin_memory"] = bool(k.get("loader.pin_memory", pin))
    if k.get("loader.in_order") is False:
        args["in_order"] = False
    if k.get("loader.worker_threads") is not None:  # pasted as a worker_init_fn: wif.dataloader_args
        args["worker_threads"] = k["loader.worker_threads"]
    return args


def dataloader_kwargs(pick: Candidate, pin: bool) -> str:
    """The DataLoader keyword arguments, and the copy's, to paste into one's own script."""
    k = pick.keys
    if k.get("transfer.kind") == "resident":
        return "no DataLoader: the whole dataset moved to the device once, each batch gathered there by index"
    if k.get("engine.name") not in (None, "dataloader"):
        return f"engine={k['engine.name']} (not a DataLoader: {pick.workers} threads of torchdata.nodes)"
    args = {key: value for key, value in loader_args(pick, pin).items() if key != "in_order"}
    pasted = ", ".join(BY_NAME[k].pasted(v) for k, v in args.items())
    line = f"DataLoader(dataset, batch_size=..., shuffle=True, {pasted})"
    if k.get("data.preload"):  # the gain is partly the dataset's: the loader's arguments alone would not give it
        line = "a dataset that holds its decoded images in RAM (wif's data.preload=true), " + line
    return line + ("; copy with .to(device, non_blocking=True)" if pick.copy_hidden else "")
