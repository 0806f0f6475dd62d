"""`wif-plan`: the price of a sweep before it starts, for the fixed grid and for the cheap way (race + auto).

It expands wif-study's overrides into cells and repeats, and prices each run from earlier runs of the same
testbed (wif.sweep.pricing). Without any, a short probe of each setting prices it (wif.sweep.probe), its own
cost printed. `--no-probe` only says how to get a price.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Sequence

from hydra import compose
from hydra.errors import HydraException
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from wif.config import ConfigError, validate
from wif.config.compose import add_config_args, wif_hydra
from wif.config.exits import EXIT_BAD_SETTING, one_line, quick_exit
from wif.measure import names
from wif.measure.names import Cell
from wif.measure.tracking import check_server_answers, default_tracking_uri
from wif.sweep.prices import Prices
from wif.sweep.pricing import Basis, Price, Shape, price, race_share
from wif.sweep.probe import history_prices, read_history


class Planned(NamedTuple):
    """A sweep's cells as planned: cell -> repeats, a composed config of the sweep, and each cell's shape."""

    cells: Dict[str, int]
    conf: Any  # the last cell's typed config: its testbed and trainer are the sweep's
    shapes: Dict[str, Shape]


def run_probe(overrides: Sequence[str], uri: str, experiment: str, config_dir: Optional[Path] = None) -> float:
    """Run the budgeted sweep's probe of the settings not probed yet; its wall time.

    That is wif-study -m with the sweep's overrides and sweep.probe_only=true, in a process of its own.

    Args:
        overrides: the sweep's overrides.
        uri: the MLflow store.
        experiment: the sweep's experiment; the probe goes to `<experiment>-probe`.
        config_dir: the user's config folder, if any.
    """
    folder = ["--config-dir", str(config_dir)] if config_dir is not None else []
    cmd = [
        sys.executable,
        "-m",
        "wif.sweep.study",
        *folder,
        "-m",
        *overrides,
        "sweep.probe_only=true",
        f"tracking.experiment={experiment}",
    ]
    print(
        f"wif-plan: no earlier run of this testbed in the store: probing each setting (wif-study {' '.join(cmd[3:])})",
        flush=True,
    )
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, "MLFLOW_TRACKING_URI": uri}, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"wif-plan: the probe failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
    return time.monotonic() - t0


def plan_cells(overrides: Sequence[str], config_dir: Optional[Path] = None) -> Planned:
    """The sweep's cells, repeats and shapes, and a composed config; ConfigError for what Hydra or the checks refuse."""
    from wif.sweep.callback import plan_jobs
    from wif.sweep.identity import cell_name
    from wif.sweep.prices import epoch_batches

    cells: Dict[str, int] = {}
    cell_of_key: Dict[tuple, str] = {}
    shapes: Dict[str, Shape] = {}
    conf = None
    try:
        with wif_hydra(config_dir):
            base = compose(
                "config", overrides=[o for o in overrides if "," not in o and "(" not in o], return_hydra_config=True
            )
            for job in plan_jobs(base.hydra.sweeper.params or {}, overrides):
                key = tuple(o for o in job if not o.startswith("repeat="))
                if key not in cell_of_key:
                    conf = OmegaConf.to_object(compose("config", overrides=list(job)))
                    validate(conf)
                    cell_of_key[key] = cell_name(conf)
                    shapes[cell_of_key[key]] = Shape(conf.data.fraction, epoch_batches(conf))
                cells[cell_of_key[key]] = cells.get(cell_of_key[key], 0) + 1
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(one_line(err)) from None
    return Planned(cells, conf, shapes)


def _probed(a: argparse.Namespace, planned: Planned, testbed: Dict[str, str], basis: Basis) -> tuple:
    """(fixed, cheap) priced from the probe of every setting, run first where the store lacks one.

    Args:
        a: wif-plan's arguments.
        planned: the sweep's cells.
        testbed: the testbed's tags, device and model.
        basis: what the prices assume.
    """
    from wif.sweep.probe import read_probes

    client = MlflowClient(a.tracking_uri)
    probes = read_probes(client, a.experiment, testbed)
    settings = {Cell.parse(cell).setting for cell in planned.cells}
    if settings - set(probes):
        spent = run_probe(a.overrides, a.tracking_uri, a.experiment, a.config_dir)
        probes = read_probes(client, a.experiment, testbed)
        missing = settings - set(probes)
        failed = f" ({len(missing)} failed: priced at the median setting)" if missing else ""
        print(
            f"wif-plan: probe: {len(probes)} settings probed{failed} in {spent:.1f} s ({spent / 60:.1f} min, "
            "its jobs' start included)"
        )
    else:
        print(f"wif-plan: priced from the store's probe of every setting (experiment {a.experiment}-probe)")
    if probes:
        print(
            overhead_line([p.wall_s - p.run_s for p in probes.values()], [p.run_s for p in probes.values()], "probes")
        )
    return _fixed_and_cheap(planned, Prices(probes=probes), basis)


