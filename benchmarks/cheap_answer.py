"""The cheap way (race + trainer.epochs=auto) against the full fixed grid, on the same work, side by side.

It runs two sweeps into two stores in one work folder. The fixed grid runs every loader option at one fraction,
`--blocks` repeats, `--epochs` epochs a run. The cheap way runs `hydra/sweeper=race` with `trainer.epochs=auto
trainer.max_epochs=--epochs`. Then it prints:
- each side's possibly-fastest set;
- each kept setting's steady epoch time against the fixed grid's, target within 3%;
- the cost ratio, the sum of run wall times with job overhead included, target <= 0.25 at 20 epochs;
- its projection for the study's 330-run x 100-epoch grid, target <= 0.05.

    python benchmarks/cheap_answer.py            # 11 options x fraction 0.7 x 3 blocks, 20 epochs: ~10 min on 2 cores
    python benchmarks/cheap_answer.py --quick    # 3 options, 10 epochs: a short check of the wiring

The defaults are this CPU's. Fraction 0.7 of the smoke data gives epochs of 0.25-0.65 s; at 0.1 they last 0.04 s
and scatter by more than any target. The race looks first after block 2 of 3: a first look at block 3 of 3 could
save nothing. The cheap way runs at trainer.auto_target's default, auto: derived from the tie margin and the
cell's earlier runs (docs/cheap-answer.md). `--target 0.08` sets one by hand.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import race as race_bench  # benchmarks/race.py: one real sweep into its own store, its usable runs
from mlflow.tracking import MlflowClient

from wif.measure import names
from wif.report import runs as runs_io
from wif.report.stats import Comparison, FractionSummary, summarize_fraction

STUDY_RUNS, STUDY_EPOCHS, STUDY_BLOCKS = 330, 100, 10  # blocks: the study's repeats, and race.max_blocks
TRAIN_RUNS = f"tags.`{names.TAG_KIND}` = 'train'"


@dataclass
class Sides:
    """The two sweeps' stores and their usable runs; `cheap_all` keeps the cheap way's contended runs too."""

    fixed_uri: str
    cheap_uri: str
    client: MlflowClient  # the cheap way's store
    fixed: pd.DataFrame
    cheap: pd.DataFrame
    cheap_all: pd.DataFrame


@dataclass
class Race:
    """What the cheap way's race record says at the fraction."""

    raced: list  # the settings the race kept, fastest first
    twins: dict  # a setting -> the setting it raced as, the same code on this CPU
    ended: str

    @property
    def kept(self) -> list:
        """The raced settings and their twins: each raced setting stands for its twins too."""
        return self.raced + [twin for twin, raced_as in self.twins.items() if raced_as in self.raced]


def study_projection(
    fixed: pd.DataFrame, cheap: dict, loaders: dict, race: Race, epochs: int, overhead: float
) -> float:
    """The cheap way's cost over the fixed grid's, for the study's 10 blocks of 100 epochs, priced per option.

    Per option, one epoch costs what it cost in the fixed grid here; every run adds the job's overhead. A raced
    cell dropped here, or in a race that settled, stops at the same block in the study's race. A cell still
    racing when these blocks ran out is counted at all 10 blocks. A cheap run that reached max_epochs here is
    counted at the full 100 epochs: it might not have stopped sooner.

    Args:
        fixed: the fixed grid's usable runs.
        cheap: run_id -> (wall seconds, epochs run) of the cheap way's runs.
        loaders: run_id -> loader option of the cheap way's runs.
        race: the cheap way's race at the fraction.
        epochs: the epochs a run of the fixed grid ran.
        overhead: a job's overhead in seconds.
    """
    per_epoch = {name: statistics.median(g[names.TIME_TOTAL_S] / epochs) for name, g in fixed.groupby("loader")}
    study_fixed = sum(STUDY_BLOCKS * (overhead + STUDY_EPOCHS * e) for e in per_epoch.values())
    study_cheap = 0.0
    for name in set(loaders.values()):
        runs = [cheap[i] for i, n in loaders.items() if n == name]
        blocks = len(runs) if (name not in race.raced or race.ended != "runs ran out") else STUDY_BLOCKS
        e = statistics.mean(STUDY_EPOCHS if ep >= epochs else ep for _, ep in runs)
        study_cheap += blocks * (overhead + e * per_epoch[name])
    return study_cheap / study_fixed


