"""One probe of `wif-batch-size`: a few training steps at one batch size in a fresh process, and the device's memory.

With data=custom, the user's first sample is fetched once, and every probe trains on it. Every way CUDA says
it is out of memory counts as "too big" (`out_of_memory`); any other failure is the probe's error. The
search and the command line (`batch_size`) only ask a probe whether a size fits.
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
# NOTE [ Why each probe is a fresh spawned process ]
# A probe is started spawned, never forked: a fork of a process that has initialized CUDA cannot use CUDA,
# and a test session or a user's script may have. Each process runs one probe alone: one that runs out of
# memory leaves nothing behind for the next, no fragmented allocator and no cached blocks.
FRESH = mp.get_context("spawn")

# NOTE [ How CUDA says it is out of memory ]
# Beside torch.cuda.OutOfMemoryError, the caching allocator's, CUDA's libraries say it in their own words:
# the runtime's "CUDA error: out of memory", an AcceleratorError, for one creating the context;
# cuBLAS, cuSOLVER and cuDNN 8 "*_STATUS_ALLOC_FAILED"; cuFFT "CUFFT_ALLOC_FAILED";
# cuDNN 9 "..._DEVICE_ALLOCATION_FAILED".
OUT_OF_MEMORY = ("out of memory", "alloc_failed", "device_allocation_failed")


def out_of_memory(err: BaseException) -> bool:
    """Whether a probe's exception says the device ran out of memory, so the search goes down; else it stops.

    The host's allocator, "not enough memory", is not the device's. See NOTE [ How CUDA says it is out of memory ].
    """
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(s in str(err).lower() for s in OUT_OF_MEMORY)


@dataclass
class Probe:
    """What one probe found at its batch size."""

    batch: int
    trained: bool  # a few training steps ran without running out of device memory
    reserved_mb: float = math.nan  # PyTorch's caching allocator, peak
    used_mb: float = math.nan  # the whole device as nvidia-smi shows it, the CUDA context and other tenants in it
    total_mb: float = math.nan
    error: str = ""  # anything but running out of memory: the search cannot go on


@dataclass
class Sample:
    """data=custom: the user's first training sample, repeated to the batch size in each probe, and its classes."""

    x: Any
    y: Any
    num_classes: int


def sample_batches(sample: Sample, batch: int, steps: int, device: Any) -> List[Tuple[Any, Any]]:
    """`steps` batches of `batch` copies of the sample, collated as a DataLoader collates, on the device.

    Args:
        sample: the user's first sample.
        batch: copies of it in a batch.
        steps: batches made.
        device: where they are put.
    """
    from torch.utils.data import default_collate

    x, y = default_collate([(sample.x, sample.y)] * batch)
    return [(x.to(device), y.to(device))] * steps


def first_sample(conf: Config) -> Sample:
    """The first training sample of the user's dataset factory, called once in a fresh child; ConfigError on failure."""
    conn, child_end = FRESH.Pipe(duplex=False)
    proc = FRESH.Process(target=_sample_child, args=(conf, child_end), name="wif-sample")
    proc.start()
    child_end.close()
    try:
        got = pickle.loads(conn.recv_bytes())
    except EOFError:
        got = None  # the child ended before it sent anything
    proc.join()  # exitcode is None until the child is reaped
    if got is None:
        raise ConfigError(f"the process calling data._target_ ended with exit code {proc.exitcode}")
    if isinstance(got, str):
        raise ConfigError(got)
    return got


def _sample_child(conf: Config, conn: Any) -> None:
    """In the child: the first sample, or the factory's error, sent back by value."""
    from wif.data.custom import custom_sets, num_classes_of

    try:
        train = custom_sets(conf.data)["train"]
        x, y = train[0]
        got: Any = Sample(x, y, num_classes_of(train, conf.data.num_classes))
    except ConfigError as err:
        got = str(err)
    conn.send_bytes(pickle.dumps(got))  # by value: torch's pickler would share tensors through a child about to exit


