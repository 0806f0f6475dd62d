"""The race against the fixed grid, on the same cells, side by side in one run.

Runs the race (`hydra/sweeper=race`, race.max_blocks=`--blocks`) and then the fixed grid (every cell,
`--blocks` repeats, the default sweeper) into two stores in one work folder, which it keeps with each
sweep's log, then prints the ratio of runs and of wall time (race / fixed), each fraction's
possibly-fastest set from `wif-report`'s model on the fixed grid, and whether the race's fastest lies
in it. Targets: the race uses at most 50% of the fixed
grid's runs, and names a fastest setting the fixed grid places in its possibly-fastest set.

    python benchmarks/race.py                                       # the smoke grid: 11 x 3 x 10 = 330 runs
    python benchmarks/race.py --loaders baseline,pin,bg,pin_nb_w4_pf2 --fractions 0.4 --blocks 6
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from wif.decide.race import RaceRules
from wif.measure import names
from wif.report import runs as runs_io
from wif.report.stats import Comparison, summarize_fraction

ROOT = Path(__file__).resolve().parents[1]


def sweep(work: Path, name: str, args: list[str], cache: Path) -> tuple[str, float]:
    """One real multirun into its own store; its URI and wall time."""
    store = f"sqlite:///{work / name / 'mlflow.db'}"
    (work / name).mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "WIF_CACHE_DIR": str(cache)}
    log = work / name / "sweep.log"  # the sweep's progress lines: `tail -f` it on a long benchmark
    t0 = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), "-m", *args],
            cwd=work / name,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        sys.exit(f"{name} sweep failed ({done.returncode}):\n{log.read_text()[-3000:]}")
    wall_s = time.monotonic() - t0
    (work / name / "wall_s.txt").write_text(f"{wall_s:.1f}\n")
    return store, wall_s


def earlier_fixed(folder: Path) -> tuple[str, float]:
    """An earlier benchmark's fixed grid (its store and wall time): the fixed grid does not depend on the
    race's rules, so a race can be compared with it again without running the grid's runs again. Its wall
    time is the one measured then, or the span of its runs where that was not kept."""
    store = f"sqlite:///{folder / 'fixed' / 'mlflow.db'}"
    kept = folder / "fixed" / "wall_s.txt"
    if kept.exists():
        return store, float(kept.read_text())
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    span = (max(r.info.end_time or 0 for r in runs) - min(r.info.start_time for r in runs)) / 1000
    print(f"fixed grid from {folder}: its wall time is the span of its runs, {span:.0f} s")
    return store, float(span)


def usable(store: str):
    client = MlflowClient(store)
    runs = runs_io.load_runs(client, runs_io.DEFAULT_EXPERIMENT, runs_io.RunFilter())
    keep = (runs_io.exclusion_reasons(runs, runs_io.MEDIAN) == "") & ~runs["contended"]
    return client, runs, runs[keep]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loaders", default="glob(*)", help="loader options (default: all 11)")
    p.add_argument("--fractions", default="0.1,0.4,0.7")
    p.add_argument("--blocks", type=int, default=10, help="repeats of the fixed grid = race.max_blocks")
    p.add_argument("--baseline", default="baseline")
    p.add_argument(
        "--fixed-from",
        type=Path,
        help="an earlier run's work folder: compare with its fixed grid "
        "instead of running the grid again (same --loaders, --fractions and --blocks)",
    )
    a = p.parse_args()
    rules = RaceRules(max_blocks=a.blocks)
    work = Path(tempfile.mkdtemp(prefix="wif-race-bench-"))
    cache = work / "cache"
    common = [f"loader={a.loaders}", f"data.fraction={a.fractions}", "preset=smoke"]
    print(f"work folder (both stores stay there): {work}", flush=True)
    # The race first: it is the shorter, and the one whose failure one wants to see early.
    race_uri, race_s = sweep(work, "race", common + ["hydra/sweeper=race", f"race.max_blocks={a.blocks}"], cache)
    print(f"race done in {race_s:.0f} s", flush=True)
    if a.fixed_from:
        fixed_uri, fixed_s = earlier_fixed(a.fixed_from)
    else:
        fixed_uri, fixed_s = sweep(work, "fixed", common + [f"repeat=range(0,{a.blocks})"], cache)

    _, fixed_all, fixed = usable(fixed_uri)
    client, race_all, _ = usable(race_uri)
    exp = client.get_experiment_by_name(runs_io.DEFAULT_EXPERIMENT)
    (record,) = client.search_runs([exp.experiment_id], f"tags.`{names.TAG_KIND}` = 'race'", max_results=1)
    print(
        f"runs: race {len(race_all)} / fixed {len(fixed_all)} = {len(race_all) / len(fixed_all):.2f} (target <= 0.50)"
    )
    print(f"wall time: race {race_s:.0f} s / fixed {fixed_s:.0f} s = {race_s / fixed_s:.2f}")
    print(
        f"fixed runs contended (left out): {int(fixed_all['contended'].sum())}; looks at "
        f"{100 * rules.look_confidence:.2f}% each"
    )
    if record.data.tags.get("wif.race.same_as"):
        print(f"raced as one (the same code on this CPU): {record.data.tags['wif.race.same_as']}")
    agree = True
    how = Comparison(baseline=a.baseline, value=runs_io.MEDIAN, confidence=0.95, alpha=0.05, margin=rules.margin)
    for fraction, runs in fixed.groupby("fraction"):
        s = summarize_fraction(runs, metrics=[], how=how)
        raced = record.data.tags.get(f"wif.race.fastest.f{fraction:g}", "").split()
        fastest = raced[0] if raced else None  # the race lists its possibly-fastest set fastest first
        inside = fastest in s.possibly_fastest
        agree &= inside
        print(
            f"fraction {fraction:g}: fixed grid possibly fastest {', '.join(s.possibly_fastest)}; race ended with "
            f"{', '.join(raced) or 'nothing'}; race's fastest {fastest} in the fixed set: {'yes' if inside else 'NO'}"
        )
    print(f"both agree on every fraction: {'yes' if agree else 'NO'}")


if __name__ == "__main__":
    main()
