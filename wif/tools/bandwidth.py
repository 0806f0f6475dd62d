"""`wif-bandwidth`: this machine's host-to-device and device-to-host copy rates, pinned and pageable.

The physical anchor of the study: a setting cannot copy its batches faster than the link allows. The report
states each setting's copy cost as its bytes per epoch over the rate measured here, on the same GPU
(`wif.report.copycost`). After one warm-up copy, two `torch.cuda.Event`s on the copying stream bracket each
copy; the device is synchronized only before and after each size's repeats. The command checks its input,
runs the probe on the first CUDA device and prints a table. It logs one MLflow run tagged `wif.kind=bandwidth`
to the store train.py writes to, with the same `tracking.*` overrides. Rates are in decimal GB/s (10^9 bytes
per second); sizes are decimal MB (10^6 bytes).

    wif-bandwidth --sizes-mb 1,16,256 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

from wif.config import ConfigError, TrackingConfig
from wif.config.compose import load_config, setup_logging, tool_parser
from wif.config.exits import EXIT_BAD_SETTING, EXIT_INTERRUPTED, EXIT_OK, quick_exit
from wif.measure import names
from wif.measure.nvml import cuda_present
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import FINISHED, Tracker, check_server_answers

if TYPE_CHECKING:
    import torch

MB = 10**6
GB = 10**9
DIRECTIONS = ("h2d", "d2h")
MEMORY = ("pinned", "pageable")


@dataclass(frozen=True)
class Rate:
    """One direction, host memory kind and size: the median rate over the repeats."""

    direction: str  # h2d or d2h
    memory: str  # pinned or pageable (the host side)
    size_mb: float
    gbps: float  # median, decimal GB/s


def size_label(size_mb: float) -> str:
    """'256mb', '0.5mb': the suffix of a rate's metric name."""
    return f"{size_mb:g}mb"


def _host(nbytes: int, pinned: bool) -> torch.Tensor:
    import torch

    t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    t.fill_(1)  # fault every page in now: a first touch inside the timed copy would be counted as copying
    return t


def time_copies(dst: torch.Tensor, src: torch.Tensor, repeats: int, stream: torch.cuda.Stream) -> List[float]:
    """Milliseconds of each of `repeats` copies src -> dst, timed by events on `stream`, after one warm-up copy."""
    import torch

    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)  # warm-up: first-use costs (driver mappings, staging buffers)
        stream.synchronize()  # sync point: the timed copies start from an idle stream
        pairs = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            dst.copy_(src, non_blocking=True)
            end.record(stream)
            pairs.append((start, end))
        stream.synchronize()  # sync point: every timed copy is done; the events can be read
    return [start.elapsed_time(end) for start, end in pairs]


def copy_rates(sizes_mb: Iterable[float], repeats: int, device: torch.device) -> List[Rate]:
    """Host-to-device and device-to-host rates for each size, from pinned and from pageable host memory."""
    import torch

    stream = torch.cuda.Stream(device)
    out: List[Rate] = []
    for size_mb in sizes_mb:
        nbytes = int(size_mb * MB)
        on_device = torch.empty(nbytes, dtype=torch.uint8, device=device)
        for memory in MEMORY:
            host = _host(nbytes, pinned=memory == "pinned")
            for direction in DIRECTIONS:
                dst, src = (on_device, host) if direction == "h2d" else (host, on_device)
                median_ms = statistics.median(time_copies(dst, src, repeats, stream))
                out.append(Rate(direction, memory, size_mb, nbytes / (median_ms / 1e3) / GB))
            del host
        del on_device
    return out


def rate_metrics(rates: Iterable[Rate]) -> Dict[str, float]:
    """MLflow metrics: `h2d_pinned_gbps_256mb` per size, and `h2d_pinned_best_gbps`, the highest median over
    the sizes (the rate a large copy reaches), per direction and memory kind."""
    metrics: Dict[str, float] = {}
    for r in rates:
        metrics[f"{r.direction}_{r.memory}_gbps_{size_label(r.size_mb)}"] = r.gbps
        best = f"{r.direction}_{r.memory}_best_gbps"
        metrics[best] = max(metrics.get(best, 0.0), r.gbps)
    return metrics


PROG = "wif-bandwidth"
NO_CUDA = "nothing to measure: this machine has no CUDA device (copy rates are between host and GPU)."


def sizes(text: str) -> List[float]:
    """'1,16,256' -> [1.0, 16.0, 256.0]; argparse turns the ValueError into one line and exit 2."""
    values = [float(part) for part in text.split(",") if part.strip()]
    if not values or any(v <= 0 for v in values):
        raise ValueError(text)
    return values


def build_parser() -> argparse.ArgumentParser:
    """wif-bandwidth's flags beside the study's tracking overrides."""
    p = tool_parser(
        PROG,
        "Measure host-to-device and device-to-host copy rates from pinned and pageable memory "
        "(median decimal GB/s over the repeats, CUDA events on the copying stream) and log "
        "them as an MLflow run tagged wif.kind=bandwidth.",
    )
    p.add_argument(
        "--sizes-mb",
        type=sizes,
        default=[1.0, 16.0, 256.0],
        metavar="MB[,MB...]",
        help="copy sizes in decimal MB (10^6 bytes), comma-separated (default: 1,16,256)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="timed copies per size, direction and memory kind, after one warm-up (default: %(default)s)",
    )
    p.add_argument("--no-log", action="store_true", help="print the table only; log no MLflow run")
    return p


