"""The cheap way (race + trainer.epochs=auto) against the full fixed grid, on the same work, side by side.

Runs the fixed grid (every loader option, one fraction, `--blocks` repeats, `--epochs` epochs a run) and the
cheap way (`hydra/sweeper=race` with `trainer.epochs=auto trainer.max_epochs=--epochs`) into two stores in
one work folder, then prints each side's possibly-fastest set, each kept setting's steady epoch time
against the fixed grid's (target: within 3%), the cost ratio (sum of run wall times, job overhead
included; target <= 0.25 at 20 epochs) and its projection for the study's 330-run x 100-epoch grid
(target <= 0.05).

    python benchmarks/cheap_answer.py            # 11 options x 1 fraction x 3 blocks, 20 epochs: long on 2 cores
    python benchmarks/cheap_answer.py --quick    # 3 options, 10 epochs: a short check of the wiring
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import race as race_bench  # benchmarks/race.py: one real sweep into its own store, its usable runs
from mlflow.tracking import MlflowClient

from wif.report import runs as runs_io
from wif.report.stats import summarize_fraction

STUDY_RUNS, STUDY_EPOCHS = 330, 100


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
    p.add_argument("--fraction", default="0.1")
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--target", type=float, default=0.02, help="trainer.auto_target of the cheap way")
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
        cheap_uri, cheap_s = race_bench.sweep(work, "cheap", common + [
            "hydra/sweeper=race", f"race.max_blocks={a.blocks}", f"race.min_blocks={min(3, a.blocks)}",
            "trainer.epochs=auto", f"trainer.max_epochs={a.epochs}", f"trainer.auto_target={a.target}"], cache)
        fixed_uri, fixed_s = race_bench.sweep(work, "fixed", common + [
            f"trainer.epochs={a.epochs}", f"repeat=range(0,{a.blocks})"], cache)
        print(f"both sweeps in {time.monotonic() - t0:.0f} s (cheap {cheap_s:.0f} s, fixed {fixed_s:.0f} s wall)")

    _, fixed_all, fixed = race_bench.usable(fixed_uri)
    client, cheap_all, cheap = race_bench.usable(cheap_uri)
    if fixed.empty or cheap.empty:  # every run contended (others used the cores): compared all the same, said so
        print("WARNING: runs tagged contended (other processes used the cores); compared all the same: the figures "
              f"below are not clean ({int(fixed_all['contended'].sum())} fixed, {int(cheap_all['contended'].sum())} "
              "cheap runs contended)")
        fixed = fixed_all[fixed_all["status"] == "FINISHED"]
        cheap = cheap_all[cheap_all["status"] == "FINISHED"]
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    (record,) = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race'", max_results=1)
    fr = float(a.fraction)
    s = summarize_fraction(fixed, "baseline", runs_io.MEDIAN, [], 0.95, 0.05, 0.02)
    raced = record.data.tags.get(f"wif.race.fastest.f{fr:g}", "").split()
    subset = set(raced) <= set(s.possibly_fastest)
    print(f"possibly fastest: fixed grid {', '.join(s.possibly_fastest)}; cheap way {', '.join(raced)}; "
          f"cheap set within the fixed one: {'yes' if subset else 'NO'}")
    worst = 0.0
    for name in raced:
        full = statistics.median(fixed.loc[fixed["loader"] == name, runs_io.MEDIAN])
        mine = statistics.median(cheap.loc[cheap["loader"] == name, runs_io.MEDIAN])
        worst = max(worst, abs(mine / full - 1))
        print(f"  {name}: steady epoch time {mine:.4f} s (cheap) vs {full:.4f} s (fixed): {100 * (mine / full - 1):+.1f}%")
    print(f"steady-time agreement: worst {100 * worst:.1f}% (target <= 3%)")

    fixed_cost, cheap_cost = run_costs(fixed_uri), run_costs(cheap_uri)
    f_sum, c_sum = sum(c for c, _ in fixed_cost.values()), sum(c for c, _ in cheap_cost.values())
    print(f"cost (sum of run wall times): cheap {c_sum:.0f} s / fixed {f_sum:.0f} s = {c_sum / f_sum:.3f} "
          f"(target <= 0.25); runs {len(cheap_cost)} / {len(fixed_cost)}")
    # The study's grid: per run, the job's overhead plus 100 epochs at the fixed grid's cost per epoch; the
    # cheap way runs the same share of runs, each as many epochs as here (a run that reached max_epochs here
    # is counted at the full 100: it might not have stopped sooner).
    per_epoch = statistics.median(r["time_total_s"] / a.epochs for _, r in fixed.iterrows())
    overhead = statistics.median(MlflowClient(fixed_uri).get_run(i).data.metrics.get("job_overhead_s", 0.0)
                                 for i in fixed["run_id"])
    epochs = [STUDY_EPOCHS if e >= a.epochs else e for _, e in cheap_cost.values()]
    share = len(cheap_cost) / len(fixed_cost)
    study_fixed = STUDY_RUNS * (overhead + STUDY_EPOCHS * per_epoch)
    study_cheap = STUDY_RUNS * share * (overhead + statistics.mean(epochs) * per_epoch)
    print(f"projection for {STUDY_RUNS} runs x {STUDY_EPOCHS} epochs: {study_cheap / study_fixed:.3f} of the fixed "
          f"grid (target <= 0.05); cheap runs took {statistics.mean(e for _, e in cheap_cost.values()):.1f} epochs "
          f"on average, {len(cheap_all)} runs")


if __name__ == "__main__":
    main()