def run_costs(store: str) -> dict:
    """run_id -> (wall seconds of the run, job overhead included; epochs run)."""
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    out = {}
    for r in client.search_runs([exp.experiment_id], TRAIN_RUNS, max_results=5000):
        m = r.data.metrics
        wall_s = m.get(names.TIME_TOTAL_S, 0.0) + m.get(names.JOB_OVERHEAD_S, 0.0)
        out[r.info.run_id] = (wall_s, m.get(names.EPOCHS_RUN, 0.0))
    return out


def parse_args() -> argparse.Namespace:
    """The benchmark's flags; --quick sets the loaders and epochs of a short check."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loaders", default="glob(*)")
    p.add_argument("--fraction", default="0.7")
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--min-blocks", type=int, default=2, help="race.min_blocks: the race's first look")
    p.add_argument("--target", type=float, help="trainer.auto_target of the cheap way (default: its default, auto)")
    p.add_argument("--quick", action="store_true", help="baseline,bg,pin_nb_w4_pf2 and 10 epochs")
    p.add_argument("--again", type=Path, help="an earlier run's work folder: compare its two sweeps again")
    a = p.parse_args()
    if a.quick:
        a.loaders, a.epochs = "baseline,bg,pin_nb_w4_pf2", 10
    return a


def run_sweeps(a: argparse.Namespace) -> tuple[str, str]:
    """Run both sweeps into a new work folder, or find an earlier run's; the (cheap, fixed) stores."""
    if a.again:  # the sweeps of an earlier run, compared again (same --epochs)
        cheap_uri, fixed_uri = (f"sqlite:///{a.again / n / 'mlflow.db'}" for n in ("cheap", "fixed"))
        return cheap_uri, fixed_uri
    work = Path(tempfile.mkdtemp(prefix="wif-cheap-bench-"))
    cache = work / "cache"
    common = [f"loader={a.loaders}", f"data.fraction={a.fraction}", "preset=smoke"]
    print(f"work folder (both stores stay there): {work}", flush=True)
    t0 = time.monotonic()
    cheap_uri, cheap_s = race_bench.sweep(
        work,
        "cheap",
        common
        + [
            "hydra/sweeper=race",
            f"race.max_blocks={a.blocks}",
            f"race.min_blocks={min(a.min_blocks, a.blocks)}",
            "trainer.epochs=auto",
            f"trainer.max_epochs={a.epochs}",
        ]
        + ([f"trainer.auto_target={a.target}"] if a.target is not None else []),
        cache,
    )
    fixed_uri, fixed_s = race_bench.sweep(
        work, "fixed", common + [f"trainer.epochs={a.epochs}", f"repeat=range(0,{a.blocks})"], cache
    )
    print(f"both sweeps in {time.monotonic() - t0:.0f} s (cheap {cheap_s:.0f} s, fixed {fixed_s:.0f} s wall)")
    return cheap_uri, fixed_uri


def usable_sides(cheap_uri: str, fixed_uri: str) -> Sides:
    """Each sweep's usable runs; when every run of a side was contended, its finished runs, said so."""
    _, fixed_all, fixed = race_bench.usable(fixed_uri)
    client, cheap_all, cheap = race_bench.usable(cheap_uri)
    if fixed.empty or cheap.empty:  # other processes used the cores: compared all the same
        print(
            "WARNING: runs tagged contended (other processes used the cores); compared all the same: the figures "
            f"below are not clean ({int(fixed_all['contended'].sum())} fixed, {int(cheap_all['contended'].sum())} "
            "cheap runs contended)"
        )
        fixed = fixed_all[fixed_all["status"] == "FINISHED"]
        cheap = cheap_all[cheap_all["status"] == "FINISHED"]
    return Sides(fixed_uri=fixed_uri, cheap_uri=cheap_uri, client=client, fixed=fixed, cheap=cheap, cheap_all=cheap_all)


def read_race(client: MlflowClient, fraction: float) -> Race:
    """The cheap way's race record at `fraction`: its kept settings, their twins and how it ended."""
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    (record,) = client.search_runs([exp.experiment_id], f"tags.`{names.TAG_KIND}` = 'race'", max_results=1)
    tags = record.data.tags
    # On a CPU, options that run the same code race as one: wif.race.same_as reads 'pin=baseline ...'.
    return Race(
        raced=tags.get(f"wif.race.fastest.f{fraction:g}", "").split(),
        twins=dict(pair.split("=") for pair in tags.get("wif.race.same_as", "").split()),
        ended=tags.get(f"wif.race.ended.f{fraction:g}", "runs ran out"),
    )


