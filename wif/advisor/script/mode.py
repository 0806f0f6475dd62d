"""`wif-advise [OPTIONS] [KEY=VALUE...] -- python my_train.py ARGS...`: the advice for one's own script.

The script runs under `wif.watch`, otherwise unchanged. First the command runs to its `wif.watch` call: the
`probe` reports the DataLoader it watches and ends there. `wif.advisor.advise_cli` refuses a missing program
or script first. A failing command, no `wif.watch` call, or no DataLoader is said in one line, exit 2, with no
run left. Then `wif.advisor.steps` gives the advice, asking `Script`. Its runs are the script's
own (`wif.advisor.script.runner`). The answer's lines are the `DataLoader(...)` keywords to paste. Overrides
before `--` set what they set for train.py, such as tracking.uri, measure.contended_pct and device; the data
and model are the script's.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wif.advisor.advice import PROG, Options
from wif.advisor.candidates import Candidate, script_extras, training
from wif.advisor.mode import Say, loader_args
from wif.advisor.runner import Recording, Runner
from wif.advisor.script import warm
from wif.advisor.script.command import execute
from wif.advisor.script.runner import LOADER_KEYS, ScriptRunner
from wif.config import Config, ConfigError, Device
from wif.config.compose import load_config
from wif.dataloader_args import BY_NAME
from wif.measure.tracking import check_server_answers, default_tracking_uri
from wif.watcher.origin import NAMED

PROBE_TIMEOUT_S = 600.0  # the command's start, up to its wif.watch call: imports, data, model


def your_script() -> None:
    """`data._target_` of the advice's configuration: the data is the script's own, built by the script."""
    raise ConfigError("wif-advise -- COMMAND: the data is your script's own; train.py cannot build it")


def probe(command: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> Dict[str, Any]:
    """The DataLoader the command watches, from its run up to its `wif.watch` call; ConfigError otherwise."""
    where = tempfile.mkdtemp(prefix="wif-advise-probe-")
    out = os.path.join(where, "loader.json")
    orders = {"uri": "", "run_id": None, "mode": "probe", "out": out}
    # cold: the server warms up meanwhile
    rc, last = execute(command, orders, os.path.join(where, "output.log"), timeout=timeout, warm_start=False)
    shown = " ".join(command)
    if not os.path.exists(out):
        if rc == 0:
            raise ConfigError(
                f"`{shown}` ended without a training loader: no DataLoader's epoch started with gradients enabled"
                + (f" and {NAMED}={os.environ[NAMED]}" if os.environ.get(NAMED) else "")
                + " (--loader names one by its dataset's class; an iterable that is no DataLoader: "
                "`for batch in wif.watch(batches):` in the loop, docs/advise.md)"
            )
        raise ConfigError(f"`{shown}` failed before wif.watch (exit {rc}): {last or 'no output'}")
    found = json.load(open(out))
    if not found.pop("has_dataloader"):
        raise ConfigError(
            f"`{shown}` watches a {found['loader']} with no DataLoader inside: wif-advise changes a "
            "DataLoader's settings (wif.watch(loader) of a DataLoader, or of a wrapper holding one)"
        )
    return found


@dataclass
class Script:
    """The advice's mode for one command: its configuration, with the probed loader's settings, and how to run it."""

    command: List[str]
    probed: Dict[str, Any]
    base: Config

    bound_label = "the first batches replayed"

    @property
    def evaluates_alike(self) -> bool:
        """The HF Trainer builds its evaluation loader from the same TrainingArguments fields."""
        return self.probed.get("framework") == "transformers"

    def introduce(self, opts: Options, say: Say) -> None:
        """Say the command, its training loader, its windows, and that each measuring run runs it again."""
        p, cap = self.probed, self.cap(opts)
        capped = f"{cap} batches (--batches)"
        if cap < opts.batches:
            capped = (
                f"{cap} batches (--batches {opts.batches}: fewer, so that the race fits in --minutes "
                f"{opts.minutes:g}; its first batches took {p['batch_s']:.2f} s each)"
            )
        made = f", made at {p['made_at']}" if p.get("made_at") else ""
        run_by = {"lightning": " (run by Lightning's Trainer)", "transformers": " (run by the HF Trainer)"}
        say(
            f"{PROG}: your command: {' '.join(self.command)}; its training loader{run_by.get(p.get('framework'), '')}:"
            f" a {p['loader']} over a {p.get('dataset', 'dataset')}{made} (batch {p['batch_size']}, "
            + ", ".join(f"{k}={p[k]}" for k in LOADER_KEYS)
            + f"); measured in windows of {capped}: an epoch of at most that many is one, a longer one is cut"
        )
        say(
            f"{PROG}: each measuring run is your command, run again: what it writes (checkpoints, logs, its own "
            "trackers) it writes each time, and a script that resumes from its checkpoints resumes; WIF_ADVISE=1 "
            "is set in its environment so that it can skip them"
        )

    def cap(self, opts: Options) -> int:
        """An epoch's batches in every measuring run: `sized_cap` of the probe's batch time."""
        return sized_cap(opts.batches, self.probed.get("batch_s"), opts.minutes)

    def runner(self, recording: Recording, *, opts: Options, deadline: float, say: Say) -> Runner:
        """A runner whose every run is the command again, under wif.watch."""
        return ScriptRunner(
            recording, deadline=deadline, say=say, command=self.command, probed=self.probed, cap=self.cap(opts)
        )

    def bound(self, base: Config, epochs: int, n_train: int) -> Optional[Config]:
        """The script as it is, its first batches replayed from its second epoch on: the orders' `bound`."""
        return training(base, Candidate(name="bound", keys={}), epochs)

    def knobs(
        self, base: Config, best: Candidate, cuda: bool, ram_free_bytes: Optional[float], items: int
    ) -> List[Candidate]:
        """DataLoader's own knobs: the script's copy and data stay its own. Worker threads where it imports OpenCV."""
        threaded = bool(self.probed.get("threaded"))
        return script_extras(base, best, cuda, ram_free_bytes=ram_free_bytes, items=items, threaded=threaded)

    def resident(self, base: Config, cuda: bool) -> List[Candidate]:
        """None: the script's dataset stays where the script puts it."""
        return []

    def lines(self, overrides: Sequence[str], pick: Candidate, pin: bool) -> Tuple[str, str]:
        """(the lines to paste, in the terms of what made the training loader; the command to run again)."""
        return paste(self.probed, loader_args(pick, pin), self.command)

    def failure(self, err: RuntimeError) -> Exception:
        """The script failed as it is: the command's fault, said as a bad input is (exit 2)."""
        return ConfigError(f"`{' '.join(self.command)}` under wif.watch: {err}")


