"""Is wif-advise's answer true to the script's own run? A panel of training scripts, each advised, then timed.

Each script of the panel (`benchmarks/truth_scripts/`) is advised by `wif-advise --minutes M -- COMMAND`: its pick,
the claimed speedup and its 95% interval. Then it runs plainly at its own setting and at the pick, in `--turns`
pairs, each pair in the other order on the next turn. The truth is the median of the pairs' ratios, own / pick
(NOTE [ Which time is the truth ]). A row says the claim, the truth and its pairs' min-max, whether the interval
holds it, how far it misses and the prediction's error. A failure or a timeout is a row, and the panel goes on.

    python benchmarks/truth.py [--scripts epochs,stream,...] [--minutes 3] [--turns 5] [--out truth.json]
    python benchmarks/truth.py --scripts epochs --small --minutes 2 --turns 1   # the suite's short form

Targets (issue 81, docs/benchmarks.md): at most one interval misses its truth, by at most 5% of the truth; the
median prediction error at most 10%.
"""

# NOTE [ Which time is the truth ]
# A user who applies the pick sees their training take less time. wif-advise claims a steady epoch's speedup,
# so the truth is the script's steady epochs: from its second epoch's start to its last one's end (as the issue
# timed its case of 98-batch epochs). Evaluation and workers started every epoch count; a persistent worker's
# one start does not, as it does not over a real training's many epochs. A script of one epoch, or a stream, has
# no steady epoch: its whole training is the truth, its workers' start included. The interpreter's start, the
# imports and building the data and the model never count: no loader setting changes them, and on a loaded
# machine they are the noisiest part. The JSON keeps the whole training and each process's wall time beside
# it. A DDP job's time is its slowest rank's.

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "truth_scripts"
MARK = "truth: train_s="
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
RUN_TIMEOUT_S = 300  # one plain run, its start included: a few seconds of training on a loaded 2-core machine


class Case(NamedTuple):
    """A script of the panel: what it stands for, the script and its arguments (its own setting), smaller ones."""

    what: str
    argv: str
    small: str  # --small: these arguments on top, the case in about a third of the time
    torchrun: bool = False


PANEL: Dict[str, Case] = {
    "epochs": Case("plain epochs, 0 workers", "loop.py --epochs 5 --n-train 256", "--epochs 3"),
    "long_epoch": Case("one long epoch, 0 workers", "loop.py --epochs 1 --n-train 2000", "--n-train 800"),
    "stream": Case("an endless stream, max_steps", "stream.py --max-steps 120 --batch-size 16", "--max-steps 60"),
    "restarts": Case("epochs of 2.5 windows, 2 workers started each", "loop.py --epochs 4 --n-train 1000 "
                     "--batch-size 8 --num-workers 2", "--epochs 2"),  # a window: 50 batches, wif-advise's --batches
    "persistent": Case("1 persistent worker", "loop.py --epochs 5 --n-train 320 --num-workers 1 "
                       "--persistent-workers", "--epochs 3"),
    "hf_eval": Case("HF Trainer, evaluates each epoch", "hf_eval.py --epochs 3 --n-train 480", "--epochs 2"),
    "lightning_val": Case("Lightning, validates each epoch", "lightning_val.py --epochs 4 --n-train 320", "--epochs 2"),
    "ddp": Case("DDP, 2 gloo ranks under torchrun", "ddp.py --epochs 4 --n-train 640", "--epochs 2", torchrun=True),
}  # fmt: skip


class Done(NamedTuple):
    """A command's end: exit code (None: timed out, its process group killed), output, wall seconds."""

    rc: Optional[int]
    out: str
    err: str
    wall_s: float