def _fixed_and_cheap(planned: Planned, prices: Prices, basis: Basis) -> tuple:
    """(fixed, cheap): the fixed grid, and race + auto, at `prices`."""
    fixed = price(cells=planned.cells, shapes=planned.shapes, prices=prices, epochs=basis.epochs)
    cheap = price(
        cells=planned.cells,
        shapes=planned.shapes,
        prices=prices,
        epochs=basis.auto_epochs,
        runs_share=basis.runs_share,
    )
    return fixed, cheap


def overhead_line(overheads: Sequence[float], runs: Sequence[float], of: str) -> str:
    """A job's overhead, its wall time less its run, against its run: the medians of `of`."""
    return (
        "wif-plan: a job's overhead (job_overhead_s: its process, data and set-up) "
        f"{statistics.median(overheads):.2f} s, its run {statistics.median(runs):.2f} s (medians of {len(runs)} {of})"
    )


def _line(name: str, p: Price) -> str:
    return f"{name}: {p.runs} runs, {p.epochs} epochs, about {p.seconds / 60:.1f} min ({p.seconds / 3600:.2f} h)"


def _cheap_line(cheap: Price, fixed: Price, basis: Basis) -> str:
    """The cheap way's price, as a share of the fixed grid's, with what it assumes."""
    epochs_from = "as earlier auto runs took" if basis.auto_seen else "(trainer.min_epochs, assumed)"
    share_from = "as earlier races ran" if basis.share is not None else "(assumed: no race in the store)"
    return _line("race + auto", cheap) + (
        f"  ({cheap.seconds / fixed.seconds:.2f} of the fixed grid: {basis.auto_epochs:g} epochs a run "
        f"{epochs_from}, {100 * basis.runs_share:.0f}% of the runs {share_from})"
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="wif-plan", description=__doc__.splitlines()[0])
    add_config_args(ap, "the overrides wif-study -m would take")
    ap.add_argument("--tracking-uri", default=default_tracking_uri())
    ap.add_argument("--experiment", default="who_is_faster")
    ap.add_argument(
        "--no-probe",
        action="store_true",
        help="with no earlier run of the testbed, say how to get a price instead of probing",
    )
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    quick_exit()
    a = build_parser().parse_intermixed_args(argv)
    try:
        planned = plan_cells(a.overrides, a.config_dir)
        check_server_answers(a.tracking_uri)
    except ConfigError as err:
        print(f"wif-plan: bad setting: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    from wif.measure.nvml import resolve_device
    from wif.run.model import model_label

    tr = planned.conf.trainer
    testbed = {names.TAG_DEVICE: resolve_device(planned.conf.device), names.TAG_MODEL: model_label(planned.conf.model)}
    client = MlflowClient(a.tracking_uri)
    history = read_history(client, a.experiment, testbed)
    print(
        f"wif-plan: {len(planned.cells)} cells x {max(planned.cells.values())} repeats, {tr.epoch_limit} epochs a run "
        f"({'trainer.epochs=auto: up to max_epochs' if tr.auto else 'trainer.epochs'}), testbed "
        f"{testbed[names.TAG_DEVICE]}/{testbed[names.TAG_MODEL]}, from {len(history)} earlier runs in {a.tracking_uri}"
    )
    if history:
        print(overhead_line([r.overhead_s for r in history], [r.run_s for r in history], "earlier runs"))
    auto_runs = [r.epochs for r in history if r.auto]
    basis = Basis(
        epochs=tr.epoch_limit,
        auto_epochs=statistics.median(auto_runs) if auto_runs else tr.min_epochs,
        auto_seen=bool(auto_runs),
        share=race_share(client, a.experiment),
    )
    fixed, cheap = _fixed_and_cheap(planned, Prices(history=history_prices(history)), basis)
    if fixed is None and not a.no_probe:
        fixed, cheap = _probed(a, planned, testbed, basis)
    if fixed is None:
        print(
            "wif-plan: no earlier finished run of this testbed in the store: run one block first "
            "(the same command with repeat=0 and trainer.epochs=3), or let wif-plan probe it (without "
            "--no-probe), then ask again"
        )
        return 0
    print(_line("fixed grid", fixed))
    print(_cheap_line(cheap, fixed, basis))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