def _check(args: argparse.Namespace) -> None:
    """ConfigError for a flag out of range."""
    if args.repeats < 1:
        raise ConfigError(f"--repeats={args.repeats} must be at least 1.")
    if max(args.sizes_mb) > 16384:
        raise ConfigError(
            f"--sizes-mb: {max(args.sizes_mb):g} MB is more than 16 GB of pinned host memory; "
            "a few hundred MB already reach the link's rate."
        )


def table(rates: Sequence[Rate]) -> str:
    """One row per size, one column per direction and memory kind: median GB/s (decimal)."""
    columns = [(d, m) for d in DIRECTIONS for m in MEMORY]
    by = {(r.direction, r.memory, r.size_mb): r.gbps for r in rates}
    head = f"{'size MB':>9}" + "".join(f"{d + ' ' + m:>15}" for d, m in columns)
    rows = [head] + [
        f"{s:>9g}" + "".join(f"{by[(d, m, s)]:>15.2f}" for d, m in columns) for s in sorted({r.size_mb for r in rates})
    ]
    best = rate_metrics(rates)
    rows.append(f"{'best':>9}" + "".join(f"{best[f'{d}_{m}_best_gbps']:>15.2f}" for d, m in columns))
    return "\n".join(rows) + "\n(GB/s, decimal: 10^9 bytes per second; median of the repeats)"


def device_tags() -> Dict[str, str]:
    """The GPU measured, tagged as training runs tag theirs: the report matches on `wif.gpu` and `wif.gpu_uuid`."""
    import torch

    from wif.run.training import device_info

    info = device_info(torch.device("cuda", 0))
    tags = {
        names.TAG_KIND: "bandwidth",
        names.TAG_DEVICE: "cuda",
        names.TAG_GPU: info["name"],
        names.TAG_GPU_UUID: info["uuid"],
        names.TAG_CUDA: str(info["cuda"]),
        names.TAG_GPU_CAPABILITY: info["capability"],
        "wif.torch": torch.__version__,
    }
    try:
        from wif.measure.nvml import GpuProbe

        probe = GpuProbe(info["uuid"])
        tags[names.TAG_GPU_DRIVER] = str(probe.driver)
        probe.close()
    except Exception:  # noqa: BLE001 - NVML missing or refusing: the rates stand without the driver's version
        tags[names.TAG_GPU_DRIVER] = "unknown"
    return tags


def log_run(uri: str, experiment: str, args: argparse.Namespace, rates: Sequence[Rate]) -> str:
    """One FINISHED run: the rates as metrics, the GPU and software as tags, the sizes and repeats as params.

    Args:
        uri: the MLflow store.
        experiment: its experiment.
        args: the flags: the sizes and repeats.
        rates: the rates measured.
    """
    tracker = Tracker(uri, experiment)
    tags = {**host_tags(), **device_tags()}
    name = f"bandwidth-{tags[names.TAG_GPU].replace(' ', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    params = {"sizes_mb": ",".join(size_label(s) for s in args.sizes_mb), "repeats": args.repeats}
    run_id = tracker.start_run(name, params, tags, {**params, "units": "GB/s = 1e9 bytes/s, MB = 1e6 bytes"})
    tracker.log_metrics(run_id, rate_metrics(rates))
    tracker.end_run(run_id, FINISHED)
    return run_id


def _inputs(argv: Optional[Sequence[str]]) -> Tuple[argparse.Namespace, TrackingConfig]:
    """The flags and the store; ConfigError for bad input or no CUDA device, before anything else is touched."""
    args = build_parser().parse_intermixed_args(argv)
    _check(args)
    tracking = load_config(args.overrides, args.config_dir).tracking
    if not cuda_present():
        raise ConfigError(NO_CUDA)
    check_server_answers(tracking.uri)
    return args, tracking


def main(argv: Optional[Sequence[str]] = None) -> int:
    """wif-bandwidth: the rates measured, printed and logged."""
    quick_exit()
    setup_logging(PROG)
    try:
        args, tracking = _inputs(argv)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    import torch

    device = torch.device("cuda", 0)
    print(
        f"{PROG}: {torch.cuda.get_device_name(device)}: sizes {', '.join(f'{s:g}' for s in args.sizes_mb)} MB, "
        f"{args.repeats} timed copies each after one warm-up",
        flush=True,
    )
    try:
        rates = copy_rates(args.sizes_mb, args.repeats, device)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing logged.", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(table(rates))
    if not args.no_log:
        run_id = log_run(tracking.uri, tracking.experiment, args, rates)
        print(
            f"Logged as run {run_id} (tag wif.kind=bandwidth) in experiment {tracking.experiment!r} at {tracking.uri}."
        )
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
