"""`wif-plan`: the price of a sweep before it starts, for the fixed grid and for the cheap way (race + auto).

It expands the same overrides wif-study (train.py) takes into the sweep's cells and repeats, and prices each
run from earlier runs of the same testbed (device, GPU model, network) in the MLflow store: a run costs its job's
overhead (fork, data, set-up: `job_overhead_s`) plus its epochs (`time_total_s` per epoch run). The cheap
way's epochs per run are those earlier `trainer.epochs=auto` runs took (else `trainer.min_epochs`), and its
share of the grid's runs is what earlier races of the store ran (else the share stated as assumed).
With no earlier run of the testbed a short probe (wif.sweep.probe: a few batches of each setting, its job
start included) prices it, and its own cost is printed; `--no-probe` only says how to get a price.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hydra import compose
from hydra.errors import HydraException
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from wif.config import ConfigError, validate
from wif.config.compose import add_config_args, wif_hydra
from wif.config.exits import EXIT_BAD_SETTING, one_line, quick_exit
from wif.measure.tracking import default_tracking_uri
from wif.sweep.probe import RunCost, read_history  # noqa: F401 - RunCost: what a history holds, for callers

ASSUMED_RACE_SHARE = 0.4  # of the fixed grid's runs, when the store holds no race: docs/race.md measured 0.38


@dataclass
class Price:
    runs: int
    epochs: int
    seconds: float


def price(
    cells: Dict[str, int],
    epochs: int,
    history: Sequence[RunCost],
    runs_share: float = 1.0,
    auto_epochs: Optional[float] = None,
) -> Optional[Price]:
    """The sweep's runs, epochs and seconds: `cells` maps each cell to its repeats; a cell never run before
    is priced at the median of the cells that were. None without any earlier run."""
    if not history:
        return None
    per_epoch: Dict[str, List[float]] = {}
    for r in history:
        per_epoch.setdefault(r.cell, []).append(r.run_s / max(r.epochs, 1))
    cell_epoch_s = {c: statistics.median(v) for c, v in per_epoch.items()}
    fallback = statistics.median(cell_epoch_s.values())
    overhead = statistics.median(r.overhead_s for r in history)
    n_epochs = auto_epochs if auto_epochs is not None else epochs
    runs = epochs_total = seconds = 0.0
    for cell, repeats in cells.items():
        n = repeats * runs_share
        runs += n
        epochs_total += n * n_epochs
        seconds += n * (overhead + n_epochs * cell_epoch_s.get(cell, fallback))
    return Price(round(runs), round(epochs_total), seconds)


def race_share(client: MlflowClient, experiment: str) -> Optional[float]:
    """The share of its fixed grid's runs the store's finished races ran (wif.kind=race records)."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    ran = planned = 0
    for race in client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race' and attributes.status = 'FINISHED'"):
        p = race.data.params
        runs = client.search_runs(
            [exp.experiment_id],
            f"tags.`wif.race_id` = '{race.data.tags['wif.race_id']}' and tags.`wif.kind` = 'train'",
            max_results=50_000,
        )
        ran += len(runs)
        planned += int(p.get("race.cells", 0)) * int(p.get("race.max_blocks", 0))
    return ran / planned if planned else None


def probe_price(
    cells: Dict[str, int], shapes: Dict[str, tuple], probes: Dict, epochs: float, runs_share: float = 1.0
) -> Optional[Price]:
    """The sweep's price from probes of its settings (wif.sweep.probe): `shapes` maps each cell to its
    (fraction, batches a training epoch); a setting without a probe is priced at the median one."""
    from wif.sweep.budget import Job, Prices

    prices = Prices(probes=probes)
    runs = seconds = 0.0
    for cell, repeats in cells.items():
        fraction, batches = shapes[cell]
        cost = prices.cost(Job((), cell, fraction, 0, batches))  # block 0: a price does not depend on it
        if cost is None:
            return None
        runs += repeats * runs_share
        seconds += repeats * runs_share * cost.seconds(epochs)
    return Price(round(runs), round(runs * epochs), seconds)


def run_probe(overrides: Sequence[str], uri: str, experiment: str, config_dir: Optional[Path] = None) -> float:
    """wif-study -m with the sweep's overrides and sweep.probe_only=true: the probe the budgeted sweep runs
    (its settings not probed yet), in a process of its own as a sweep would; its wall time."""
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


