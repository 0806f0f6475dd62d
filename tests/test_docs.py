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
once (no check reads `repeat`), a job two pages show is checked once, a benchmark's `--help` runs once
however many of its command lines the docs show, and `wif-plan`'s cells are planned once per overrides.

The docs' commands are read by tests/docs_commands.py and checked by tests/docs_checks.py; the pages' links
are tested in tests/test_docs_links.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_train
from tests.docs_checks import (
    DOC_CHECKS,
    REFUSED,
    USER_CONF,
    Background,
    check_benchmark,
    check_script,
    check_train,
)
from tests.docs_commands import COMMANDS, PAGES, Doc, kind_of, process_key, process_of, train_args

# Cheap documented commands also run for real, in a subprocess: exit status, and what the output must show.
REAL_RUNS = {
    "python train.py trainer.mode=loader_only loader=pin_nb preset=smoke data.fraction=0.7": (0, "finished: "),
    "python train.py -m loader=baseline data.fraction=0.1,1.5,0.4 preset=smoke": (
        2,
        "Bad setting: 1 of 3 jobs of this sweep cannot run, so none was started",
    ),
    "python train.py data=folder data.root=images preset=smoke": (2, "cannot be read: train/class0/broken.png"),
}


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


@pytest.fixture(scope="module")
def background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path
) -> Iterator[Background]:
    """Every process the selected tests of this module need, started when the first of them starts."""
    bg = Background()
    for doc in COMMANDS:
        argv, key = process_of(doc), process_key(doc)
        if argv is not None and key not in bg.work:  # one process for the documented commands that share it
            where = tmp_path_factory.mktemp("cmd")
            env = {
                **os.environ,
                "WIF_CACHE_DIR": str(cache_dir),
                "PYTHONUNBUFFERED": "1",
                "MLFLOW_TRACKING_URI": f"sqlite:///{where / 'mlflow.db'}",
                **dict(doc.env),
            }
            bg.add(
                key,
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
        key = process_key(params["doc"]) if "doc" in params else f"real: {params.get('command')}"
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
