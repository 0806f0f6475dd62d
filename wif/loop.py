"""One training epoch and one evaluation pass, timed without disturbing what they time.

Read top to bottom: the host clock brackets the epoch between two synchronizations; inside, the host
time spent waiting for a batch (fetch plus any blocking copy) is summed, and compute is bracketed by
`StepClock`. Losses and accuracy stay on the device and are read once, after the epoch's sync.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import nn

from wif.loaders import Batches
from wif.model import training_loss
from wif.timing import StepClock, synchronize
from wif.transfer import Transfer


@dataclass
class EpochStats:
    epoch_time_s: float
    samples: int
    train_loss: Optional[float]  # None in loader-only mode: there is no model
    data_wait_s: float  # host blocked in next() plus a blocking copy
    copy_s: float  # the host-side part of data_wait_s spent in the transfer call
    compute_s: float  # forward, backward, optimizer step (device time on CUDA)
    first_batch_s: float  # from asking for the epoch's iterator to holding its first batch
    gpu_idle_s: Optional[float]  # CUDA only: gaps between steps on the compute stream
    t_start: float  # time.monotonic() at the epoch's start and end, for the memory sampler's windows
    t_end: float


def train_epoch(model: nn.Module, batches: Batches, transfer: Transfer, optimizer: torch.optim.Optimizer,
                loss_fn: nn.Module, aux_weight: float, device: torch.device) -> EpochStats:
    model.train()
    clock = StepClock(device)
    loss_sum = torch.zeros((), device=device)
    samples, data_wait, copy_time, first_batch = 0, 0.0, 0.0, float("nan")
    synchronize(device)  # sync point: nothing from before is counted in this epoch
    t_start, t0 = time.monotonic(), time.perf_counter()
    it = iter(batches)
    while True:
        t_wait = time.perf_counter()
        try:
            host_batch = next(it)
        except StopIteration:
            break
        t_fetched = time.perf_counter()
        if samples == 0:
            first_batch = t_fetched - t0
        x, y = transfer(host_batch)  # blocks the host unless non_blocking from pinned memory
        t_ready = time.perf_counter()
        copy_time += t_ready - t_fetched
        data_wait += t_ready - t_wait

        clock.start()
        loss = training_loss(model(x), y, loss_fn, aux_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach() * len(y)  # stays on the device: no per-step sync
        clock.stop()
        samples += len(y)
    synchronize(device)  # sync point: the epoch's queued work is done
    epoch_time = time.perf_counter() - t0
    return EpochStats(epoch_time_s=epoch_time, samples=samples, train_loss=loss_sum.item() / max(samples, 1),
                      data_wait_s=data_wait, copy_s=copy_time, compute_s=clock.compute_s(),
                      first_batch_s=first_batch, gpu_idle_s=clock.gpu_idle_s(),
                      t_start=t_start, t_end=time.monotonic())


def loader_epoch(batches: Batches, transfer: Transfer, device: torch.device) -> EpochStats:
    """The loader and transfer alone, timed as `train_epoch` times them: how fast they can feed a device.

    Nothing consumes the batches; the final synchronization waits for every queued copy, so a non_blocking
    copy is counted in the epoch time even though the host did not wait for it.
    """
    samples, data_wait, copy_time, first_batch = 0, 0.0, 0.0, float("nan")
    synchronize(device)  # sync point: nothing from before is counted in this epoch
    t_start, t0 = time.monotonic(), time.perf_counter()
    it = iter(batches)
    while True:
        t_wait = time.perf_counter()
        try:
            host_batch = next(it)
        except StopIteration:
            break
        t_fetched = time.perf_counter()
        if samples == 0:
            first_batch = t_fetched - t0
        _, y = transfer(host_batch)
        t_ready = time.perf_counter()
        copy_time += t_ready - t_fetched
        data_wait += t_ready - t_wait
        samples += len(y)
    synchronize(device)  # sync point: every queued copy is done
    epoch_time = time.perf_counter() - t0
    return EpochStats(epoch_time_s=epoch_time, samples=samples, train_loss=None, data_wait_s=data_wait,
                      copy_s=copy_time, compute_s=0.0, first_batch_s=first_batch, gpu_idle_s=None,
                      t_start=t_start, t_end=time.monotonic())


@torch.inference_mode()
def evaluate(model: nn.Module, batches: Batches, transfer: Transfer, loss_fn: nn.Module,
             device: torch.device) -> Tuple[float, float, float]:
    """(mean loss, accuracy, seconds) over a split; one synchronization at the end."""
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    samples = 0
    synchronize(device)
    t0 = time.perf_counter()
    for host_batch in batches:
        x, y = transfer(host_batch)
        logits = model(x)
        loss_sum += loss_fn(logits, y) * len(y)
        correct += (logits.argmax(1) == y).sum()
        samples += len(y)
    synchronize(device)
    seconds = time.perf_counter() - t0
    n = max(samples, 1)
    return loss_sum.item() / n, correct.item() / n, seconds
