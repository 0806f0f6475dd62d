"""Every command the README and docs/ show is run by a test, and every link in them leads somewhere.

Each ```bash block of README.md and docs/*.md is read as bash reads it (a line ending in `\\` continues on
the next, `# comments` outside quotes are dropped, words are split by shlex, `export`s apply to the rest of
the block), and each command is covered by the real thing, no mocks:

- `python train.py -m ...` (or `wif-study -m ...`, the same command installed): the master config composed by
  Hydra as `-m` composes it, its jobs planned as the sweep plans them (`plan_jobs`) and checked as the sweep checks
  itself before its first job (`bad_jobs`); a `# N jobs` comment must match. `python train.py ...` (one run):
  composed, typed and validated, then checked as a job of one. `--cfg`: run for real. A few cheap ones also run
  for real (slow).
- `wif-report`, `wif-tune`, `wif-batch-size` (pyproject's console scripts): the parser of the module each
  names takes the flags; a tool's overrides compose and validate as the tool composes them.
- `python benchmarks/X.py`: the script exists and, where it takes flags, `--help` exits 0.
- `python -m examples.X`: the example exists and takes the flags shown (tests/test_your_workload.py runs it).
- `wif`: the list of commands prints. `--config-dir myconf`: the user's folder, written from the docs' ```yaml
  blocks whose first line names a file in it (`# myconf/loader/mine.yaml`).
- `pip wheel --no-deps -w DIR .` builds this checkout; `pip install DIR/wif-VERSION-py3-none-any.whl` installs the
  wheel it names (tests/test_package.py builds and installs it for real). `pip install -e ".[X]"`: X is an extra of
  pyproject.toml; `pip install --no-index --find-links DIR wif`: wif
  from a wheelhouse. `scripts/X.sh`: the script exists and takes the flags shown. Other programs: an
  explicit allow-list.

A command no rule covers fails, so a new command in the docs cannot go unchecked. Commands the docs show
being refused must be refused, with the message the docs show. To stay within about a minute on 2 cores,
the processes run on a worker thread beside the in-process checks, a sweep's repeats of a cell are checked
once (no check reads `repeat`), and a job two pages show is checked once.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
import tomllib
from hydra import compose
from hydra.types import RunMode
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from tests.conftest import ROOT, run_train
from wif.config import ConfigError, register_configs, validate

CONF = ROOT / "conf"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCRIPTS = PYPROJECT["scripts"]  # wif-report, wif-tune, wif-batch-size -> "module:main"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 220

register_configs()

# Programs that are not this project's: shown in the docs, trusted to exist (argv prefix -> why).
EXTERNAL = {
    ("pytest",): "the test suite (CI runs exactly `pytest`)",
    ("mlflow", "ui"): "MLflow's UI on the local store (its flags are checked against mlflow's CLI)",
    ("mlflow", "server"): "an MLflow tracking server (its flags are checked against mlflow's CLI)",
    ("pip", "install", "mlflow", "psycopg2-binary"): "the tracking server's own packages",
    (
        "apt-get",
        "install",
        "-y",
        "munge",
        "slurmctld",
        "slurmd",
        "slurm-client",
        "slurmdbd",
        "mariadb-server",
    ): "Debian's SLURM packages for scripts/slurm_local.sh (tests/test_slurm.py runs against them)",
    ("sacct",): "SLURM's accounting (tests/test_slurm.py reads it)",
}

# Commands the docs show being refused, and the reason they show (the exit 2 of a bad setting).
REFUSED = {
    "python train.py -m loader=baseline data.fraction=0.1,1.5,0.4 preset=smoke": (
        "data.fraction=1.5 is outside (0, 1]: pass a share of the training set"
    ),
    "python train.py data=folder data.root=images preset=smoke": "1 of 17 image files under",
}

# Cheap documented commands also run for real, in a subprocess: exit status, and what the output must show.
REAL_RUNS = {
    "python train.py trainer.mode=loader_only loader=pin_nb preset=smoke data.fraction=0.7": (0, "finished: "),
    "python train.py -m loader=baseline data.fraction=0.1,1.5,0.4 preset=smoke": (
        2,
        "Bad setting: 1 of 3 jobs of this sweep cannot run, so none was started",
    ),
    "python train.py data=folder data.root=images preset=smoke": (2, "cannot be read: train/class0/broken.png"),
}

# Placeholder image folders in the docs: a tiny real ImageFolder stands in (`broken`: one file is no image).
PLACEHOLDER_ROOTS = {"/path/to/images": "good", "images": "broken"}
USER_CONF = "myconf"  # the docs' folder of a user's own YAML (--config-dir myconf)
WHEEL = f"wif-{tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['version']}-py3-none-any.whl"


# --- reading the docs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """One documented command: where it is, its words, the `export`s before it in its block, its comment."""

    page: str
    line: int
    argv: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()
    comment: str = ""

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def split_comment(text: str) -> Tuple[str, str]:
    """(code, comment): a `#` starting a word outside quotes starts a comment, as in bash."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i], text[i + 1 :].strip()
    return text, ""


