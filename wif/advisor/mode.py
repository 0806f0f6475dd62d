"""What the advice runs on: train.py's harness or a user's script, two implementations of `Mode`.

The command chooses the mode once: `Harness` for train.py's overrides, with its lines to paste here, or
`wif.advisor.script.mode.Script` for `wif-advise -- COMMAND`. The steps ask the mode; the runner only runs.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from wif.advisor import candidates
from wif.advisor.advice import Options
from wif.advisor.candidates import Candidate, apply
from wif.advisor.runner import Recording, Runner
from wif.config import Augment, Config, DataSource, PageCache, TrainerMode
from wif.config.compose import STUDY_COMMAND
from wif.dataloader_args import ARGS, BY_NAME

Say = Callable[[str], None]


class Mode(Protocol):
    """What differs between advising train.py's runs and advising a user's own script."""

    bound_label: str  # what the bound is, as the answer names it
    evaluates_alike: bool  # the pasted settings reach the script's evaluation loader too

    def introduce(self, opts: Options, say: Say) -> None:
        """Say what the advice runs, before its first line of its own."""

    def runner(self, recording: Recording, *, opts: Options, deadline: float, say: Say) -> Runner:
        """The runner of every measurement, on time.monotonic()'s `deadline`."""

    def bound(self, base: Config, epochs: int, n_train: int) -> Optional[Config]:
        """The bound's run; None: the configured run's own step time stands for it."""

    def knobs(
        self, base: Config, best: Candidate, cuda: bool, ram_free_bytes: Optional[float], items: int
    ) -> List[Candidate]:
        """The other knobs at the best worker count. The arguments are `candidates.extras`'."""

    def resident(self, base: Config, cuda: bool) -> List[Candidate]:
        """The settings with no loader beside the step, tried whatever the workers gave."""

    def lines(self, overrides: Sequence[str], pick: Candidate, pin: bool) -> Tuple[str, str]:
        """The pick's lines: (what to paste, how to run it). `pin` is the configured pin_memory."""

    def failure(self, err: RuntimeError) -> Exception:
        """The advice's failure, as the command says it."""


class Harness:
    """The advice over train.py's harness: a study's runs, its bound `data=fixed`, its own lines."""

    bound_label = "data=fixed"
    evaluates_alike = False  # the study's own validation is timed apart

    def introduce(self, opts: Options, say: Say) -> None:
        """Nothing to say: the steps say the data and the minutes."""

    def runner(self, recording: Recording, *, opts: Options, deadline: float, say: Say) -> Runner:
        """A runner of study runs, each a supervised child of this process."""
        return Runner(recording, deadline=deadline, say=say)

    def bound(self, base: Config, epochs: int, n_train: int) -> Optional[Config]:
        """data=fixed at the configured model, step, batch and image size, the measured run's `n_train` items an epoch.

        None with data=custom: the user's Dataset decides the inputs' shape, which data=fixed cannot know.
        """
        if base.data.source is DataSource.custom:
            return None
        conf = apply(base, Candidate(name="bound", keys={"loader.num_workers": 0}))
        d = conf.data
        d.source, d.format, d.preload, d.augment = DataSource.fixed, None, False, Augment.none
        d.page_cache, d.num_train, d.fraction, d.val_split = PageCache.warm, max(n_train, 1), 1.0, 0.0
        conf.transfer.uint8 = False
        conf.trainer.mode, conf.trainer.epochs = TrainerMode.train, epochs
        return conf

    knobs = staticmethod(candidates.extras)  # the loader's, the copy's and the dataset's knobs
    resident = staticmethod(candidates.resident)  # on a GPU, the whole dataset on the device

    def lines(self, overrides: Sequence[str], pick: Candidate, pin: bool) -> Tuple[str, str]:
        """(the DataLoader arguments for one's own script, the `wif-study` line)."""
        return dataloader_kwargs(pick, pin), train_line(overrides, pick)

    def failure(self, err: RuntimeError) -> Exception:
        """The error as it is: the advice failed (exit 1)."""
        return err


def train_line(overrides: Sequence[str], pick: Candidate) -> str:
    """The `wif-study` line applying the pick, keeping the user's other overrides."""
    mine = set(pick.keys)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in mine]
    return " ".join([STUDY_COMMAND, *kept, *pick.overrides()])


def loader_args(pick: Candidate, pin: bool) -> Dict[str, Any]:
    """The pick's DataLoader keyword arguments, by name: a framework's own fields are made from them."""
    k = pick.keys
    args: Dict[str, Any] = {"num_workers": pick.workers}
    if pick.workers > 0:
        args.update(persistent_workers=pick.persistent, prefetch_factor=pick.prefetch)
    args["pin_memory"] = bool(k.get("loader.pin_memory", pin))
    for arg in [arg for arg in ARGS if arg.ordered and arg.name not in args]:  # the rest, where the pick sets them
        if k.get(f"loader.{arg.name}", arg.default) != arg.default:  # a worker-only one is set with workers alone
            args[arg.name] = k[f"loader.{arg.name}"]
    return args


def dataloader_kwargs(pick: Candidate, pin: bool) -> str:
    """The DataLoader keyword arguments, and the copy's, to paste into one's own script."""
    k = pick.keys
    if k.get("transfer.kind") == "resident":
        return "no DataLoader: the whole dataset moved to the device once, each batch gathered there by index"
    if k.get("engine.name") not in (None, "dataloader"):
        return f"engine={k['engine.name']} (not a DataLoader: {pick.workers} threads of torchdata.nodes)"
    args = {key: value for key, value in loader_args(pick, pin).items() if key != "in_order"}
    pasted = ", ".join(BY_NAME[k].pasted(v) for k, v in args.items())
    line = f"DataLoader(dataset, batch_size=..., shuffle=True, {pasted})"
    if k.get("data.preload"):  # the gain is partly the dataset's: the loader's arguments alone would not give it
        line = "a dataset that holds its decoded images in RAM (wif's data.preload=true), " + line
    return line + ("; copy with .to(device, non_blocking=True)" if pick.copy_hidden else "")
