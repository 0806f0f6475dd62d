"""wif as a package: the wheel carries conf/, the plugins and the examples, and every command works from a
folder that is not the checkout, with a user's own YAML folder composed through Hydra's search path.

The slow test builds the sdist from the checkout's files, the wheel from that sdist (and checks it is the
wheel the checkout builds), installs it without `-e` into a fresh venv whose only view of the dependencies
is a .pth line naming this interpreter's site-packages (a line in a .pth adds a folder; .pth files inside it,
the editable install's finder among them, are not run), and runs the commands from an empty folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import pytest
import tomllib

from tests.conftest import ROOT

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
MY_LOADER = (
    "# a user's own loader option (the keys of `loader`): two workers, pinned\n"
    "name: mine\nnum_workers: 2\npin_memory: true\n"
)


def user_conf(where: Path) -> Path:
    """myconf/loader/mine.yaml, a loader option wif does not have."""
    (where / "myconf" / "loader").mkdir(parents=True)
    (where / "myconf" / "loader" / "mine.yaml").write_text(MY_LOADER)
    return where / "myconf"


# ----------------------------------------------------------------------------- fast: the checkout's modules
def test_wif_lists_every_command_in_one_screen() -> None:
    from wif.commands import COMMANDS, usage

    names = [name for name, _ in COMMANDS]
    assert len(set(names)) == len(names) and set(SCRIPTS) == {"wif", *names}, "the list and pyproject differ"
    done = subprocess.run([sys.executable, "-m", "wif.commands", "--help"], capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and done.stdout == usage()
    assert len(lines) <= 24 and max(map(len, lines)) <= 100, "more than one screen"
    assert all(sum(line.startswith(f"  {name}  ") for line in lines) == 1 for name, _ in COMMANDS)  # one row each
    wrong = subprocess.run([sys.executable, "-m", "wif.commands", "stduy"], capture_output=True, text=True, cwd=ROOT)
    assert wrong.returncode == 2 and wrong.stderr.startswith("wif: no command 'stduy'")


def test_a_users_folder_composes_with_wifs_and_a_name_in_neither_is_refused(tmp_path: Path) -> None:
    from wif.config import ConfigError
    from wif.config.compose import load_config

    mine = user_conf(tmp_path)
    assert load_config(["preset=smoke", "loader=mine"], mine).loader.num_workers == 2
    with pytest.raises(ConfigError, match="Could not find 'loader/mine'"):
        load_config(["loader=mine"])  # without the folder, wif alone does not know it
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    for cmd in (["wif.sweep.study", "--config-dir", str(mine)], ["wif.sweep.plan", "--config-dir", str(mine)]):
        proc = subprocess.run(
            [sys.executable, "-m", *cmd, "loader=nosuch"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Could not find 'loader/nosuch'" in lines[0], proc.stderr
        assert "mine" in lines[0]  # the options listed are wif's and the folder's
    assert not (tmp_path / "mlflow.db").exists()


def test_the_examples_import_each_other_as_the_package_they_ship_in() -> None:
    """examples/ ships as wif.examples: an example importing `examples.x` works only in the checkout."""
    import ast

    absolute = [
        f"{path.name}: {node.module}"
        for path in sorted((ROOT / "examples").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("examples")
    ]
    assert absolute == [], "import them relatively (from .models import ...)"
    assert (ROOT / "wif" / "examples").resolve() == (ROOT / "examples").resolve()
    assert (ROOT / "wif" / "conf").resolve() == (ROOT / "conf").resolve()


# ----------------------------------------------------------------------------- slow: the wheel, installed
def files_of(whl: Path) -> Dict[str, str]:
    """name -> sha256 of every file in a wheel but its RECORD (which lists the same hashes)."""
    with zipfile.ZipFile(whl) as z:
        return {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist() if not n.endswith("RECORD")}


def build(kind: str, source: Path, out: Path) -> Path:
    """setuptools' own PEP 517 hook (build_sdist or build_wheel) run in `source`, offline: no isolation."""
    code = f"from setuptools import build_meta as b; print(b.build_{kind}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def checkout_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and new ones git does not ignore), links kept as links."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    for name in filter(None, listed.stdout.split("\0")):
        src, dst = ROOT / name, dest / name
        if not src.is_symlink() and not src.is_file():
            continue  # deleted, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    return dest