def commands_of(path: Path) -> List[Doc]:
    page = path.relative_to(ROOT).as_posix()
    docs: List[Doc] = []
    in_bash, env, buf, start = False, {}, "", 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            assert not buf, f"{page}:{start}: a command continues past the end of its block"
            in_bash, env = (not in_bash and line.strip() == "```bash"), {}
            continue
        if not in_bash:
            continue
        if not buf:
            start = number
        if line.rstrip().endswith("\\") and not split_comment(line)[1]:
            buf += line.rstrip()[:-1] + " "
            continue
        code, comment = split_comment(buf + line)
        buf = ""
        if not code.strip():
            continue
        argv = tuple(shlex.split(code))
        docs.append(Doc(page, start, argv, tuple(env.items()), comment))
        if argv[0] == "export":
            env.update(a.split("=", 1) for a in argv[1:] if "=" in a)
    return docs


COMMANDS = [doc for page in PAGES for doc in commands_of(page)]


# --- helpers ---------------------------------------------------------------------------------------------


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


def write_image_folder(root: Path, broken: bool) -> Path:
    """train/ and test/, two classes of four small PNGs each (17 files with the broken one)."""
    from PIL import Image

    for split in ("train", "test"):
        for k in range(2):
            folder = root / split / f"class{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(4):
                Image.new("RGB", (8, 8), (60 * i, 120 * k, 90)).save(folder / f"{i}.png")
    if broken:
        (root / "train" / "class0" / "broken.png").write_bytes(b"this is not an image")
    return root


@pytest.fixture(scope="session")
def user_conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """myconf/, from the docs' ```yaml blocks whose first line is `# myconf/...` (the file they show)."""
    root = tmp_path_factory.mktemp("user") / USER_CONF
    for page in PAGES:
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S):
            first = block.splitlines()[0]
            if first.startswith(f"# {USER_CONF}/"):
                path = root / first[len(f"# {USER_CONF}/") :].split()[0].rstrip(":")  # the name, then what it is
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(block)
    return root