def run_group(cmd: List[str], timeout_s: float, cwd: Path, env: Dict[str, str]) -> Done:
    """Run `cmd` in a process group of its own; past `timeout_s`, SIGTERM the group, then SIGKILL it."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Done(proc.returncode, out, err, time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # wif-advise ends its runs KILLED on SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                out, err = proc.communicate(timeout=20)
                return Done(None, out, err, time.monotonic() - t0)
        return Done(None, "", "", time.monotonic() - t0)


def command(case: Case, small: bool, flags: List[str] = ()) -> List[str]:
    """The case's command line, with the pick's `flags` after its own arguments (argparse keeps the last)."""
    script, *args = case.argv.split()
    launcher = TORCHRUN if case.torchrun else [sys.executable]
    return [*launcher, str(SCRIPTS / script), *args, *(case.small.split() if small else []), *flags]


def failure(done: Done, timeout_s: float) -> str:
    """One line: why a command did not end well."""
    lines = [ln for ln in done.err.splitlines() if ln.strip()] or [ln for ln in done.out.splitlines() if ln.strip()]
    return f"timed out after {timeout_s:.0f} s" if done.rc is None else f"exit {done.rc}: {(lines or ['none'])[-1]}"


def env_for(store: Optional[Path] = None) -> Dict[str, str]:
    """This checkout's wif first on the path; wif-advise's runs into `store`, orders from outside dropped."""
    env = {key: value for key, value in os.environ.items() if key != "WIF_WATCH_ORDERS"}
    into = {"MLFLOW_TRACKING_URI": f"sqlite:///{store}"} if store else {}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **into}


class Claim(NamedTuple):
    """wif-advise's answer: the pick ("keep": none), its speedup and 95% interval, the pick as the script's flags."""

    pick: str
    speedup: float  # 1.0 for "keep", with its interval
    speedup_ci_low: float
    speedup_ci_high: float
    flags: List[str]
    advise_s: float
    said: str  # the answer's line: `Pick: ...` or `Keep what you have: ...`


PASTE = re.compile(r"\b(?:dataloader_)?(num_workers|prefetch_factor|persistent_workers|pin_memory|in_order)=(\w+)")


def flags_of(paste: str) -> List[str]:
    """The panel scripts' flags for the DataLoader arguments (or TrainingArguments fields) of the paste line."""
    flags: List[str] = []
    for key, value in PASTE.findall(paste):
        flag = key.replace("_", "-")
        if value in ("True", "False"):
            flags.append(f"--{'' if value == 'True' else 'no-'}{flag}")
        elif value != "None":
            flags += [f"--{flag}", value]
    return flags


def parent_figures(store: Path) -> Dict[str, object]:
    """The advice's parent run in `store`: its pick tag and speedup metrics (docs/what-each-run-records.md)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    ids = [e.experiment_id for e in client.search_experiments()]
    (parent,) = client.search_runs(ids, "tags.`wif.advise_role` = 'parent'", max_results=2)
    return {"pick": parent.data.tags.get("wif.advise.pick", "keep"), **parent.data.metrics}


def advise(case: Case, folder: Path, args: argparse.Namespace) -> Claim | str:
    """`wif-advise --minutes M [OVERRIDES] -- COMMAND` on the case; its claim, or one line saying why there is none."""
    folder.mkdir(parents=True)
    store, minutes = folder / "mlflow.db", args.minutes
    argv = [sys.executable, "-m", "wif.advisor.advise_cli", "--minutes", f"{minutes:g}", *args.overrides.split()]
    argv += ["--", *command(case, args.small)]
    timeout_s = 60 * minutes + 240  # its own start and probe, and a margin past --minutes
    done = run_group(argv, timeout_s, cwd=folder, env=env_for(store))
    (folder / "advise.log").write_text(f"$ {' '.join(argv)}\n{done.out}\n--- stderr\n{done.err}")
    if done.rc != 0:
        return failure(done, timeout_s)
    got = parent_figures(store)
    said = [ln for ln in done.out.splitlines() if ln.startswith(("Pick:", "Keep what you have:"))][-1]
    flags = flags_of("".join(ln for ln in done.out.splitlines() if ln.startswith("In your script:")))
    if got["pick"] != "keep" and not flags:
        return f"no DataLoader arguments in the answer for {got['pick']}"
    figures = {key: float(got.get(key, 1.0)) for key in ("speedup", "speedup_ci_low", "speedup_ci_high")}
    return Claim(pick=str(got["pick"]), flags=flags, advise_s=done.wall_s, said=said, **figures)


class Timing(NamedTuple):
    """The turns' seconds at the script's own setting and at the pick: steady epochs (the truth), the whole
    training and the whole process."""

    own_s: List[float]
    pick_s: List[float]
    own_train_s: List[float]
    pick_train_s: List[float]
    own_wall_s: List[float]
    pick_wall_s: List[float]


PRINTED = re.compile(re.escape(MARK) + r"([\d.]+) steady_s=([\d.]+)")


def train_seconds(done: Done) -> Optional[Tuple[float, float]]:
    """(steady, whole) training seconds the script printed; the slowest rank's under torchrun; None if it failed."""
    got = [(float(m.group(2)), float(m.group(1))) for m in PRINTED.finditer(done.out)]
    return (max(s for s, _ in got), max(w for _, w in got)) if done.rc == 0 and got else None


def time_turns(case: Case, flags: List[str], turns: int, small: bool) -> Timing | str:
    """The script plainly at its own setting and at `flags`, in turns, each pair in the other order on the next."""
    got = Timing([], [], [], [], [], [])
    for turn in range(turns):
        for side, extra in [("own", []), ("pick", flags)][:: 1 if turn % 2 == 0 else -1]:
            done = run_group(command(case, small, extra), RUN_TIMEOUT_S, cwd=ROOT, env=env_for())
            seconds = train_seconds(done)
            if seconds is None:
                return f"the plain run at {side} {' '.join(extra)}: {failure(done, RUN_TIMEOUT_S)}"
            getattr(got, f"{side}_s").append(seconds[0])
            getattr(got, f"{side}_train_s").append(seconds[1])
            getattr(got, f"{side}_wall_s").append(done.wall_s)
    return got


