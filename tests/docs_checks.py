"""How each kind of documented command is checked in this process (tests/test_docs.py runs the checks)."""

from __future__ import annotations

import importlib
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
from hydra import compose
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from tests.conftest import ROOT
from tests.docs_commands import EXTERNAL, PYPROJECT, SCRIPTS, WHEEL, Doc, process_key, train_args
from wif.config import ConfigError, register_configs, validate

register_configs()

# Commands the docs show being refused, and the reason they show (the exit 2 of a bad setting).
REFUSED = {
    "python train.py -m loader=baseline data.fraction=0.1,1.5,0.4 preset=smoke": (
        "data.fraction=1.5 is outside (0, 1]: pass a share of the training set"
    ),
    "python train.py data=folder data.root=images preset=smoke": "1 of 17 image files under",
}


# Placeholder image folders in the docs: a tiny real ImageFolder stands in (`broken`: one file is no image).
PLACEHOLDER_ROOTS = {"/path/to/images": "good", "images": "broken"}
USER_CONF = "myconf"  # the docs' folder of a user's own YAML (--config-dir myconf)


@contextmanager
def hydra_context(config_dir: Optional[Path] = None) -> Iterator:
    """Hydra on conf/, with the user's folder where `--config-dir` puts it (wif.config.compose.wif_hydra)."""
    from wif.config.compose import wif_hydra

    with wif_hydra(config_dir) as loader:
        yield loader


def without_hydra(cfg: DictConfig) -> DictConfig:
    cfg = cfg.copy()
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra", None)  # as Hydra hands a job its config
    return cfg


def config_dir_of(argv: Sequence[str], user_conf: Path) -> Optional[Path]:
    """The folder `--config-dir myconf` names: the docs' user folder, written by the `user_conf` fixture."""
    if "--config-dir" not in argv:
        return None
    named = argv[list(argv).index("--config-dir") + 1]
    assert named == USER_CONF, f"--config-dir {named}: the docs' own folder is {USER_CONF}"
    return user_conf


def with_folders(overrides: Sequence[str], roots: Dict[str, Path]) -> List[str]:
    out = []
    for item in overrides:
        key, _, value = item.partition("=")
        out.append(
            f"data.root={roots[PLACEHOLDER_ROOTS[value]]}"
            if key == "data.root" and value in PLACEHOLDER_ROOTS
            else item
        )
    return out


def one_per_repeat(jobs: Sequence[Sequence[str]]) -> List[Sequence[str]]:
    """The jobs that differ in more than `repeat`: no check reads it (it only seeds the run), so a sweep's
    ten repeats of a cell pass or fail alike, and checking one of them keeps this module fast."""
    seen: Dict[Tuple[str, ...], Sequence[str]] = {}
    for job in jobs:
        repeats = [item.partition("=")[2] for item in job if item.startswith("repeat=")]
        assert all(r.isdigit() for r in repeats), f"repeat must be a whole number: {job}"
        seen.setdefault(tuple(item for item in job if not item.startswith("repeat=")), job)
    return list(seen.values())


CHECKED: Dict[tuple, Optional[str]] = {}  # (Hydra's own overrides, exports, job) -> why it cannot run, or None


def job_key(job: Sequence[str]) -> Tuple[str, ...]:
    """What a job's verdict depends on: its overrides in any order (Hydra applies groups first, then
    values), without `tracking.*`, which no check reads (nor MLFLOW_* exports: where the run is logged)."""
    keys = [item.partition("=")[0] for item in job]
    kept = [item for item in job if not item.startswith("tracking.")]
    return tuple(sorted(kept)) if len(set(keys)) == len(keys) else tuple(kept)


def checked_once(master: DictConfig, jobs: Sequence[Sequence[str]], env: tuple) -> List[Tuple[Sequence[str], str]]:
    """`bad_jobs` for the jobs no earlier command of the docs had checked under the same Hydra overrides
    (the README's study and its one-repeat version share theirs, and several pages show the same sweep)."""
    from wif.sweep.preflight import bad_jobs

    context = (tuple(master.hydra.overrides.hydra), tuple(kv for kv in env if not kv[0].startswith("MLFLOW_")))
    new = {(context, job_key(job)): job for job in jobs if (context, job_key(job)) not in CHECKED}
    found = {tuple(job): why for job, why in bad_jobs(master, list(new.values()))} if new else {}
    for key, job in new.items():
        CHECKED[key] = found.get(tuple(job))
    return [(job, CHECKED[(context, job_key(job))]) for job in jobs if CHECKED[(context, job_key(job))] is not None]