def probe(conf: Config, batch: int, steps: int, sample: Optional[Sample] = None) -> Probe:
    """Trains `steps` steps at this batch size on the device, in a fresh process, and reads the memory it took.

    Args:
        conf: the run's configuration: its model, optimizer, loss, precision.
        batch: the batch size probed.
        steps: training steps run.
        sample: data=custom's first sample, repeated to the batch size; None for random images at
            data.image_size.
    """
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    try:
        _train_steps(conf, batch=batch, steps=steps, sample=sample, device=device)
    except RuntimeError as err:
        if not out_of_memory(err):
            raise
        return _out_of_memory(batch, device)
    free, total = torch.cuda.mem_get_info(device)  # the allocator keeps its peak blocks: this is the peak
    return Probe(
        batch=batch,
        trained=True,
        reserved_mb=torch.cuda.max_memory_reserved(device) / MB,
        used_mb=(total - free) / MB,
        total_mb=total / MB,
    )


def _train_steps(conf: Config, *, batch: int, steps: int, sample: Optional[Sample], device: torch.device) -> None:
    """The run's own step on `steps` batches of `batch`: the user's sample repeated, else random images.

    The step keeps the run's precision, memory format, compilation and optimizer: each changes its memory.

    Args:
        conf: the run's configuration.
        batch: the batch size probed.
        steps: training steps run.
        sample: data=custom's first sample; None for random images at data.image_size.
        device: the device trained on.
    """
    from wif.data.loaders import FixedBatches
    from wif.run.loop import train_epoch
    from wif.run.model import build_model
    from wif.run.step import build_optimizer, prepare_model, step_for

    tr, d = conf.trainer, conf.data
    classes = sample.num_classes if sample is not None else d.num_classes
    model = prepare_model(build_model(conf.model, classes).to(device), tr)
    step = step_for(model, build_optimizer(tr, model.parameters()), conf, device)
    if sample is not None:
        batches: Any = sample_batches(sample, batch=batch, steps=steps, device=device)
    else:
        batches = FixedBatches(
            samples=batch * steps,
            batch_size=batch,
            image_size=d.image_size,
            num_classes=d.num_classes,
            device=device,
            seed=conf.seed,
        )
    train_epoch(step=step, batches=batches, transfer=lambda b: b)


def _out_of_memory(batch: int, device: torch.device) -> Probe:
    """The probe of a batch too big: the allocator's peak and the device's size, where they can still be read."""
    try:  # a library's failed allocation may leave the context unusable: the figures are then unknown
        return Probe(
            batch=batch,
            trained=False,
            reserved_mb=torch.cuda.max_memory_reserved(device) / MB,
            used_mb=math.nan,
            total_mb=torch.cuda.mem_get_info(device)[1] / MB,
        )
    except RuntimeError:
        return Probe(batch=batch, trained=False)


def _probe_child(conf: Config, batch: int, steps: int, sample: bytes, conn: Any) -> None:
    """In the child: the probe, or its failure, sent back.

    Args:
        conf: the run's configuration.
        batch: the batch size probed.
        steps: training steps run.
        sample: data=custom's first sample, pickled by value.
        conn: the pipe to the parent.
    """
    try:
        conn.send(probe(conf, batch=batch, steps=steps, sample=pickle.loads(sample)))
    except BaseException as err:  # noqa: BLE001 - the parent must hear of every failure
        conn.send(Probe(batch=batch, trained=False, error=f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


def run_probe(conf: Config, batch: int, steps: int, sample: Optional[Sample] = None) -> Probe:
    """One probe in a fresh process: a clean CUDA context and allocator every time.

    See NOTE [ Why each probe is a fresh spawned process ].

    Args:
        conf: the run's configuration.
        batch: the batch size probed.
        steps: training steps run.
        sample: data=custom's first sample; None for random images.
    """
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
            batch=batch,
            trained=False,
            error=f"the probe's process ended with exit code {proc.exitcode} without a "
            "result (killed, host out of memory, or a crash in native code)",
        )
    proc.join()
    return result
