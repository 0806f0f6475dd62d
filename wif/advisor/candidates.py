"""The settings worth trying, and the measured rates the prediction model takes from their trials.

Worker counts are searched as `wif-tune` searches them (`wif.tools.tune.search_workers`), each with
persistent workers (a kept worker costs nothing per epoch; a fresh one starts every epoch); at the best
count also a deeper prefetch, the thread-based engine where torchdata is installed, and on a GPU pinned
memory with non_blocking copies. `data=folder` adds `data.preload=true` (decoded images held in RAM)
where the decoded set fits in half the free RAM. wif has no RAM cache for `data=encoded`, so none is tried.
On a GPU the whole dataset on the device (`gpu_resident`) is tried too, whatever the workers gave: it removes
the loader's work beside the step, the interference that a launch-bound step feels (docs/on-a-gpu.md).
"""

from __future__ import annotations

import importlib.util
import math
from typing import List, Optional

from wif.advisor.predict import Loader, Step, batch_sizes, item_time
from wif.advisor.runner import Candidate, Measured
from wif.config import Config, ConfigError, DataSource, TransferKind, validate
from wif.data.loaders import TAKES_IN_ORDER


def current(base: Config, cuda: bool) -> Candidate:
    """The configured setting, as it is."""
    lo = base.loader
    return Candidate(
        "current",
        {},
        lo.num_workers,
        lo.persistent_workers,
        lo.prefetch_factor or base.engine.prefetch_factor,
        _hidden(base, cuda, lo.pin_memory),
    )


def _hidden(base: Config, cuda: bool, pin: bool) -> bool:
    t = base.transfer
    return cuda and pin and (t.non_blocking or t.kind is TransferKind.stream)


def workers(base: Config, count: int, cuda: bool) -> Candidate:
    """`count` persistent workers, the rest of the configured setting kept."""
    if count == 0:
        return Candidate("w0", {"loader.num_workers": 0}, 0, False, 2, _hidden(base, cuda, base.loader.pin_memory))
    keys = {"loader.num_workers": count, "loader.persistent_workers": True}
    return Candidate(
        f"w{count}",
        keys,
        count,
        True,
        base.loader.prefetch_factor or base.engine.prefetch_factor,
        _hidden(base, cuda, base.loader.pin_memory),
    )


def extras(base: Config, best: Candidate, cuda: bool, ram_free_bytes: Optional[float], items: int) -> List[Candidate]:
    """The other knobs, at the best worker count: those the configuration accepts (`items`: the images an
    epoch takes, as the measuring run counted them)."""
    out = _deeper(best)
    if best.workers > 0:
        if importlib.util.find_spec("torchdata") is not None and base.engine.name.value == "dataloader":
            out.append(_more(best, "threads", {"engine.name": "nodes_threads"}))
    if cuda and not (base.loader.pin_memory and base.transfer.non_blocking):
        out.append(_more(best, "pin_nb", {"loader.pin_memory": True, "transfer.non_blocking": True}, copy_hidden=True))
    d = base.data
    if d.source is DataSource.folder and not d.preload and d.format is None and ram_free_bytes:
        need = items * 3 * d.image_size**2  # uint8 decoded images at image_size
        if need < 0.5 * ram_free_bytes:
            out.append(_more(best, "preload", {"data.preload": True}))
    return [c for c in out if _accepted(base, c)]


def resident(base: Config, cuda: bool) -> List[Candidate]:
    """On a GPU, the whole dataset on the device (the study's `gpu_resident`): no loader works beside the step,
    so its interference goes with its wait and copy. Where the dataset does not fit, its run says so at once
    (wif.run.training._to_device) and the candidate drops out."""
    if not cuda or base.transfer.kind is TransferKind.resident:
        return []
    keys = {
        "loader.name": "gpu_resident",
        "loader.num_workers": 0,
        "loader.pin_memory": False,
        "loader.background": False,
        "transfer.kind": "resident",
        "transfer.non_blocking": False,
    }
    return [c for c in [Candidate("gpu_resident", keys, 0, False, 2, copy_hidden=True)] if _accepted(base, c)]


