"""`wif-batch-size`: the largest batch the configured model trains with, inside a VRAM budget.

See docs/tuning.md, "Batch-size finder". A common advice is to grow the batch until the GPU's memory is about
90% used. Sizes are searched by doubling, then bisecting between the last size that fit and the first that
did not: `find_largest`, a pure function. Each probe (`batch_probe`) trains a few steps, then reads the memory.

    wif-batch-size model=googlenet data.image_size=64 --fill 0.9
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from wif.config import Config, ConfigError, DataSource
from wif.config.compose import STUDY_COMMAND, load_config, setup_logging, tool_parser
from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, quick_exit
from wif.measure.nvml import cuda_present
from wif.tools.batch_probe import Probe, Sample, first_sample, run_probe

PROG = "wif-batch-size"


def find_largest(fits: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest n in [1, limit] with fits(n), for a `fits` that holds up to some size; 0 when 1 does not fit.

    Sizes double from `start` until one fails or `limit` fits, then bisect; each size is tried once.
    """
    if limit < 1:
        return 0
    lo, hi = 0, limit + 1  # fits(lo) holds (0 trivially); fits(hi) fails (hi beyond the limit)
    n = min(max(start, 1), limit)
    while True:
        if not fits(n):
            hi = n
            break
        lo = n
        if n == limit:
            return n
        n = min(2 * n, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


class ProbeFailed(Exception):
    """A probe failed for a reason other than device memory: the search would be meaningless."""


def build_parser() -> argparse.ArgumentParser:
    """wif-batch-size's flags beside the study's overrides."""
    p = tool_parser(
        PROG,
        "The largest data.batch_size the configured model trains "
        "with on this GPU while the device stays within --fill of its memory.",
    )
    p.add_argument("--start", type=int, help="first size tried (default: data.batch_size)")
    for flag, kind, default, text in (
        ("--fill", float, 0.9, "share of the device's memory a batch may fill, as nvidia-smi counts it"),
        ("--max-batch", int, 65536, "largest size tried"),
        ("--multiple", int, 8, "sizes searched are multiples of this"),
        ("--steps", int, 3, "training steps per probe; the optimizer's state appears after the first"),
    ):
        p.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")
    return p


def _check(args: argparse.Namespace) -> None:
    """ConfigError for a flag out of range."""
    if not 0 < args.fill <= 1:
        raise ConfigError(f"--fill={args.fill} must be a share of the device's memory in (0, 1], e.g. 0.9.")
    for key in ("max_batch", "multiple", "steps"):
        if getattr(args, key) < 1:
            raise ConfigError(f"--{key.replace('_', '-')}={getattr(args, key)} must be at least 1.")
    if args.start is not None and args.start < 1:
        raise ConfigError(f"--start={args.start} must be at least 1.")
    if args.max_batch < args.multiple:
        raise ConfigError(f"--max-batch={args.max_batch} is smaller than --multiple={args.multiple}.")


class _Fits:
    """Whether a size fits: each size probed once, its probe kept and said in one line."""

    def __init__(self, conf: Config, args: argparse.Namespace, sample: Optional[Sample]) -> None:
        self.conf, self.args, self.sample = conf, args, sample
        self.probes: Dict[int, Probe] = {}

    def __call__(self, k: int) -> bool:
        """Whether `k` multiples of --multiple train within --fill; ProbeFailed for any other failure."""
        batch = k * self.args.multiple
        p = self.probes[batch] = run_probe(self.conf, batch=batch, steps=self.args.steps, sample=self.sample)
        if p.error:
            raise ProbeFailed(f"batch {batch}: {p.error}")
        ok = p.trained and p.used_mb <= self.args.fill * p.total_mb
        shown = f"{p.used_mb:.0f} MiB used ({p.used_mb / p.total_mb:.0%})" if p.trained else "out of memory"
        print(f"  batch {batch:>7}: {'fits' if ok else 'too big':<8} {shown}", flush=True)
        return ok


def search(conf: Config, args: argparse.Namespace, sample: Optional[Sample] = None) -> Tuple[int, Dict[int, Probe]]:
    """(largest batch size, every probe by size)."""
    fits = _Fits(conf, args, sample)
    start = args.start or conf.data.batch_size
    best = find_largest(fits, max(start // args.multiple, 1), args.max_batch // args.multiple) * args.multiple
    return best, fits.probes


def main(argv: Optional[Sequence[str]] = None) -> int:
    """wif-batch-size: the inputs checked, the sizes searched, the largest said with its wif-study line."""
    quick_exit()
    setup_logging(PROG)
    args = build_parser().parse_intermixed_args(argv)
    try:
        conf, sample = _inputs(args)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    print(_plan(conf, args, sample), flush=True)
    try:
        best, probes = search(conf, args, sample)
    except ProbeFailed as err:
        print(
            f"{PROG}: a probe failed for a reason other than device memory, so the search stops: {err}", file=sys.stderr
        )
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _report(best, probes, args)


def _inputs(args: argparse.Namespace) -> Tuple[Config, Optional[Sample]]:
    """The configuration, and data=custom's first sample; ConfigError for bad input or no CUDA device."""
    _check(args)
    conf = load_config(args.overrides, args.config_dir)
    if not cuda_present():
        raise ConfigError("needs a CUDA device (device memory is what it measures), and this machine has none.")
    if conf.data.source is DataSource.custom:  # the user's inputs, whatever their shape: one sample, repeated
        return conf, first_sample(conf)
    return conf, None


def _plan(conf: Config, args: argparse.Namespace, sample: Optional[Sample]) -> str:
    """The line said before the search: the model, its inputs and the sizes searched."""
    d = conf.data
    shape = (
        f"inputs {tuple(getattr(sample.x, 'shape', ()))} from data._target_={d._target_}, {sample.num_classes}"
        if sample is not None
        else f"{d.image_size}x{d.image_size} images, {d.num_classes}"
    )
    return (
        f"{PROG}: model={conf.model.name.value}, {shape} classes; "
        f"largest multiple of {args.multiple} up to {args.max_batch} that trains within {args.fill:.0%} of the "
        "device's memory"
    )


def _report(best: int, probes: Dict[int, Probe], args: argparse.Namespace) -> int:
    """The largest size and its memory, with its wif-study line; the exit code."""
    if best == 0:
        print(
            f"{PROG}: not even a batch of {args.multiple} trains within {args.fill:.0%} of the device's memory.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    p = probes[best]
    print(
        f"Largest batch size: {best} (peak {p.reserved_mb:.0f} MiB reserved by PyTorch; {p.used_mb:.0f} of "
        f"{p.total_mb:.0f} MiB used on the device, {p.used_mb / p.total_mb:.0%})."
    )
    if best == args.max_batch // args.multiple * args.multiple:
        print("It is the largest size tried: raise --max-batch to look further.")
    kept: List[str] = [o for o in args.overrides if not o.startswith("data.batch_size=")]
    print("Use it: " + " ".join([STUDY_COMMAND, f"data.batch_size={best}"] + kept))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
