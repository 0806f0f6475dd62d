"""The commands of README.md and docs/*.md, read as bash reads them, and the kind of each (tests/test_docs.py)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import tomllib

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCRIPTS = PYPROJECT["scripts"]  # wif-report, wif-tune, wif-batch-size -> "module:main"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

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


WHEEL = f"wif-{PYPROJECT['version']}-py3-none-any.whl"


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


def study_words(doc: Doc) -> Tuple[str, ...]:
    """What follows `python train.py` or `wif-study` (the same program)."""
    return doc.argv[1:] if doc.argv[0] == "wif-study" else doc.argv[2:]


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


def process_key(doc: Doc) -> Optional[str]:
    """What a documented command's process depends on: its command line and its block's exports. Commands that
    differ only in flags the check drops (a benchmark's `--help` stands for all of them) share one process."""
    argv = process_of(doc)
    return None if argv is None else shlex.join(argv[1:]) + "".join(f" {k}={v}" for k, v in doc.env)
