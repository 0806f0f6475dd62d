"""One training epoch and one evaluation pass, timed without disturbing what they time.

Read top to bottom. The host clock brackets the epoch between two synchronizations. Inside, the host's wait
for a batch is summed: the fetch plus the transfer call. `StepClock` brackets the compute. Losses and
accuracy stay on the device and are read once, after the epoch's sync.

On CUDA a blocking copy also waits for the kernels already queued, the previous step's. `CopyClock` moves
that part out of the data wait into `gpu_blocked_s`, so the data wait is the loader's alone.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional

import torch

from wif.data.loaders import Batch, Batches
from wif.data.transfer import Transfer, batch_nbytes, copies_from_host
from wif.measure.epochs import EpochStats
from wif.measure.timing import CopyClock, StepClock, synchronize
from wif.run.step import Step


def _labels(batch: Batch) -> int:
    """The samples in one of wif's own batches: its labels."""
    labels = batch[1]
    return labels.shape[0] if isinstance(labels, torch.Tensor) else len(labels)  # shape: no Python-level __len__


def samples_in(batch: Any, fallback: int) -> int:
    """How many samples a batch holds: the length of its first tensor or list of names, depth first."""
    if isinstance(batch, torch.Tensor):
        return len(batch) if batch.dim() else fallback
    values = list(batch.values()) if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else []
    for value in values:
        if isinstance(value, (torch.Tensor, tuple, list, dict)):
            n = samples_in(value, -1)
            if n >= 0:
                return n
    if isinstance(batch, list) and batch:  # a list of non-tensors: one a sample
        return len(batch)
    return fallback


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`fn` applied to every tensor of a batch, its tuples, namedtuples, lists and mappings rebuilt, all else kept."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        mapped = {k: map_tensors(v, fn) for k, v in batch.items()}
        try:
            return type(batch)(mapped)
        except TypeError:  # a mapping whose constructor takes something else
            return mapped
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(b, fn) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(b, fn) for b in batch)
    return batch


class TimedFeed:
    """An epoch's batches, on the device, with the host's wait summed.

    The wait is the time in `next()` plus the transfer call; the clock restarts when the next batch is asked for.
    With `copies`, every batch's bytes are summed from host metadata. With a CUDA `device`, `CopyClock` sets apart
    the wait behind the GPU's queued work. Read `data_wait`, `copy` and `gpu_blocked` after the epoch's sync.
    """

    def __init__(
        self,
        batches: Iterable[Any],
        transfer: Callable[[Any], Any],
        count: Callable[[Any], int] = _labels,
        copies: bool = False,
        device: Optional[torch.device] = None,
    ) -> None:
        """Time `batches` as `transfer` sends them.

        Args:
            batches: the epoch's host batches.
            transfer: sends a batch to the device.
            count: the samples in a sent batch; wif.tools.api counts a user's batch its own way.
            copies: the batches cross from the host (`wif.data.transfer.copies_from_host`): their bytes count.
            device: where the transfer queues its copies; None where it copies nothing (time_epochs).
        """
        self.batches, self.transfer, self.count, self.copies = batches, transfer, count, copies
        self.samples, self.host_wait, self.host_copy, self.first_batch = 0, 0.0, 0.0, float("nan")
        self.copy_bytes = 0
        self.clock = CopyClock(device) if device is not None and device.type == "cuda" else None
        self._blocked: Optional[float] = None

    def __iter__(self) -> Iterator[Any]:
        t0 = time.perf_counter()
        it = iter(self.batches)  # starts the epoch's workers unless persistent: the host waits for that too
        self.host_wait += time.perf_counter() - t0
        clock = self.clock
        while True:
            t_wait = time.perf_counter()
            try:
                host_batch = next(it)
            except StopIteration:
                return
            t_fetched = time.perf_counter()
            if self.samples == 0:
                self.first_batch = t_fetched - t0  # worker start-up shows here
            if clock is None:
                batch = self.transfer(host_batch)
            else:
                with clock.active():  # the transfer's blocking copies are bracketed by events (blocking_copy)
                    batch = self.transfer(host_batch)
            t_ready = time.perf_counter()
            self.host_copy += t_ready - t_fetched
            self.host_wait += t_ready - t_wait
            self.samples += self.count(batch)
            if self.copies:  # the bytes that crossed: the host batch's (a uint8 batch says so, wif.data.transfer.Sent)
                self.copy_bytes += batch_nbytes(batch)
            yield batch

    def gpu_blocked(self) -> Optional[float]:
        """The host's transfer time behind the GPU's queued work, read after the epoch's sync; None without CUDA."""
        if self.clock is not None and self._blocked is None:
            self._blocked = self.clock.gpu_blocked_s()
        return self._blocked

    @property
    def data_wait(self) -> float:
        """The loader's part of the host's wait: in `next()`, plus the transfer's own time."""
        return self.host_wait - (self.gpu_blocked() or 0.0)

    @property
    def copy(self) -> float:
        """The host's time in the transfer call, less its wait behind the GPU."""
        return self.host_copy - (self.gpu_blocked() or 0.0)

    def stats(
        self, t_start: float, t0: float, train_loss: Optional[float], compute_s: float, gpu_idle_s: Optional[float]
    ) -> EpochStats:
        """The epoch's figures, its clock stopped now.

        Args:
            t_start: time.monotonic() at the epoch's start.
            t0: time.perf_counter() at the epoch's start.
            train_loss: the epoch's mean loss; None in loader-only mode.
            compute_s: the step's time on the device.
            gpu_idle_s: the device's idle time between steps; None where not measured.
        """
        t_end = time.perf_counter()  # the figures below read the copy events: after the epoch's clock stops
        return EpochStats(
            epoch_time_s=t_end - t0,
            samples=self.samples,
            train_loss=train_loss,
            data_wait_s=self.data_wait,
            copy_s=self.copy,
            gpu_blocked_s=self.gpu_blocked(),
            copy_bytes_per_epoch=self.copy_bytes,
            compute_s=compute_s,
            first_batch_s=self.first_batch,
            gpu_idle_s=gpu_idle_s,
            compute_threads=torch.get_num_threads(),
            t_start=t_start,
            t_end=time.monotonic(),
        )