def print_sets(race: Race, s: FractionSummary) -> None:
    """Print whether the cheap way's set is the fixed grid's possibly-fastest set."""
    kept, twins = race.kept, race.twins
    same, subset = set(kept) == set(s.possibly_fastest), set(kept) <= set(s.possibly_fastest)
    tied = [n for n in kept if n in s.table.index and bool(s.table.loc[n, "tied"])]
    # The fixed grid telling twins apart is its noise, so each twin is compared as the setting it raced as too.
    as_code = {twins.get(n, n) for n in kept} == {twins.get(n, n) for n in s.possibly_fastest}
    print(
        f"possibly fastest: fixed grid {', '.join(s.possibly_fastest)}; cheap way {', '.join(kept)} (its race "
        f"ended: {race.ended}); the same set: {'yes' if same else 'no'}; cheap set within the fixed one: "
        f"{'yes' if subset else 'NO'}, tied in the fixed grid (upper bound within its 2% margin): "
        f"{', '.join(tied) or 'none'}"
    )
    print(
        f"the same set as the code that ran (twins as the setting they raced as): {'yes' if as_code else 'NO'} "
        f"(fixed grid {', '.join(sorted({twins.get(n, n) for n in s.possibly_fastest}))}; cheap way "
        f"{', '.join(sorted(set(race.raced)))})"
    )


def print_steady_times(race: Race, sides: Sides) -> None:
    """Print each raced setting's steady epoch time on both sides, its twins' in the fixed grid, and the worst gap."""
    fixed, cheap = sides.fixed, sides.cheap
    worst, fixed_median = 0.0, {name: statistics.median(g[runs_io.MEDIAN]) for name, g in fixed.groupby("loader")}
    for name in race.raced:
        full, mine = fixed_median[name], statistics.median(cheap.loc[cheap["loader"] == name, runs_io.MEDIAN])
        worst = max(worst, abs(mine / full - 1))
        print(
            f"  {name}: steady epoch time {mine:.4f} s (cheap) vs {full:.4f} s (fixed): {100 * (mine / full - 1):+.1f}%"
        )
    for twin, raced_as in race.twins.items():  # not run by the cheap way: the fixed grid's own spread between twins
        if raced_as in race.raced:
            print(
                f"  ({twin}, the same code as {raced_as} here, not run by the cheap way: {fixed_median[twin]:.4f} s "
                f"in the fixed grid, {100 * (fixed_median[twin] / fixed_median[raced_as] - 1):+.1f}% from its twin)"
            )
    print(f"steady-time agreement: worst {100 * worst:.1f}% (target <= 3%)")


def print_costs(race: Race, sides: Sides, epochs: int) -> None:
    """Print the cost ratio of the two sides here, and its projection for the study's grid."""
    fixed_cost, cheap_cost = run_costs(sides.fixed_uri), run_costs(sides.cheap_uri)
    f_sum, c_sum = sum(c for c, _ in fixed_cost.values()), sum(c for c, _ in cheap_cost.values())
    print(
        f"cost (sum of run wall times): cheap {c_sum:.0f} s / fixed {f_sum:.0f} s = {c_sum / f_sum:.3f} "
        f"(target <= 0.25); runs {len(cheap_cost)} / {len(fixed_cost)}"
    )
    overhead = statistics.median(
        MlflowClient(sides.fixed_uri).get_run(i).data.metrics.get(names.JOB_OVERHEAD_S, 0.0)
        for i in sides.fixed["run_id"]
    )
    exp = sides.client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    loaders = {
        r.info.run_id: r.data.params.get("loader.name")
        for r in MlflowClient(sides.cheap_uri).search_runs([exp.experiment_id], TRAIN_RUNS, max_results=5000)
    }
    projected = study_projection(sides.fixed, cheap_cost, loaders, race=race, epochs=epochs, overhead=overhead)
    print(
        f"projection for {STUDY_RUNS} runs x {STUDY_EPOCHS} epochs: {projected:.3f} of the fixed grid (target "
        f"<= 0.05); cheap runs took {statistics.mean(e for _, e in cheap_cost.values()):.1f} of {epochs} epochs "
        f"on average, {len(sides.cheap_all)} runs"
    )


def main() -> None:
    a = parse_args()
    sides = usable_sides(*run_sweeps(a))
    race = read_race(sides.client, float(a.fraction))
    how = Comparison(baseline="baseline", value=runs_io.MEDIAN, confidence=0.95, alpha=0.05, margin=0.02)
    fixed_summary = summarize_fraction(sides.fixed, metrics=[], how=how)
    print_sets(race, fixed_summary)
    print_steady_times(race, sides)
    print_costs(race, sides, a.epochs)


if __name__ == "__main__":
    main()
