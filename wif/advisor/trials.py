"""What the advice's steps hand on: its context, what step 1 measured, and the loader-only trials of step 2.

`Trials` runs the trials and predicts each candidate's epoch from them (wif.advisor.predict). The rates the
prediction takes from the runs are here too: the loader's from its trial, the step's from the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from wif.advisor import candidates
from wif.advisor.advice import TRIAL_EPOCHS, Options
from wif.advisor.answer import Bound
from wif.advisor.candidates import Candidate, loader_only
from wif.advisor.limit import Limit, or_zero
from wif.advisor.mode import Mode
from wif.advisor.predict import Loader, Prediction, Step, batch_sizes, cannot_win, item_time, predict
from wif.advisor.runner import Failure, Measured, Runner
from wif.config import Config
from wif.measure import names
from wif.watcher.proof import UNREACHED


@dataclass(frozen=True)
class Context:
    """What every step reads: the configuration, its overrides, the options, the mode, its runner and the machine."""

    base: Config
    overrides: List[str]
    opts: Options
    mode: Mode  # train.py's harness or the user's script: what differs between the two
    runner: Runner
    cuda: bool
    cores: int
    say: Callable[[str], None]


@dataclass(frozen=True)
class Measurement:
    """Step 1's runs: the configured setting's and the bound's, and what an epoch can attain."""

    current: Candidate  # the configured setting
    current_run: Measured
    bound_run: Optional[Measured]  # None: no bound run, or one that was no bound
    bound: Bound
    sizes: List[int]  # an epoch's batches
    step: Step  # the step's rates, at the bound

    @property
    def items(self) -> int:
        """The images an epoch takes, as the configured run counted them."""
        return self.current_run.n_train


@dataclass(frozen=True)
class Found:
    """Where the time goes: the sentence, the limit, and whether loader settings are searched."""

    data_bound: bool
    sentence: str
    limit: Limit
    searched: bool


@dataclass
class Trials:
    """The loader-only trials: each candidate made, its run, its ceiling, and those the minutes cut."""

    ctx: Context
    measured: Measurement
    made: Dict[str, Candidate] = field(init=False)  # the table's candidates, in the order they were made
    runs: Dict[str, Measured] = field(default_factory=dict)  # each candidate's finished trial
    ceilings: Dict[str, float] = field(default_factory=dict)  # each candidate's loader alone, images a second
    cut: List[str] = field(default_factory=list)  # candidates whose trial the minutes cut short or never started
    unreached: Dict[str, str] = field(default_factory=dict)  # candidates whose order did not reach the loader: why

    def __post_init__(self) -> None:
        self.made = {"current": self.measured.current}

    @property
    def batches(self) -> int:
        """Batches an epoch of each trial: --batches, at most an epoch's."""
        return min(len(self.measured.sizes), self.ctx.opts.batches)

    @property
    def table_ceilings(self) -> Dict[str, float]:
        """The ceilings as the table shows them: where the current setting has none, w0's stands for it."""
        return {"current": self.ceilings.get("w0", math.nan), **self.ceilings}

    def run_trial(self, cand: Candidate) -> Optional[float]:
        """Try `cand` alone, said: its ceiling in images a second; None where its trial did not finish."""
        ctx, current = self.ctx, self.measured.current
        if cand.workers == 0 and current.workers == 0 and not cand.keys.keys() - {"loader.num_workers"}:
            # the configured run fetched in-process: its data wait is this candidate's fetch
            self.ceilings[cand.name] = self.measured.items / self.measured.current_run.mean(names.DATA_WAIT_S)
            return self.ceilings[cand.name]
        if self.unreached:  # it would not reach the loader either: no minutes spent on it
            self.unreached[cand.name] = f"not tried ({UNREACHED} in {next(iter(self.unreached))}'s trial)"
            ctx.say(f"  loader only {cand.name:<16} {self.unreached[cand.name]}")
            return None
        conf = loader_only(ctx.base, cand, batches=self.batches, epochs=TRIAL_EPOCHS)
        m = ctx.runner.run(conf, "loader", cand.name)
        if m.ok:
            self.ceilings[cand.name] = min(m.n_train, self.batches * ctx.base.data.batch_size) / m.median()
        ctx.say(
            f"  loader only {cand.name:<16} "
            + (f"{self.ceilings[cand.name]:>9,.0f} img/s" if m.ok else f"{m.status}: {m.error}")
        )
        if not m.ok:
            self.cut.extend([cand.name] if m.failure is Failure.OUT_OF_TIME else [])
            self.unreached.update({cand.name: m.error} if m.failure is Failure.UNREACHED else {})
            return None
        self.runs[cand.name] = m
        return self.ceilings[cand.name]

    def add(self, cand: Candidate) -> Optional[float]:
        """Make `cand` one of the table's candidates and try it; its ceiling, or None."""
        self.made[cand.name] = cand
        return self.run_trial(cand)

    def by_workers(self, count: int, phase: str) -> Optional[float]:
        """`count` persistent workers tried: wif-tune's measure of a count. `phase` is the search's."""
        return self.add(candidates.workers(self.ctx.base, count, self.ctx.cuda))

    def beaten(self, count: int, best: int) -> bool:
        """Whether `count` workers, fewer than the best, are predicted unable to beat it: then it gets no trial."""
        top = f"w{best}"
        return (
            count < best
            and top in self.runs
            and cannot_win(
                items=self.measured.items,
                workers=count,
                in_process_img_s=self.ceilings.get("w0", math.nan),
                best_epoch_s=self.predicted(self.made[top]).epoch_s,
                margin=self.ctx.opts.margin,
            )
        )

    def predicted(self, cand: Candidate) -> Prediction:
        """The candidate's epoch predicted from its trial; at 0 workers, from the configured run's own fetch."""
        ctx, measured = self.ctx, self.measured
        bs = ctx.base.data.batch_size
        if cand.name in self.runs:
            trial = self.runs[cand.name]
            rates = loader_rates(trial, cand, batch_size=bs, batches=self.batches, cores=ctx.cores)
        else:
            rates = in_process_rates(measured.current_run, cand)
        return predict(measured.sizes, measured.step, rates, cores=ctx.cores)

    def predictions(self) -> Dict[str, Prediction]:
        """Every candidate with a ceiling, predicted; where the current setting has none, w0's stands for it."""
        out = {
            name: self.predicted(cand) for name, cand in self.made.items() if name in self.runs or name in self.ceilings
        }
        if "current" not in out and "w0" in out:
            out["current"] = out["w0"]
        return out


