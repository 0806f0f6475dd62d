"""One probe of `wif-batch-size`: a few training steps at one batch size, each in a fresh process, and what
the device's memory read afterwards; with data=custom, the user's first sample that every probe trains on.

A probe is started spawned, never forked (a fork of a process that has initialized CUDA, as a test session or
a user's script may have, cannot use CUDA), and for that probe alone: one that runs out of memory leaves
nothing behind (no fragmented allocator, no cached blocks) for the next. Every way CUDA says it is out of
memory counts as "too big" (`out_of_memory`); any other failure is the probe's error. Apart from the search
and the command line (`batch_size`), which only ask a probe whether a size fits.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import pickle
import traceback
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch

from wif.config import Config, ConfigError

MB = 1024 * 1024
FRESH = mp.get_context("spawn")  # a new interpreter: it never inherits this process's CUDA state, if it has any
# How CUDA's libraries say they could not get device memory besides torch.cuda.OutOfMemoryError (the caching
# allocator's): the runtime's "CUDA error: out of memory" (an AcceleratorError, e.g. creating the context),
# cuBLAS/cuSOLVER/cuDNN 8 "*_STATUS_ALLOC_FAILED", cuFFT "CUFFT_ALLOC_FAILED", cuDNN 9 "..._DEVICE_ALLOCATION_FAILED"
OUT_OF_MEMORY = ("out of memory", "alloc_failed", "device_allocation_failed")


def out_of_memory(err: BaseException) -> bool:
    """Whether a probe's exception says the device ran out of memory (the batch is too big, so the search goes
    down), as opposed to any other failure (the search stops). The host's allocator ("not enough memory") is
    not the device's."""
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(s in str(err).lower() for s in OUT_OF_MEMORY)


@dataclass
class Probe:
    batch: int
    trained: bool  # a few training steps ran without running out of device memory
    reserved_mb: float = math.nan  # PyTorch's caching allocator, peak
    used_mb: float = math.nan  # the whole device, as nvidia-smi shows it (CUDA context and other tenants included)
    total_mb: float = math.nan
    error: str = ""  # anything but running out of memory: the search cannot go on


@dataclass
class Sample:
    """data=custom: the first training sample of the user's Dataset and its number of classes. Each probe
    trains on it repeated to the batch size: the input's shape and dtype are the user's, not data.image_size."""

    x: Any
    y: Any
    num_classes: int


def sample_batches(sample: Sample, batch: int, steps: int, device: Any) -> List[Tuple[Any, Any]]:
    """`steps` batches of `batch` copies of the sample, collated as a DataLoader collates, on the device."""
    from torch.utils.data import default_collate

    x, y = default_collate([(sample.x, sample.y)] * batch)
    return [(x.to(device), y.to(device))] * steps


def first_sample(conf: Config) -> Sample:
    """Call the user's dataset factory once, in a fresh child (this process never runs torch compute), and
    bring back its first training sample; ConfigError (one line) when the factory fails or is wrong."""
    conn, child_end = FRESH.Pipe(duplex=False)
    proc = FRESH.Process(target=_sample_child, args=(conf, child_end), name="wif-sample")
    proc.start()
    child_end.close()
    try:
        got = pickle.loads(conn.recv_bytes())
    except EOFError:
        got = f"the process calling data._target_ ended with exit code {proc.exitcode}"
    proc.join()
    if isinstance(got, str):
        raise ConfigError(got)
    return got


def _sample_child(conf: Config, conn: Any) -> None:
    from wif.data.custom import custom_sets, num_classes_of

    try:
        train = custom_sets(conf.data)["train"]
        x, y = train[0]
        got: Any = Sample(x, y, num_classes_of(train, conf.data.num_classes))
    except ConfigError as err:
        got = str(err)
    conn.send_bytes(pickle.dumps(got))  # by value: torch's pickler would share tensors through a child about to exit


def probe(conf: Config, batch: int, steps: int, sample: Optional[Sample] = None) -> Probe:
    """Train `steps` steps at this batch size on the device; runs in a fresh process. `sample`: data=custom's
    first sample, repeated to the batch size (else random images at data.image_size)."""
    from torch import nn

    from wif.data.loaders import FixedBatches
    from wif.run.loop import train_epoch
    from wif.run.model import build_model
    from wif.run.step import Step, build_optimizer, prepare_model

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    d, tr = conf.data, conf.trainer
    classes = sample.num_classes if sample is not None else d.num_classes
    try:
        # The run's own step: its precision, memory format, compilation and optimizer change the memory it takes.
        model = prepare_model(build_model(conf.model, classes).to(device), tr)
        optimizer = build_optimizer(tr, model.parameters())
        step = Step(
            model, optimizer, nn.CrossEntropyLoss(), conf.model.aux_weight, device, tr.precision, tr.channels_last
        )
        batches = (
            sample_batches(sample, batch, steps, device)
            if sample is not None
            else FixedBatches(batch * steps, batch, d.image_size, d.num_classes, device, conf.seed)
        )
        train_epoch(model, batches, lambda b: b, optimizer, step.loss_fn, conf.model.aux_weight, device, step)
    except RuntimeError as err:
        if not out_of_memory(err):
            raise
        try:  # a library's failed allocation may leave the context unusable: the figures are then unknown
            return Probe(
                batch,
                False,
                torch.cuda.max_memory_reserved(device) / MB,
                math.nan,
                torch.cuda.mem_get_info(device)[1] / MB,
            )
        except RuntimeError:
            return Probe(batch, False)
    free, total = torch.cuda.mem_get_info(device)  # the allocator keeps its peak blocks: this is the peak
    return Probe(batch, True, torch.cuda.max_memory_reserved(device) / MB, (total - free) / MB, total / MB)


def _probe_child(conf: Config, batch: int, steps: int, sample: bytes, conn: Any) -> None:
    try:
        conn.send(probe(conf, batch, steps, pickle.loads(sample)))
    except BaseException as err:  # noqa: BLE001 - the parent must hear of every failure
        conn.send(Probe(batch, False, error=f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


def run_probe(conf: Config, batch: int, steps: int, sample: Optional[Sample] = None) -> Probe:
    """One probe in a fresh process: a clean CUDA context and allocator every time."""
    conn, child_end = FRESH.Pipe(duplex=False)
    proc = FRESH.Process(
        target=_probe_child, args=(conf, batch, steps, pickle.dumps(sample), child_end), name=f"wif-probe {batch}"
    )  # the sample by value: no tensor shared with a short-lived child
    proc.start()
    child_end.close()
    try:
        result = conn.recv()
    except EOFError:
        result = Probe(
            batch,
            False,
            error=f"the probe's process ended with exit code {proc.exitcode} without a "
            "result (killed, host out of memory, or a crash in native code)",
        )
    proc.join()
    return result