def documented_jobs(doc: Doc) -> Optional[int]:
    match = re.search(r"\b(\d[\d,]*) jobs\b", doc.comment)
    return int(match.group(1).replace(",", "")) if match else None


# --- the checks, one kind of command each ----------------------------------------------------------------


def check_train(doc: Doc, roots: Dict[str, Path], background: "Background", user_conf: Path) -> None:
    from wif.sweep.callback import plan_jobs

    multirun, prints, overrides = train_args(doc)
    bad: List[Tuple[Sequence[str], str]] = []
    if prints:  # --cfg/-p only print a config: cheap, so the real command runs
        proc = background.result(process_key(doc))
        assert proc.returncode == 0 and proc.stdout.strip(), f"{doc}\n{proc.stdout}\n{proc.stderr}"
        return
    overrides = with_folders(overrides, roots)
    with hydra_context(config_dir_of(doc.argv, user_conf)) as loader:
        if multirun:  # the master config as `-m` composes it; its jobs as the sweep plans and checks them
            master = loader.load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
            jobs = plan_jobs(master.hydra.sweeper.params or {}, master.hydra.overrides.task)
        else:  # one run: composed, typed and validated, then checked as a job of one
            master = compose("config", overrides=overrides, return_hydra_config=True)
            jobs = [list(master.hydra.overrides.task)]
            try:
                validate(OmegaConf.to_object(without_hydra(master)), here=False)
            except ConfigError as err:
                bad.append((jobs[0], str(err)))
        bad += checked_once(master, one_per_repeat(jobs), doc.env)
    expected = documented_jobs(doc)
    assert expected is None or len(jobs) == expected, f"{doc}: {len(jobs)} jobs, the docs say {expected}"
    if doc.text in REFUSED:
        assert bad, f"{doc}: the docs show it refused, but every job passed the check"
        assert all(REFUSED[doc.text] in why for _, why in bad), f"{doc}: refused for another reason: {bad}"
    else:
        assert bad == [], f"{doc}: {len(bad)} of {len(jobs)} jobs refused: {bad[:3]}"


def check_script(
    doc: Doc, name: str, argv: Sequence[str], roots: Optional[Dict[str, Path]] = None, user_conf: Optional[Path] = None
) -> None:
    """A console script of pyproject.toml: its module's parser takes the flags as its `main` parses them,
    and the Hydra overrides a tool takes compose, convert and validate as the tool composes them (a
    placeholder data.root replaced by a folder of images, as for train.py)."""
    from wif.config.compose import load_config

    module = importlib.import_module(SCRIPTS[name].partition(":")[0])
    if name == "wif":  # the list of commands: prints, exit 0
        assert module.main(list(argv)) == 0, f"{doc}: wif refuses {argv}"
        return
    if name in ("wif-advise", "wif-watch") and "--" in argv:  # the user's own script after `--`
        argv, command = list(argv[: list(argv).index("--")]), list(argv[list(argv).index("--") + 1 :])
        assert command[:2] == ["python", "-m"] and command[2].startswith("examples."), f"{doc}: not an example"
        check_example(Doc(doc.page, doc.line, tuple(command)))
    folder = config_dir_of(argv, user_conf)
    try:
        args = module.build_parser().parse_intermixed_args(list(argv))
    except SystemExit as exit:  # argparse's way of refusing a flag (its message is on stderr)
        pytest.fail(f"{doc}: {name} refuses these arguments (exit {exit.code})")
    if name == "wif-plan":  # a sweep's overrides: every cell composed and validated as the tool plans them
        planned_once(module.plan_cells, args.overrides, folder)
    elif getattr(args, "overrides", None) is not None:  # a placeholder folder (/path/to/images) made for it
        load_config(with_folders(args.overrides, roots or {}), folder)  # ConfigError if the overrides cannot run


PLANNED: Dict[tuple, Any] = {}  # (overrides, --config-dir) -> what wif-plan's plan_cells made of them


def planned_once(plan_cells: Callable[..., Any], overrides: Sequence[str], folder: Optional[Path]) -> Any:
    """`plan_cells` for overrides no earlier wif-plan of the docs had planned (`--no-probe` changes the price's
    source, not the cells): its ConfigError is raised each time, as it was the first."""
    key = (tuple(overrides), folder)
    if key not in PLANNED:
        try:
            PLANNED[key] = plan_cells(overrides, folder)
        except ConfigError as err:
            PLANNED[key] = err
    if isinstance(PLANNED[key], ConfigError):
        raise PLANNED[key]
    return PLANNED[key]