def row_of(name: str, claim: Claim, timing: Timing) -> Dict[str, object]:
    """The panel's row: the claim, the truth (median of the turns' ratios) and its spread, held, miss and error."""
    truth = statistics.median(ratios := [own / pick for own, pick in zip(timing.own_s, timing.pick_s)])
    low, high = claim.speedup_ci_low, claim.speedup_ci_high
    held = low <= truth <= high
    miss = 0.0 if held else (low - truth if truth < low else truth - high) / truth
    return {
        "script": name,
        **claim._asdict(),
        "truth": truth,
        "truth_spread": [min(ratios), max(ratios)],
        "held": held,
        "miss_pct": 100 * miss,
        "error_pct": 100 * (claim.speedup / truth - 1),
        **timing._asdict(),
    }


HEAD = f"{'script':<14}{'pick':<16}{'claimed x (95%)':<21}{'truth x (turns)':<21}{'held':<6}{'miss':>7}{'error':>8}"


def row_line(row: Dict[str, object]) -> str:
    """One row of the printed table."""
    name = f"{row['script']:<14}"
    if row.get("failed"):
        return f"{name}failed: {row['failed']}"
    if row["pick"] == "keep":
        return f"{name}{row['said']}"
    claimed = f"{row['speedup']:.2f} ({row['speedup_ci_low']:.2f}-{row['speedup_ci_high']:.2f})"
    truth = f"{row['truth']:.2f} ({row['truth_spread'][0]:.2f}-{row['truth_spread'][1]:.2f})"
    held = f"{'yes' if row['held'] else 'NO':<6}{row['miss_pct']:>6.1f}%{row['error_pct']:>+7.1f}%"
    return f"{name}{row['pick']:<16}{claimed:<21}{truth:<21}{held}"


def summary(rows: List[Dict[str, object]]) -> str:
    """The panel's verdict against issue 81's targets."""
    timed = [r for r in rows if "truth" in r]
    failed = sum(bool(r.get("failed")) for r in rows)
    if not timed:
        return f"no row timed ({failed} failed)"
    misses = [r for r in timed if not r["held"]]
    worst = max((r["miss_pct"] for r in timed), default=0.0)
    error = statistics.median(abs(r["error_pct"]) for r in timed)
    ok = len(misses) <= 1 and worst <= 5 and error <= 10 and not failed
    return (
        f"{len(timed)} rows timed, {failed} failed; intervals that miss their truth: {len(misses)} (target <= 1); "
        f"worst miss {worst:.1f}% of the truth (target <= 5%); median |prediction error| {error:.1f}% "
        f"(target <= 10%): {'met' if ok else 'NOT met'}"
    )


def run_case(name: str, args: argparse.Namespace, work: Path) -> Dict[str, object]:
    """One row: the case advised, then timed in turns at its own setting and at the pick."""
    case = PANEL[name]
    claim = advise(case, work / name, args)
    if isinstance(claim, str):
        return {"script": name, "failed": f"wif-advise: {claim}"}
    if claim.pick == "keep":
        return {"script": name, **claim._asdict()}
    timing = time_turns(case, claim.flags, turns=args.turns, small=args.small)
    if isinstance(timing, str):
        return {"script": name, **claim._asdict(), "failed": timing}
    return row_of(name, claim, timing)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scripts", default=",".join(PANEL), help=f"a comma-separated subset of {', '.join(PANEL)}")
    ap.add_argument("--minutes", type=float, default=3.0, help="wif-advise --minutes for each script")
    ap.add_argument("--overrides", default="", help="wif-advise's, e.g. 'measure.contended_pct=1000' when shared")
    ap.add_argument("--turns", type=int, default=5, help="pairs of plain runs (own setting, pick) a script")
    ap.add_argument("--small", action="store_true", help="each script at about a third of its size (the suite's)")
    ap.add_argument("--out", type=Path, help="write the rows and the machine's load here, as JSON")
    args = ap.parse_args()
    args.names = [s for s in args.scripts.split(",") if s]
    if set(args.names) - set(PANEL):
        ap.error(f"no such script in the panel: {', '.join(sorted(set(args.names) - set(PANEL)))}")
    return args


def main() -> None:
    args = parse()
    work = Path(tempfile.mkdtemp(prefix="wif-truth-"))
    print(f"work folder (each advice's store and log): {work}; load {os.getloadavg()}", flush=True)
    report = {"minutes": args.minutes, "turns": args.turns, "small": args.small, "load_before": os.getloadavg()}
    report["rows"] = []
    print(HEAD, flush=True)
    for name in args.names:
        row = run_case(name, args, work)
        report["rows"].append(row)
        print(row_line(row), flush=True)
        if args.out:  # after every row: a panel cut short keeps what it has
            args.out.write_text(json.dumps({**report, "load_after": os.getloadavg()}, indent=1))
    print(summary(report["rows"]), flush=True)


if __name__ == "__main__":
    main()