MIN_CAP = 16  # batches an epoch at least: four workers' prefetch twice over, the pipeline in its steady state
STARTS_S = 60.0  # the advice's process starts, about: a dozen or more runs of a few seconds each
# its epochs at the current setting's pace: measure 3, bound 3, trials 12 at the loader's pace, a race of 2x3 runs
PLANNED_EPOCHS = 36


def sized_cap(batches: int, batch_s: Optional[float], minutes: float) -> int:
    """An epoch's batches in every run: `--batches`, or fewer where at the probe's `batch_s` the race would not fit."""
    if not batch_s or batch_s <= 0:
        return batches
    target = max(60.0 * minutes - STARTS_S, 0.0) / PLANNED_EPOCHS  # seconds an epoch may take
    return max(min(batches, int(target / batch_s)), min(MIN_CAP, batches))


def paste(probed: Dict[str, Any], args: Dict[str, Any], command: Sequence[str]) -> Tuple[str, str]:
    """(the lines to paste, in the terms of whatever made the training loader; how to run it again)."""
    again = f"then as before: {' '.join(command)}"
    made = f" (made at {probed['made_at']})" if probed.get("made_at") else ""
    if probed.get("framework") == "transformers":
        fields = ", ".join(BY_NAME[k].trainer_pasted(v) for k, v in args.items() if BY_NAME[k].trainer_field)
        line = f"TrainingArguments(<your other arguments>, {fields})"
        for k in [k for k in args if not BY_NAME[k].trainer_field]:
            line += f"; {BY_NAME[k].pasted(args[k])} has no TrainingArguments field: it needs the Trainer's "
            line += "get_train_dataloader"
        return line, f"those TrainingArguments fields, {again}"
    pasted = ", ".join(BY_NAME[k].pasted(v) for k, v in args.items())
    line = f"DataLoader(<your dataset and other arguments>, {pasted})"
    if probed.get("framework") == "lightning":
        return f"in your train_dataloader(){made}: {line}", f"those DataLoader arguments in train_dataloader(), {again}"
    return line + made, f"those DataLoader arguments in your script, {again}"


def prepare(overrides: Sequence[str], command: Sequence[str], config_dir: Optional[Path] = None) -> Script:
    """The command probed, and the advice's configuration; ConfigError in one line if it cannot run.

    The command line has checked that the command can start (wif.advisor.advise_cli.check_command).
    """
    if warm.warm_target(command) is not None:
        warm.warm_up()  # the server's imports under way while the configuration is composed and the probe runs
    try:
        base = load_config(list(overrides) + ["data=custom", f"data._target_={__name__}.your_script"], config_dir)
        check_server_answers(base.tracking.uri)  # before the script runs, not after its probe
        t0 = time.monotonic()
        found = probe(command)
    except BaseException:  # a refusal or Ctrl-C: no run will fork from the server
        warm.stop()
        raise
    if "MLFLOW_TRACKING_URI" not in os.environ and base.tracking.uri == default_tracking_uri():
        base.tracking.uri = f"sqlite:///{Path('mlflow.db').resolve()}"  # the script's runs: the same store, any cwd
    if found.get("modules") and warm.warm_target(command) is not None:
        warm.warm_up(found["modules"])  # the script's frameworks imported once, in the server
    if found.get("step_device") == "cpu":  # the script's step, not the machine: pinning does nothing without CUDA
        base.device = Device.cpu
    lo = base.loader
    lo.name = "script"
    for key in LOADER_KEYS:
        setattr(lo, key, found[key])
    lo.prefetch_factor = found["prefetch_factor"] if found["num_workers"] else None
    base.data.batch_size = int(found["batch_size"] or 1)
    base.data.fraction, base.data.val_split = 1.0, 0.0  # the script's data as it builds it: wif cuts nothing
    found["probe_s"] = time.monotonic() - t0
    return Script(command=list(command), probed=found, base=base)
