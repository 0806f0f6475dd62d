"""The cheap way (race + trainer.epochs=auto) against the full fixed grid, on the same work, side by side.

Runs the fixed grid (every loader option, one fraction, `--blocks` repeats, `--epochs` epochs a run) and the
cheap way (`hydra/sweeper=race` with `trainer.epochs=auto trainer.max_epochs=--epochs`) into two stores in
one work folder, then prints each side's possibly-fastest set, each kept setting's steady epoch time
against the fixed grid's (target: within 3%), the cost ratio (sum of run wall times, job overhead
included; target <= 0.25 at 20 epochs) and its projection for the study's 330-run x 100-epoch grid
(target <= 0.05).

    python benchmarks/cheap_answer.py            # 11 options x fraction 0.7 x 3 blocks, 20 epochs: ~10 min on 2 cores
    python benchmarks/cheap_answer.py --quick    # 3 options, 10 epochs: a short check of the wiring

The defaults are this CPU's: fraction 0.7 of the smoke data gives epochs of 0.25-0.65 s (at 0.1 they last
0.04 s and scatter by more than any target), and the race looks first after block 2 of 3 (a first look at
block 3 of 3 could save nothing). The cheap way runs at trainer.auto_target's default (auto: derived from the
tie margin and the cell's earlier runs, docs/cheap-answer.md); `--target 0.08` sets one by hand.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import race as race_bench  # benchmarks/race.py: one real sweep into its own store, its usable runs
from mlflow.tracking import MlflowClient

from wif.report import runs as runs_io
from wif.report.stats import summarize_fraction

STUDY_RUNS, STUDY_EPOCHS, STUDY_BLOCKS = 330, 100, 10  # blocks: the study's repeats, and race.max_blocks


def study_projection(
    fixed: pd.DataFrame, cheap: dict, loaders: dict, ended: str, fastest: list, epochs: int, overhead: float
) -> float:
    """The cheap way's cost over the fixed grid's, for the study's 10 blocks of 100 epochs, priced per option.

    Per option, one epoch costs what it cost in the fixed grid here; every run adds the job's overhead. A raced
    cell dropped here, or in a race that settled, stops at the same block in the study's race; a cell still
    racing when these blocks ran out is counted at all 10 blocks. A cheap run that reached max_epochs here is
    counted at the full 100 epochs (it might not have stopped sooner).
    """
    per_epoch = {name: statistics.median(g["time_total_s"] / epochs) for name, g in fixed.groupby("loader")}
    study_fixed = sum(STUDY_BLOCKS * (overhead + STUDY_EPOCHS * e) for e in per_epoch.values())
    study_cheap = 0.0
    for name in set(loaders.values()):
        runs = [cheap[i] for i, n in loaders.items() if n == name]
        blocks = len(runs) if (name not in fastest or ended != "runs ran out") else STUDY_BLOCKS
        e = statistics.mean(STUDY_EPOCHS if ep >= epochs else ep for _, ep in runs)
        study_cheap += blocks * (overhead + e * per_epoch[name])
    return study_cheap / study_fixed


def run_costs(store: str) -> dict:
    """run_id -> (wall seconds of the run, job overhead included; epochs run)."""
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    out = {}
    for r in client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'train'", max_results=5000):
        m = r.data.metrics
        out[r.info.run_id] = (m.get("time_total_s", 0.0) + m.get("job_overhead_s", 0.0), m.get("epochs_run", 0.0))
    return out


def main() -> None:
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
    if a.again:  # the sweeps of an earlier run, compared again (same --epochs)
        work = a.again
        cheap_uri, fixed_uri = (f"sqlite:///{work / n / 'mlflow.db'}" for n in ("cheap", "fixed"))
    else:
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

    _, fixed_all, fixed = race_bench.usable(fixed_uri)
    client, cheap_all, cheap = race_bench.usable(cheap_uri)
    if fixed.empty or cheap.empty:  # every run contended (others used the cores): compared all the same, said so
        print(
            "WARNING: runs tagged contended (other processes used the cores); compared all the same: the figures "
            f"below are not clean ({int(fixed_all['contended'].sum())} fixed, {int(cheap_all['contended'].sum())} "
            "cheap runs contended)"
        )
        fixed = fixed_all[fixed_all["status"] == "FINISHED"]
        cheap = cheap_all[cheap_all["status"] == "FINISHED"]
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    (record,) = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race'", max_results=1)
    fr = float(a.fraction)
    s = summarize_fraction(fixed, "baseline", runs_io.MEDIAN, [], 0.95, 0.05, 0.02)
    raced = record.data.tags.get(f"wif.race.fastest.f{fr:g}", "").split()
    # on a CPU, options that run the same code raced as one (wif.race.same_as 'pin=baseline ...'): each stands
    # for its twins too, so the cheap way's set names them all
    twins = dict(pair.split("=") for pair in record.data.tags.get("wif.race.same_as", "").split())
    kept = raced + [twin for twin, raced_as in twins.items() if raced_as in raced]
    ended = record.data.tags.get(f"wif.race.ended.f{fr:g}", "runs ran out")
    same, subset = set(kept) == set(s.possibly_fastest), set(kept) <= set(s.possibly_fastest)
    tied = [n for n in kept if n in s.table.index and bool(s.table.loc[n, "tied"])]
    # twins run the same code here: the fixed grid telling them apart (bg_pin possibly fastest, bg not) is its
    # noise, so the answer is compared as the code that ran too, each twin as the setting it raced as
    as_code = {twins.get(n, n) for n in kept} == {twins.get(n, n) for n in s.possibly_fastest}
    print(
        f"possibly fastest: fixed grid {', '.join(s.possibly_fastest)}; cheap way {', '.join(kept)} (its race "
        f"ended: {ended}); the same set: {'yes' if same else 'no'}; cheap set within the fixed one: "
        f"{'yes' if subset else 'NO'}, tied in the fixed grid (upper bound within its 2% margin): "
        f"{', '.join(tied) or 'none'}"
    )
    print(
        f"the same set as the code that ran (twins as the setting they raced as): {'yes' if as_code else 'NO'} "
        f"(fixed grid {', '.join(sorted({twins.get(n, n) for n in s.possibly_fastest}))}; cheap way "
        f"{', '.join(sorted(set(raced)))})"
    )
    worst, fixed_median = 0.0, {name: statistics.median(g[runs_io.MEDIAN]) for name, g in fixed.groupby("loader")}
    for name in raced:
        full, mine = fixed_median[name], statistics.median(cheap.loc[cheap["loader"] == name, runs_io.MEDIAN])
        worst = max(worst, abs(mine / full - 1))
        print(
            f"  {name}: steady epoch time {mine:.4f} s (cheap) vs {full:.4f} s (fixed): {100 * (mine / full - 1):+.1f}%"
        )
    for twin, raced_as in twins.items():  # not run by the cheap way: the fixed grid's own spread between twins
        if raced_as in raced:
            print(
                f"  ({twin}, the same code as {raced_as} here, not run by the cheap way: {fixed_median[twin]:.4f} s "
                f"in the fixed grid, {100 * (fixed_median[twin] / fixed_median[raced_as] - 1):+.1f}% from its twin)"
            )
    print(f"steady-time agreement: worst {100 * worst:.1f}% (target <= 3%)")

    fixed_cost, cheap_cost = run_costs(fixed_uri), run_costs(cheap_uri)
    f_sum, c_sum = sum(c for c, _ in fixed_cost.values()), sum(c for c, _ in cheap_cost.values())
    print(
        f"cost (sum of run wall times): cheap {c_sum:.0f} s / fixed {f_sum:.0f} s = {c_sum / f_sum:.3f} "
        f"(target <= 0.25); runs {len(cheap_cost)} / {len(fixed_cost)}"
    )
    overhead = statistics.median(
        MlflowClient(fixed_uri).get_run(i).data.metrics.get("job_overhead_s", 0.0) for i in fixed["run_id"]
    )
    loaders = {
        r.info.run_id: r.data.params.get("loader.name")
        for r in MlflowClient(cheap_uri).search_runs([exp.experiment_id], "tags.`wif.kind` = 'train'", max_results=5000)
    }
    projected = study_projection(fixed, cheap_cost, loaders, ended, raced, a.epochs, overhead)
    print(
        f"projection for {STUDY_RUNS} runs x {STUDY_EPOCHS} epochs: {projected:.3f} of the fixed grid (target "
        f"<= 0.05); cheap runs took {statistics.mean(e for _, e in cheap_cost.values()):.1f} of {a.epochs} epochs "
        f"on average, {len(cheap_all)} runs"
    )


if __name__ == "__main__":
    main()