def fresh_venv(where: Path, wheel: Path) -> Path:
    """A venv with the wheel installed (not editable), its dependencies seen through a .pth line."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    py = where / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    import site

    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    done = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        env=clean_env(where),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return where / "bin"


def clean_env(venv: Path, **extra: str) -> Dict[str, str]:
    """No PYTHONPATH (a worktree's), no store chosen: runs go to the folder's mlflow.db."""
    drop = {"PYTHONPATH", "MLFLOW_TRACKING_URI", "VIRTUAL_ENV", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "PYTHONUNBUFFERED": "1", **extra}


@pytest.mark.slow
def test_the_wheel_runs_every_command_from_an_empty_folder(tmp_path: Path, cache_dir: Path) -> None:
    src = checkout_copy(tmp_path / "src")
    # The checkout's own wheel is built beside the sdist and the sdist's wheel, from a copy of its own (a build
    # writes its egg-info and build/ into the folder it builds).
    with ThreadPoolExecutor(max_workers=1) as pool:
        from_tree = pool.submit(build, "wheel", checkout_copy(tmp_path / "src2"), tmp_path / "from_tree")
        sdist = build("sdist", src, tmp_path / "dist")
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp_path / "unpacked", filter="data")
        wheel = build("wheel", tmp_path / "unpacked" / sdist.name[: -len(".tar.gz")], tmp_path / "from_sdist")
        tree_wheel = from_tree.result()
    shipped = files_of(wheel)
    assert {
        "wif/conf/config.yaml",
        "wif/conf/loader/baseline.yaml",
        "hydra_plugins/wif_sweeper/race_sweeper.py",
        "wif/examples/models.py",
        "wif-0.1.0.dist-info/licenses/LICENSE",
    } <= set(shipped)
    assert shipped == files_of(tree_wheel), "the sdist builds another wheel"

    bin_ = fresh_venv(tmp_path / "venv", wheel)
    work = tmp_path / "work"  # the user's project folder: empty but for their own YAML
    work.mkdir()
    user_conf(work)
    env = clean_env(tmp_path / "venv", WIF_CACHE_DIR=str(cache_dir))

    def start(*argv: str) -> subprocess.Popen:
        return subprocess.Popen(
            [str(bin_ / argv[0]), *argv[1:]],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(proc: subprocess.Popen, status: int = 0, timeout: float = 600) -> str:
        stdout, stderr = proc.communicate(timeout=timeout)
        out = stdout + stderr
        assert proc.returncode == status, f"{' '.join(map(str, proc.args))}: exit {proc.returncode}\n{out[-4000:]}"
        return out

    def run(*argv: str, status: int = 0, timeout: float = 600) -> str:
        return finish(start(*argv), status, timeout)

    smoke = ("preset=smoke", "data.fraction=0.05")
    # The commands that time nothing and need no other's runs start with the smoke job, side by side: each
    # spends seconds on its imports. The race and the advice follow in turn, then the report beside wif-plan
    # (which prices the training runs of the smoke job and the race: the advice adds none).
    first = start("wif-study", "--config-dir", "myconf", *smoke, "loader=mine")  # the smoke job, the user's loader
    beside = [
        start(
            "python",
            "-c",
            "import wif, hydra_plugins.wif_sweeper as s; print(wif.__file__, s.__file__); "
            "import importlib.util as u; print(u.find_spec('examples'))",
        ),
        start("python", "-m", "pip", "check"),
        start("wif"),
        start("wif-study", "--config-dir", "myconf", "loader=nosuch"),
    ]
    where, pip_check, usage = (finish(proc) for proc in beside[:3])
    refused = finish(beside[3], status=2)
    assert "The runs are in sqlite:///mlflow.db" in finish(first)  # a single run says where it went, too
    assert where.split() == [str(p) for p in (tmp_path / "venv").glob("lib/python*/site-packages/wif/__init__.py")] + [
        str(p) for p in (tmp_path / "venv").glob("lib/python*/site-packages/hydra_plugins/wif_sweeper/__init__.py")
    ] + ["None"], f"the checkout is importable: {where}"
    assert "No broken requirements" in pip_check
    assert "wif-advise" in usage
    assert refused.strip().splitlines() == [refused.strip()] and "Could not find 'loader/nosuch'" in refused
    out = run(
        "wif-study",
        "--config-dir",
        "myconf",
        "-m",
        "hydra/sweeper=race",
        "loader=baseline,mine",
        *smoke,
        "race.min_blocks=2",
        "race.max_blocks=2",
    )
    assert "Race done" in out
    report = re.search(
        r"The runs are in sqlite:///mlflow.db, experiment who_is_faster: `(wif-report)` tables them", out
    )
    assert report, out[-2000:]  # the sweep's last lines say where its runs are, and the command run below
    run(
        "wif-advise",
        "--config-dir",
        "myconf",
        *smoke,
        "loader=mine",
        "--epochs",
        "2",
        "--batches",
        "2",
        "--race-candidates",
        "1",
        "--min-blocks",
        "2",
        "--max-blocks",
        "2",
        "--max-epochs",
        "2",
        "measure.contended_pct=1000",  # no run again: beside other tests every run may be contended
    )
    plan = start("wif-plan", "--config-dir", "myconf", "loader=baseline,mine", *smoke, "repeat=0,1")
    run(report.group(1), "--keep-contended", "--out", "report")  # on a busy machine every run may be contended
    assert "fixed grid: 4 runs" in finish(plan)
    assert (work / "report" / "summary.md").is_file()

    assert list(tmp_path.rglob("mlflow.db")) == [work / "mlflow.db"], "every command writes where it is started"
    with sqlite3.connect(work / "mlflow.db") as db:
        kinds: List[tuple] = db.execute(
            "select value, count(*) from tags where key = 'wif.kind' group by value"
        ).fetchall()
        loaders = {v for (v,) in db.execute("select value from params where key = 'loader.name'")}
    kinds_seen = dict(kinds)
    assert kinds_seen.get("train", 0) == 4 and kinds_seen.get("advise", 0) >= 5 and kinds_seen.get("report") == 1, kinds
    assert {"mine", "baseline"} <= loaders