def script_extras(
    base: Config, best: Candidate, cuda: bool, ram_free_bytes: Optional[float], items: int
) -> List[Candidate]:
    """The other knobs for a user's script (wif-advise --), at the best count: DataLoader's own only, since
    the script's copy and data stay its own: a deeper prefetch, batches out of order where torch has them,
    pinned memory on a GPU."""
    out = _deeper(best)
    if best.workers > 0 and TAKES_IN_ORDER and base.loader.in_order:
        out.append(_more(best, "unordered", {"loader.in_order": False}))
    if cuda and not base.loader.pin_memory:
        out.append(_more(best, "pin", {"loader.pin_memory": True}))
    return out


def _deeper(best: Candidate) -> List[Candidate]:
    """Twice the default batches in flight per worker, where there are workers."""
    return [_more(best, "pf4", {"loader.prefetch_factor": 4}, prefetch=4)] if best.workers > 0 else []


def _more(best: Candidate, suffix: str, keys: dict, **changes) -> Candidate:
    fields = dict(
        workers=best.workers, persistent=best.persistent, prefetch=best.prefetch, copy_hidden=best.copy_hidden
    )
    fields.update(changes)
    return Candidate(f"{best.name}-{suffix}", {**best.keys, **keys}, **fields)


def _accepted(base: Config, cand: Candidate) -> bool:
    from wif.advisor.runner import apply

    try:
        validate(apply(base, cand))
    except ConfigError:
        return False
    return True


# ----------------------------------------------------------------------------- rates from trials
def loader_rates(trial: Measured, cand: Candidate, batch_size: int, batches: int, cores: int) -> Loader:
    """The candidate's rates from its loader-only trial of `batches` batches an epoch."""
    sizes = batch_sizes(trial.n_train, batch_size, batches)
    epoch = trial.median("epoch_time_s")
    startup = 0.0
    if cand.workers > 0 and not cand.persistent:  # its steady epochs' first batch waits on the start-up
        first = item_time(sizes, cand.workers, epoch, cand.prefetch) * max(sizes)
        startup = max(trial.mean("first_batch_s") - first, 0.0)
    item = item_time(sizes, cand.workers, epoch, cand.prefetch, startup)
    cpu = trial.mean("tree_cpu_s") / trial.mean("epoch_time_s")  # exact: the trial's processes' CPU seconds
    if math.isnan(cpu):  # a run from before tree_cpu_s: the sampled utilization (it missed ~40% of 0.15 s epochs)
        cpu = trial.mean("cpu_util_pct") / 100.0 * cores
    if math.isnan(cpu):  # an epoch shorter than the sampler's interval: count the fetch as all CPU
        cpu = float(min(max(cand.workers, 1), cores))
    return Loader(cand.workers, item, cpu, cand.prefetch, cand.persistent, startup, cand.copy_hidden)


def in_process_rates(run: Measured, cand: Candidate, batch_size: int) -> Loader:
    """A 0-worker setting's rates from its training run: its data wait is its fetch."""
    return Loader(0, run.mean("data_wait_s") / max(run.n_train, 1), 0.0, cand.prefetch, False, 0.0, cand.copy_hidden)


def step_rates(run: Measured, bound: Optional[Measured], batch_size: int, cores: int, on_cpu: bool) -> Step:
    """The step's time per batch at the bound (data=fixed), or from the configured run's own step time."""
    src = bound if bound is not None and bound.ok else run
    per_batch = src.mean("compute_s") / max(len(batch_sizes(src.n_train, batch_size)), 1)
    copy = run.mean("copy_s") / max(len(batch_sizes(run.n_train, batch_size)), 1)
    threads = int(run.tags.get("wif.torch_threads", cores) or cores)
    return Step(per_batch, 0.0 if math.isnan(copy) else copy, float(min(threads, cores)) if on_cpu else 1.0, on_cpu)