def loader_rates(trial: Measured, cand: Candidate, batch_size: int, batches: int, cores: int) -> Loader:
    """The candidate's rates from its loader-only trial of `batches` batches an epoch.

    Args:
        trial: the loader-only run.
        cand: the candidate it tried.
        batch_size: the configured batch size.
        batches: the trial's batches an epoch.
        cores: the host's usable cores.
    """
    sizes = batch_sizes(trial.n_train, batch_size, batches)
    epoch = trial.median(names.EPOCH_TIME_S)
    startup = 0.0
    if cand.workers > 0 and not cand.persistent:  # its steady epochs' first batch waits on the start-up
        first = item_time(sizes, cand.workers, epoch, cand.prefetch) * max(sizes)
        startup = max(trial.mean(names.FIRST_BATCH_S) - first, 0.0)
    item = item_time(sizes, cand.workers, epoch, cand.prefetch, startup)
    cpu = trial.mean(names.TREE_CPU_S) / trial.mean(names.EPOCH_TIME_S)  # exact: the trial's processes' CPU seconds
    if math.isnan(cpu):  # a run from before tree_cpu_s: the sampler missed ~40% of 0.15 s epochs
        cpu = trial.mean(names.CPU_UTIL_PCT) / 100.0 * cores
    if math.isnan(cpu):  # an epoch shorter than the sampler's interval: count the fetch as all CPU
        cpu = float(min(max(cand.workers, 1), cores))
    return Loader(
        workers=cand.workers,
        item_s=item,
        cpu_cores=cpu,
        prefetch=cand.prefetch,
        persistent=cand.persistent,
        startup_s=startup,
        copy_hidden=cand.copy_hidden,
    )


def in_process_rates(run: Measured, cand: Candidate) -> Loader:
    """A 0-worker setting's rates from its training run: its data wait is its fetch."""
    return Loader(
        workers=0,
        item_s=run.mean(names.DATA_WAIT_S) / max(run.n_train, 1),
        prefetch=cand.prefetch,
        persistent=False,
        copy_hidden=cand.copy_hidden,
    )


def step_rates(run: Measured, bound: Optional[Measured], batch_size: int, cores: int, on_cpu: bool) -> Step:
    """The step's time per batch at the bound, data=fixed, or from the configured run's own step time.

    Args:
        run: the configured setting's run.
        bound: the bound's run; None or failed: the configured run's step stands for it.
        batch_size: the configured batch size.
        cores: the host's usable cores.
        on_cpu: whether the step computes on the host's cores.
    """
    src = bound if bound is not None and bound.ok else run
    per_batch = src.mean(names.COMPUTE_S) / max(len(batch_sizes(src.n_train, batch_size)), 1)
    copy = run.mean(names.COPY_S) / max(len(batch_sizes(run.n_train, batch_size)), 1)
    threads = int(run.tags.get(names.TAG_TORCH_THREADS, cores) or cores)
    return Step(
        compute_s=per_batch,
        copy_s=or_zero(copy),
        cores=float(min(threads, cores)) if on_cpu else 1.0,
        on_cpu=on_cpu,
    )
