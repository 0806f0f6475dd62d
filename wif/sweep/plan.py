"""`wif-plan`: the price of a sweep before it starts, for the fixed grid and for the cheap way (race + auto).

It expands the same overrides train.py takes into the sweep's cells and repeats, and prices each run from
earlier runs of the same testbed (device, GPU model, network) in the MLflow store: a run costs its job's
overhead (fork, data, set-up: `job_overhead_s`) plus its epochs (`time_total_s` per epoch run). The cheap
way's epochs per run are those earlier `trainer.epochs=auto` runs took (else `trainer.min_epochs`), and its
share of the grid's runs is what earlier races of the store ran (else the share stated as assumed).
With no earlier run of the testbed it says so, and how to get one: a one-block probe of the same grid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from wif.config import ConfigError, register_configs, validate
from wif.config.compose import CONF_DIR
from wif.config.exits import EXIT_BAD_SETTING
from wif.measure.tracking import default_tracking_uri

ASSUMED_RACE_SHARE = 0.4  # of the fixed grid's runs, when the store holds no race: docs/race.md measured 0.38


@dataclass
class RunCost:
    """What one earlier run cost: its job's overhead, its epochs and their seconds (validation and test included)."""

    cell: str
    overhead_s: float
    epochs: int
    run_s: float
    auto: bool


@dataclass
class Price:
    runs: int
    epochs: int
    seconds: float


def price(cells: Dict[str, int], epochs: int, history: Sequence[RunCost], runs_share: float = 1.0,
          auto_epochs: Optional[float] = None) -> Optional[Price]:
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


def read_history(client: MlflowClient, experiment: str, testbed: Dict[str, str]) -> List[RunCost]:
    """Finished training runs of the testbed (tags wif.device, wif.gpu, wif.model), oldest first."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    where = " and ".join(["tags.`wif.kind` = 'train'", "attributes.status = 'FINISHED'"] +
                         [f"tags.`{k}` = '{v}'" for k, v in testbed.items()])
    out = []
    for run in client.search_runs([exp.experiment_id], where, max_results=50_000):
        m, p = run.data.metrics, run.data.params
        if "time_total_s" not in m:
            continue
        epochs = m.get("epochs_run") or float(p.get("trainer.epochs", "0") if p.get("trainer.epochs") != "auto" else 0)
        if not epochs:
            continue
        out.append(RunCost(run.data.tags.get("wif.cell", "?"), m.get("job_overhead_s", 0.0), int(epochs),
                           m["time_total_s"], p.get("trainer.epochs") == "auto"))
    return out


def race_share(client: MlflowClient, experiment: str) -> Optional[float]:
    """The share of its fixed grid's runs the store's finished races ran (wif.kind=race records)."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    ran = planned = 0
    for race in client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race' and attributes.status = 'FINISHED'"):
        p = race.data.params
        runs = client.search_runs([exp.experiment_id], f"tags.`wif.race_id` = '{race.data.tags['wif.race_id']}' "
                                  "and tags.`wif.kind` = 'train'", max_results=50_000)
        ran += len(runs)
        planned += int(p.get("race.cells", 0)) * int(p.get("race.max_blocks", 0))
    return ran / planned if planned else None


def plan_cells(overrides: Sequence[str]) -> tuple:
    """(cell -> repeats, a composed config of the sweep, for its testbed and trainer) from train.py's overrides."""
    from wif.sweep.callback import plan_jobs
    from wif.sweep.job import cell_name

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        base = compose("config", overrides=[o for o in overrides if "," not in o and "(" not in o],
                       return_hydra_config=True)
        jobs = plan_jobs(base.hydra.sweeper.params or {}, overrides)
        cells: Dict[str, int] = {}
        names: Dict[tuple, str] = {}
        conf = None
        for job in jobs:
            key = tuple(o for o in job if not o.startswith("repeat="))
            if key not in names:
                conf = OmegaConf.to_object(compose("config", overrides=list(job)))
                validate(conf)
                names[key] = cell_name(conf)
            cells[names[key]] = cells.get(names[key], 0) + 1
    return cells, conf


def _line(name: str, p: Price) -> str:
    return f"{name}: {p.runs} runs, {p.epochs} epochs, about {p.seconds / 60:.1f} min ({p.seconds / 3600:.2f} h)"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="wif-plan", description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="the overrides train.py -m would take")
    ap.add_argument("--tracking-uri", default=default_tracking_uri())
    ap.add_argument("--experiment", default="who_is_faster")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        cells, conf = plan_cells(a.overrides)
    except ConfigError as err:
        print(f"wif-plan: bad setting: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    from wif.run.supervise import resolve_device

    tr = conf.trainer
    testbed = {"wif.device": resolve_device(conf.device), "wif.model": conf.model.name.value}
    client = MlflowClient(a.tracking_uri)
    history = read_history(client, a.experiment, testbed)
    epochs = tr.epoch_limit
    print(f"wif-plan: {len(cells)} cells x {max(cells.values())} repeats, {epochs} epochs a run "
          f"({'trainer.epochs=auto: up to max_epochs' if tr.auto else 'trainer.epochs'}), testbed "
          f"{testbed['wif.device']}/{testbed['wif.model']}, from {len(history)} earlier runs in {a.tracking_uri}")
    fixed = price(cells, epochs, history)
    if fixed is None:
        print("wif-plan: no earlier finished run of this testbed in the store: run one block first "
              "(the same command with repeat=0 and trainer.epochs=3), then ask again")
        return 0
    auto_runs = [r.epochs for r in history if r.auto]
    auto_epochs = statistics.median(auto_runs) if auto_runs else tr.min_epochs
    share = race_share(client, a.experiment)
    cheap = price(cells, epochs, history, share if share is not None else ASSUMED_RACE_SHARE, auto_epochs)
    print(_line("fixed grid", fixed))
    print(_line("race + auto", cheap) + f"  ({cheap.seconds / fixed.seconds:.2f} of the fixed grid: "
          f"{auto_epochs:g} epochs a run {'as earlier auto runs took' if auto_runs else '(trainer.min_epochs, assumed)'}"
          f", {100 * (share if share is not None else ASSUMED_RACE_SHARE):.0f}% of the runs "
          f"{'as earlier races ran' if share is not None else '(assumed: no race in the store)'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