def train_epoch(step: Step, batches: Batches, transfer: Transfer) -> EpochStats:
    """One timed training epoch of `step` over `batches`, each sent to the device by `transfer`."""
    device = step.device
    step.model.train()
    clock = StepClock(device)
    loss_sum = torch.zeros((), device=device)
    feed = TimedFeed(batches, transfer, copies=copies_from_host(batches, transfer), device=device)
    synchronize(device)  # sync point: nothing from before is counted in this epoch
    t_start, t0 = time.monotonic(), time.perf_counter()
    for x, y in feed:
        clock.start()
        loss_sum.add_(step(x, y), alpha=y.shape[0])  # one op, on the device: no per-step sync
        clock.stop()
    synchronize(device)  # sync point: the epoch's queued work is done
    return feed.stats(
        t_start=t_start,
        t0=t0,
        train_loss=loss_sum.item() / max(feed.samples, 1),
        compute_s=clock.compute_s(),
        gpu_idle_s=clock.gpu_idle_s(),
    )


def loader_epoch(batches: Batches, transfer: Transfer, device: torch.device) -> EpochStats:
    """The loader and transfer alone, timed as `train_epoch` times them, each queued copy waited for at the end."""
    feed = TimedFeed(batches, transfer, copies=copies_from_host(batches, transfer), device=device)
    synchronize(device)  # sync point: nothing from before is counted in this epoch
    t_start, t0 = time.monotonic(), time.perf_counter()
    for _ in feed:
        pass
    synchronize(device)  # sync point: every queued copy is done
    return feed.stats(t_start=t_start, t0=t0, train_loss=None, compute_s=0.0, gpu_idle_s=None)


class Evaluation(NamedTuple):
    """One pass over a split in evaluation mode."""

    loss: float  # the mean loss
    acc: float  # the share of samples classified right
    seconds: float


@torch.inference_mode()
def evaluate(step: Step, batches: Batches, transfer: Transfer) -> Evaluation:
    """One pass of `step`'s model over a split, in the step's precision and memory format; one sync, at the end."""
    model, device = step.model, step.device
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    samples = 0
    synchronize(device)
    t0 = time.perf_counter()
    for host_batch in batches:
        x, y = transfer(host_batch)
        with step.autocast():
            logits = model(step.inputs(x))
            loss_sum += step.loss_fn(logits, y).float() * len(y)
        correct += (logits.argmax(1) == y).sum()
        samples += len(y)
    synchronize(device)
    seconds = time.perf_counter() - t0
    n = max(samples, 1)
    return Evaluation(loss=loss_sum.item() / n, acc=correct.item() / n, seconds=seconds)