@pytest.fixture(scope="session")
def image_roots(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    base = tmp_path_factory.mktemp("folders")
    return {name: write_image_folder(base / name, broken=name == "broken") for name in ("good", "broken")}


@pytest.fixture
def doc_env(monkeypatch: pytest.MonkeyPatch, cache_dir: Path, tmp_path: Path):
    """The environment a documented command runs in: a throwaway store and cache, then its block's exports."""

    def apply(doc: Doc) -> None:
        monkeypatch.setenv("WIF_CACHE_DIR", str(cache_dir))
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
        for key, value in doc.env:
            monkeypatch.setenv(key, value)

    return apply


def study_words(doc: Doc) -> Tuple[str, ...]:
    """What follows `python train.py` or `wif-study` (the same program)."""
    return doc.argv[1:] if doc.argv[0] == "wif-study" else doc.argv[2:]


def config_dir_of(argv: Sequence[str], user_conf: Path) -> Optional[Path]:
    """The folder `--config-dir myconf` names: the docs' user folder, written by the `user_conf` fixture."""
    if "--config-dir" not in argv:
        return None
    named = argv[list(argv).index("--config-dir") + 1]
    assert named == USER_CONF, f"--config-dir {named}: the docs' own folder is {USER_CONF}"
    return user_conf


def train_args(doc: Doc) -> Tuple[bool, bool, List[str]]:
    """(multirun, prints a config (--cfg), overrides) of `python train.py ...` or `wif-study ...`."""
    multirun, prints, overrides = False, False, []
    words = iter(study_words(doc))
    for word in words:
        if word in ("-m", "--multirun"):
            multirun = True
        elif word in ("--cfg", "-c", "-p", "--package"):
            prints = True
            next(words)
        elif word == "--config-dir":
            next(words)  # config_dir_of
        elif word.startswith("-"):
            raise ValueError(f"{doc}: flag {word} of train.py that this test does not know how to check")
        else:
            overrides.append(word)
    return multirun, prints, overrides


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
        proc = background.result(str(doc))
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
        module.plan_cells(args.overrides, folder)
    elif getattr(args, "overrides", None) is not None:  # a placeholder folder (/path/to/images) made for it
        load_config(with_folders(args.overrides, roots or {}), folder)  # ConfigError if the overrides cannot run


def check_benchmark(doc: Doc, background: "Background") -> None:
    script = ROOT / doc.argv[1]
    assert script.is_file() and script.parent == ROOT / "benchmarks", f"{doc}: no such benchmark"
    if "argparse" in script.read_text():  # it takes flags: --help must work
        proc = background.result(str(doc))
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


def is_export(argv: Tuple[str, ...]) -> bool:
    """`export NAME=value ...`: environment variables alone."""
    return argv[0] == "export" and len(argv) > 1 and all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", a) for a in argv[1:])


# Each kind of documented command and how its argv reads; the first that matches names it.
KINDS: Sequence[Tuple[str, Callable[[Tuple[str, ...]], bool]]] = (
    ("train", lambda argv: argv[:2] == ("python", "train.py") or argv[0] == "wif-study"),
    ("report-module", lambda argv: argv[:3] == ("python", "-m", "wif.report")),
    ("benchmark", lambda argv: argv[0] == "python" and len(argv) > 1 and argv[1].startswith("benchmarks/")),
    ("example", lambda argv: argv[:2] == ("python", "-m") and len(argv) > 2 and argv[2].startswith("examples.")),
    ("script", lambda argv: argv[0] in SCRIPTS),
    ("pip-extra", lambda argv: argv[:3] == ("pip", "install", "-e")),
    (
        "pip-wheel",
        lambda argv: argv[:2] == ("pip", "wheel") or (argv[:2] == ("pip", "install") and argv[-1].endswith(".whl")),
    ),
    # wif from a wheelhouse (scripts/wheelhouse.sh; rehearsed as docs/ddp.md says)
    ("pip-offline", lambda argv: argv[:4] == ("pip", "install", "--no-index", "--find-links") and argv[5:] == ("wif",)),
    ("project-script", lambda argv: argv[0].startswith("scripts/")),
    ("export", is_export),
    ("external", lambda argv: any(argv[: len(p)] == p for p in EXTERNAL)),
)


def kind_of(doc: Doc) -> str:
    """The first of KINDS whose pattern `doc` matches, or 'unknown'."""
    return next((kind for kind, matches in KINDS if matches(doc.argv)), "unknown")


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


# --- processes, started together beside the in-process checks ------------------------------------------


def process_of(doc: Doc) -> Optional[List[str]]:
    """The command line a documented command's check runs as a process, or None (checked in this one)."""
    kind = kind_of(doc)
    try:
        if kind == "train" and train_args(doc)[1]:
            return [sys.executable, str(ROOT / "train.py"), *study_words(doc)]
    except ValueError:
        return None  # an unknown flag: the check says so
    script = ROOT / doc.argv[1] if kind == "benchmark" else None
    if script is not None and script.is_file() and "argparse" in script.read_text():
        return [sys.executable, str(script), "--help"]
    return None


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


@pytest.fixture(scope="module")
def background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path
) -> Iterator[Background]:
    """Every process the selected tests of this module need, started when the first of them starts."""
    bg = Background()
    for doc in COMMANDS:
        argv = process_of(doc)
        if argv is not None:
            where = tmp_path_factory.mktemp("cmd")
            env = {
                **os.environ,
                "WIF_CACHE_DIR": str(cache_dir),
                "PYTHONUNBUFFERED": "1",
                "MLFLOW_TRACKING_URI": f"sqlite:///{where / 'mlflow.db'}",
                **dict(doc.env),
            }
            bg.add(
                str(doc),
                lambda argv=argv, where=where, env=env: subprocess.run(
                    argv, cwd=where, env=env, capture_output=True, text=True, timeout=300
                ),
            )
    for command in REAL_RUNS:
        bg.add(
            f"real: {command}", lambda command=command: real_run(command, tmp_path_factory.mktemp("real"), cache_dir)
        )
    selected = [
        item.callspec.params
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    for params in selected:  # in test order: the worker finishes each before its test asks
        key = str(params["doc"]) if "doc" in params else f"real: {params['command']}" if "command" in params else ""
        if key in bg.work:
            bg.start(key)
    yield bg
    bg.pool.shutdown(wait=True, cancel_futures=True)


def real_run(command: str, where: Path, cache_dir: Path) -> Tuple[subprocess.CompletedProcess, str]:
    """A documented command run for real, in a directory of its own with a store of its own."""
    doc = next(d for d in COMMANDS if d.text == command)
    multirun, _, overrides = train_args(doc)
    if "data.root=images" in overrides:  # the docs' relative folder, in the run's directory
        write_image_folder(where / "images", broken=True)
    store = f"sqlite:///{where / 'mlflow.db'}"
    return run_train(where, store, cache_dir, *overrides, multirun=multirun, timeout=300), store


# --- the tests -------------------------------------------------------------------------------------------

# In-process checks first, those waiting on a process last: the processes run while the others compose.
ORDERED = sorted(COMMANDS, key=lambda doc: process_of(doc) is not None)


@pytest.mark.parametrize("doc", ORDERED, ids=str)
def test_documented_command(
    doc: Doc, doc_env, image_roots: Dict[str, Path], user_conf: Path, background: Background
) -> None:
    doc_env(doc)
    kind = kind_of(doc)
    if kind == "train":
        try:
            check_train(doc, roots=image_roots, background=background, user_conf=user_conf)
        except ValueError as err:
            pytest.fail(str(err))
    elif kind == "script":
        check_script(doc, doc.argv[0], doc.argv[1:], roots=image_roots, user_conf=user_conf)
    elif kind == "report-module":
        check_script(doc, "wif-report", doc.argv[3:], user_conf=user_conf)
    elif kind == "benchmark":
        check_benchmark(doc, background)
    elif kind in DOC_CHECKS:
        DOC_CHECKS[kind](doc)
    else:
        pytest.fail(
            f"{doc}: no test covers this documented command: teach tests/test_docs.py to check it "
            "(or add the program to EXTERNAL if it is not this project's)"
        )


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(REAL_RUNS))
def test_documented_command_runs_for_real(command: str, background: Background) -> None:
    doc = next((d for d in COMMANDS if d.text == command), None)
    assert doc is not None, f"no longer in the docs: {command} (update REAL_RUNS)"
    proc, store = background.result(f"real: {command}")
    status, shows = REAL_RUNS[command]
    output = proc.stdout + proc.stderr
    assert proc.returncode == status and shows in output, f"{doc}: exit {proc.returncode}\n{output[-3000:]}"
    if status == 0:  # one FINISHED run in its store
        client = MlflowClient(store)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        assert [r.info.status for r in runs] == ["FINISHED"], f"{doc}: runs {[r.info for r in runs]}"


def test_every_refusal_and_real_run_is_still_documented() -> None:
    shown = {doc.text for doc in COMMANDS}
    stale = sorted((set(REFUSED) | set(REAL_RUNS)) - shown)
    assert not stale, f"REFUSED or REAL_RUNS name commands the docs no longer show: {stale}"
    assert COMMANDS and len({doc.page for doc in COMMANDS}) > 5, "the docs' ```bash blocks were not found"


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"
    install = [d.argv for d in COMMANDS if d.page == "README.md"][:2]
    assert install == [("pip", "install", "-e", ".[dev]"), ("pytest",)], "CI runs exactly these two, first"


def markdown_links(path: Path) -> List[Tuple[int, str]]:
    """(line, target) of every inline link and image outside code fences."""
    out, fence = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            code_free = re.sub(r"`[^`]*`", "", line)
            out += [(number, m.group(1)) for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", code_free)]
    return out


def anchors(path: Path) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: Dict[str, int] = {}
    out, fence = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#+ ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = []
    for number, target in markdown_links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # http(s), mailto: not this checkout's
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{number}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{number}: {target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for _, t in markdown_links(readme)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