def plan_cells(overrides: Sequence[str], config_dir: Optional[Path] = None) -> tuple:
    """(cell -> repeats, a composed config of the sweep for its testbed and trainer, cell -> (fraction,
    training batches an epoch)) from the study's overrides (names also in `config_dir`, the user's folder);
    ConfigError for a name or value Hydra or the checks refuse."""
    try:
        return _plan_cells(overrides, config_dir)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(one_line(err)) from None


def _plan_cells(overrides: Sequence[str], config_dir: Optional[Path]) -> tuple:
    from wif.sweep.budget import batches_per_epoch
    from wif.sweep.callback import plan_jobs
    from wif.sweep.job import cell_name

    with wif_hydra(config_dir):
        base = compose(
            "config", overrides=[o for o in overrides if "," not in o and "(" not in o], return_hydra_config=True
        )
        jobs = plan_jobs(base.hydra.sweeper.params or {}, overrides)
        cells: Dict[str, int] = {}
        names: Dict[tuple, str] = {}
        shapes: Dict[str, tuple] = {}
        conf = None
        for job in jobs:
            key = tuple(o for o in job if not o.startswith("repeat="))
            if key not in names:
                conf = OmegaConf.to_object(compose("config", overrides=list(job)))
                validate(conf)
                names[key] = cell_name(conf)
                d = conf.data
                shapes[names[key]] = (
                    d.fraction,
                    batches_per_epoch(d.num_train, d.fraction, d.val_split, d.batch_size, conf.trainer.max_batches),
                )
            cells[names[key]] = cells.get(names[key], 0) + 1
    return cells, conf, shapes


def _probed(
    a: argparse.Namespace,
    cells: Dict[str, int],
    shapes: Dict[str, tuple],
    testbed: Dict[str, str],
    epochs: int,
    auto_epochs: float,
    share: float,
) -> tuple:
    """(fixed, cheap) priced from the probe of every setting, run first where the store lacks one."""
    from wif.sweep.probe import read_probes

    client = MlflowClient(a.tracking_uri)
    probes = read_probes(client, a.experiment, testbed)
    settings = {cell.rpartition("@")[0] for cell in cells}
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
    return (probe_price(cells, shapes, probes, epochs), probe_price(cells, shapes, probes, auto_epochs, share))


def _line(name: str, p: Price) -> str:
    return f"{name}: {p.runs} runs, {p.epochs} epochs, about {p.seconds / 60:.1f} min ({p.seconds / 3600:.2f} h)"


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
        cells, conf, shapes = plan_cells(a.overrides, a.config_dir)
    except ConfigError as err:
        print(f"wif-plan: bad setting: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    from wif.run.model import model_label
    from wif.run.supervise import resolve_device

    tr = conf.trainer
    testbed = {"wif.device": resolve_device(conf.device), "wif.model": model_label(conf.model)}
    client = MlflowClient(a.tracking_uri)
    history = read_history(client, a.experiment, testbed)
    epochs = tr.epoch_limit
    print(
        f"wif-plan: {len(cells)} cells x {max(cells.values())} repeats, {epochs} epochs a run "
        f"({'trainer.epochs=auto: up to max_epochs' if tr.auto else 'trainer.epochs'}), testbed "
        f"{testbed['wif.device']}/{testbed['wif.model']}, from {len(history)} earlier runs in {a.tracking_uri}"
    )
    auto_runs = [r.epochs for r in history if r.auto]
    auto_epochs = statistics.median(auto_runs) if auto_runs else tr.min_epochs
    share = race_share(client, a.experiment)
    fixed = price(cells, epochs, history)
    cheap = price(cells, epochs, history, share if share is not None else ASSUMED_RACE_SHARE, auto_epochs)
    if fixed is None and not a.no_probe:
        fixed, cheap = _probed(
            a, cells, shapes, testbed, epochs, auto_epochs, share if share is not None else ASSUMED_RACE_SHARE
        )
    if fixed is None:
        print(
            "wif-plan: no earlier finished run of this testbed in the store: run one block first "
            "(the same command with repeat=0 and trainer.epochs=3), or let wif-plan probe it (without "
            "--no-probe), then ask again"
        )
        return 0
    print(_line("fixed grid", fixed))
    print(
        _line("race + auto", cheap) + f"  ({cheap.seconds / fixed.seconds:.2f} of the fixed grid: "
        f"{auto_epochs:g} epochs a run {'as earlier auto runs took' if auto_runs else '(trainer.min_epochs, assumed)'}"
        f", {100 * (share if share is not None else ASSUMED_RACE_SHARE):.0f}% of the runs "
        f"{'as earlier races ran' if share is not None else '(assumed: no race in the store)'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