def check_benchmark(doc: Doc, background: "Background") -> None:
    script = ROOT / doc.argv[1]
    assert script.is_file() and script.parent == ROOT / "benchmarks", f"{doc}: no such benchmark"
    if "argparse" in script.read_text():  # it takes flags: --help must work
        proc = background.result(process_key(doc))
        assert proc.returncode == 0 and "usage:" in proc.stdout, f"{doc}\n{proc.stderr}"


def check_example(doc: Doc) -> None:
    """`python -m examples.X`: the module exists and takes the flags shown (tests/test_your_workload.py runs it)."""
    path = ROOT / (doc.argv[2].replace(".", "/") + ".py")
    assert path.is_file(), f"{doc}: no such example"
    flags = [w.split("=")[0] for w in doc.argv[3:] if w.startswith("--")]
    text = path.read_text()  # with the examples it builds its parser from (`from .X import parser`)
    used = re.findall(r"from (?:examples)?\.(\w+) import", text)
    text += "".join((path.parent / f"{m}.py").read_text() for m in used)
    assert all(f'"{flag}"' in text for flag in flags), f"{doc}: the example does not take {flags}"


def check_pip_wheel(doc: Doc) -> None:
    """`pip wheel --no-deps -w DIR .` then `pip install DIR/<the wheel it writes>`: this checkout's wheel."""
    if doc.argv[1] == "wheel":
        assert doc.argv[2:] in (("--no-deps", "-w", "dist", "."),), f"{doc}: builds something else than wif's wheel"
    else:
        assert doc.argv[2:] == (f"dist/{WHEEL}",), f"{doc}: the wheel is dist/{WHEEL}"


def check_pip(doc: Doc) -> None:
    extras = PYPROJECT["optional-dependencies"]
    target = doc.argv[3]
    match = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
    assert match, f"{doc}: installs {target}, not this checkout"
    missing = [x for x in (match.group(1) or "").split(",") if x and x not in extras]
    assert not missing, f"{doc}: no such extra {missing} in pyproject.toml (there are {sorted(extras)})"


def check_project_script(doc: Doc) -> None:
    """`scripts/X.sh`: an executable of this checkout that takes the flags shown (its usage lists them)."""
    script = ROOT / doc.argv[0]
    assert script.is_file() and os.access(script, os.X_OK), f"{doc}: no such executable script"
    flags = [w for w in doc.argv[1:] if w.startswith("--")]
    assert all(f"{flag})" in script.read_text() for flag in flags), f"{doc}: the script does not take {flags}"


def check_external(doc: Doc) -> None:
    prefix = next(p for p in EXTERNAL if doc.argv[: len(p)] == p)
    if prefix[0] == "mlflow":
        from mlflow.cli import cli

        command = cli.get_command(None, prefix[1])
        assert command is not None, f"{doc}: mlflow has no command {prefix[1]}"
        known = {opt for param in command.params for opt in param.opts}
        unknown = [w.split("=")[0] for w in doc.argv[2:] if w.startswith("-") and w.split("=")[0] not in known]
        assert not unknown, f"{doc}: mlflow {prefix[1]} has no option {unknown}"
    elif prefix[0] == "pip":
        assert doc.argv == prefix, f"{doc}: only `{' '.join(prefix)}` is allowed"


def check_nothing(doc: Doc) -> None:
    """For a kind whose form is its whole check."""


# The checks that need only the command, by kind.
DOC_CHECKS: Dict[str, Callable[[Doc], None]] = {
    "example": check_example,
    "pip-extra": check_pip,
    "pip-wheel": check_pip_wheel,
    "project-script": check_project_script,
    "pip-offline": check_nothing,  # its form is the check (KINDS): wif, with no index, from one folder
    "external": check_external,
    "export": check_nothing,  # applies to the commands after it in its block (doc_env)
}


class Background:
    """The checks' processes (python startup, torch and MLflow imports: seconds each), run one at a time on
    a worker thread while this process composes configs on the other core."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.started: Dict[str, Future] = {}
        self.work: Dict[str, Callable[[], Any]] = {}

    def add(self, key: str, work: Callable[[], Any]) -> None:
        self.work[key] = work

    def start(self, key: str) -> None:
        if key not in self.started:
            self.started[key] = self.pool.submit(self.work[key])

    def result(self, key: str) -> Any:
        self.start(key)
        return self.started[key].result()
