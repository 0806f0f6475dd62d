"""What a job is: its identity, which resume matches on, and its cell, which the report compares.

Pure: reads a typed config, imports nothing beyond `wif.config`, `wif.dataloader_args` and `wif.measure.names`.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from wif.config import Config, DataSource, EngineName, TransferKind, as_plain
from wif.dataloader_args import ARGS, DataLoaderArg
from wif.measure.names import Cell

# Keys that do not change what a run measures: left out of the identity that resume matches on.
NOT_IDENTITY = ("tracking", "resume", "progress", "measure", "sweep", "race")
# NOTE [ Keys added after the first studies ]
# The user's own model, data and step; storage formats; decoding on the device; uint8 transfers. At their
# defaults they are left out of the identity, so that runs from before these keys existed still resume.
NEW_KEY_DEFAULTS = {
    "model": {"arch": None, "weights": None, "_target_": None, "kwargs": {}},
    "data": {
        "_target_": None,
        "kwargs": {},
        "format": None,
        "path": None,
        "shard_mb": 64.0,
        "shuffle_buffer": 1000,
        "page_cache": "warm",
        "decode": "host",
        "decode_backend": "auto",
        "val_images": None,
        "test_images": None,
    },
    "trainer": {
        "precision": "fp32",
        "channels_last": False,
        "compile": False,
        "optimizer": {"_target_": "torch.optim.SGD", "kwargs": {}},
        "nproc": 1,
        "dist_timeout_s": 300.0,
        "threads": None,
    },
    "transfer": {"uint8": False},
}


def run_identity(conf: Config, device: str) -> dict:
    """What makes two runs the same job, whose hash resume matches: the config on its device, less how it is run."""
    identity = {k: v for k, v in as_plain(conf).items() if k not in NOT_IDENTITY}
    identity["data"] = {
        k: v for k, v in identity["data"].items() if k != "cache_dir" and not (k == "skip_bad" and not v)
    }  # runs before skip_bad keep theirs
    for group, keys in NEW_KEY_DEFAULTS.items():  # See NOTE [ Keys added after the first studies ]
        identity[group] = {k: v for k, v in identity[group].items() if not (k in keys and v == keys[k])}
    identity["device"] = device
    if conf.engine.name is EngineName.dataloader:  # runs from before engines existed resume as the same jobs
        identity.pop("engine")
    return identity


# NOTE [ What sets a cell apart ]
# A cell is the loader option, then each knob set away from PyTorch's defaults, then the fraction. The
# engine when not DataLoader, data.format and a cold page cache get cells of their own (docs/formats.md).
# A data-parallel run (wif.run.ddp) is never pooled with a one-process one. The model's CPU threads, the
# stream prefetcher and uint8 batches are set by hand: no loader option sets them. Decoding on the device
# is never pooled with the host's decode. data=fixed runs, the report's upper bound, get a cell of their
# own, so grouping by cell never pools them with a loader option.


def cell_of(conf: Config) -> Cell:
    """The job's cell: what the report compares across repeats. See NOTE [ What sets a cell apart ]."""
    if conf.data.source is DataSource.fixed:
        return Cell.of("fixed", conf.data.fraction)
    knobs = [knob for is_set, knob in _loader_knobs(conf) + _run_knobs(conf) if is_set]
    return Cell.of("+".join([conf.loader.name, *knobs]), conf.data.fraction)


def cell_name(conf: Config) -> str:
    """The job's cell as its tag writes it: "setting@fraction", e.g. `pin_nb+uint8@0.1`."""
    return str(cell_of(conf))


def _loader_knobs(conf: Config) -> List[Tuple[bool, str]]:
    """(whether set, knob) for the loader's own knobs and the engine, in the cell's order."""
    lo = conf.loader
    marked = [arg for arg in ARGS if arg.label]  # persistent, out_of_order, the start method: wif.dataloader_args
    knobs = [(getattr(lo, arg.name) != arg.default, _label(arg, getattr(lo, arg.name))) for arg in marked]
    return knobs + [(conf.engine.name is not EngineName.dataloader, conf.engine.name.value)]


def _label(arg: DataLoaderArg, value: Any) -> str:
    """`arg`'s mark in a cell's name, at `value`: the start method's own name, as `spawn`."""
    return arg.label.format(getattr(value, "value", value))


def _run_knobs(conf: Config) -> List[Tuple[bool, str]]:
    """(whether set, knob) for the data's storage, the run's processes and threads, and the transfer."""
    data, trainer = conf.data, conf.trainer
    return [
        (data.format is not None, getattr(data.format, "value", "")),
        (data.page_cache.value == "cold", data.page_cache.value),
        (trainer.nproc > 1, f"ddp{trainer.nproc}"),
        (trainer.threads is not None, f"threads{trainer.threads}"),
        (conf.transfer.kind is TransferKind.stream, "stream"),
        (bool(conf.transfer.uint8), "uint8"),
        (data.decode.value == "device", _device_decode(conf)),
    ]


def _device_decode(conf: Config) -> str:
    """`device_decode`, with its backend when one is named: `device_decode_torchvision`."""
    backend = conf.data.decode_backend.value
    return "device_decode" + ("" if backend == "auto" else f"_{backend}")
