"""scripts/wheelhouse.sh --have: only what a node's `pip freeze` lacks goes into the wheelhouse.

The helper's filtering runs on a real pip resolution of a small local index (wheels made here, pip run with
--no-index); the script itself runs once for real against the index, with this interpreter's own freeze less
three packages as the node's list (slow: it builds wif and resolves its closure)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "wheelhouse.sh"
HELPER = ROOT / "scripts" / "wheelhouse_have.py"


def make_wheel(folder: Path, name: str, version: str, requires: Sequence[str] = ()) -> Path:
    """A real (empty) pure-Python wheel with these requirements."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{meta}")
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def helper(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HELPER), *map(str, args)], capture_output=True, text=True)


def wheel_names(folder: Path) -> List[str]:
    return sorted(re.sub(r"[-_.]+", "-", p.name.split("-")[0]).lower() for p in folder.glob("*.whl"))


def test_have_filtering_on_a_real_resolution(tmp_path: Path) -> None:
    index, stubs = tmp_path / "index", tmp_path / "stubs"
    index.mkdir(), stubs.mkdir()
    app = make_wheel(index, "app", "1.0", ["lib-a>=2", "lib-b", "lib-d", "torch>=9", "kept-by-name"])
    for version in ("1.0", "2.0", "3.0"):
        make_wheel(index, "lib-a", version)
    make_wheel(index, "lib-b", "1.0", ["lib-c"])
    make_wheel(index, "lib-b", "2.0", ["lib-c"])
    make_wheel(index, "lib-c", "1.0")
    make_wheel(index, "lib-d", "1.0", ["lib-c"])
    make_wheel(index, "torch", "9.0", ["nvidia-cublas"])  # the index's torch: never the node's
    make_wheel(index, "nvidia-cublas", "1.0")
    make_wheel(index, "kept-by-name", "5.0")
    have = tmp_path / "have.txt"
    have.write_text(
        "\n".join(
            [
                "# a comment",
                "lib-a==1.0",  # app needs lib-a>=2: no constraint, a newer one is written
                "lib_B==1.0",  # the node's, though the index has 2.0
                "torch @ file:///opt/wheels/torch-9.0%2Bcu1-cp311-cp311-manylinux_2_28_x86_64.whl",  # no index has it
                "kept-by-name @ file:///croot/kept_1/work",  # no version: kept as the node has it
                "-e git+https://example.org/x.git@abc#egg=editable_thing",
                "-e /somewhere/without/egg",
                "--index-url https://example.org/simple",
                "unrelated==0.1",
            ]
        )
        + "\n"
    )

    made = helper("constraints", have, app, "", "3.11", stubs)
    assert made.returncode == 0, made.stderr
    assert sorted(made.stdout.split()) == ["lib-b==1.0", "torch==9.0+cu1", "unrelated==0.1"]
    for said in (
        "lib-a 1.0 is not what wif needs",
        ":7: -e /somewhere/without/egg: an editable install with no",
        ":8: --index-url https://example.org/simple: a pip option, skipped",
        "the node's kept-by-name is kept as it is",
        "the node's editable_thing is kept as it is",
    ):
        assert said in made.stderr, (said, made.stderr)
    (tmp_path / "c.txt").write_text(made.stdout)

    report = tmp_path / "report.json"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--no-index",
            "--find-links",
            str(index),
            "--find-links",
            str(stubs),
            "-c",
            str(tmp_path / "c.txt"),
            "--report",
            str(report),
            str(app),
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"},
    )
    assert pip.returncode == 0, pip.stderr
    chosen = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert chosen["torch"] == "9.0+cu1" and chosen["lib-b"] == "1.0"  # the node's stand-ins, not the index's
    assert "nvidia-cublas" not in chosen  # the node's torch and lib-b bring their own (lib-c comes for lib-d)

    for with_torch in ("0", "1"):
        selected = helper("select", report, with_torch, have)
        assert selected.returncode == 0, selected.stderr
        # written: app, lib-a (the node's 1.0 is excluded), lib-d and lib-c (missing); not lib-b (the node's),
        # torch (the node's, even --with-torch) or kept-by-name.
        assert sorted(selected.stdout.split()) == ["app==1.0", "lib-a==3.0", "lib-c==1.0", "lib-d==1.0"]
        assert "the node's lib-a 1.0 is replaced: wif's closure needs 3.0" in selected.stderr

    # Without --have: everything but the torch stack, which --with-torch adds.
    plain = make_wheel(tmp_path, "plain", "1.0", ["lib-c", "torch"])
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--no-index",
            "--find-links",
            str(index),
            "--report",
            str(report),
            str(plain),
        ],
        check=True,
        env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"},
    )
    assert sorted(helper("select", report, "0").stdout.split()) == ["lib-c==1.0", "plain==1.0"]
    assert sorted(helper("select", report, "1").stdout.split()) == [
        "lib-c==1.0",
        "nvidia-cublas==1.0",
        "plain==1.0",
        "torch==9.0",
    ]


def test_manylinux_platforms_include_the_older_ones() -> None:
    out = helper("platforms", "manylinux_2_28_x86_64", "macosx_11_0_arm64").stdout.split()
    assert out[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in out and "manylinux2014_x86_64" in out
    assert "manylinux_2_16_x86_64" not in out and out[-1] == "macosx_11_0_arm64"


def test_the_node_build_takes_mlflows_client_and_store_without_its_ui_unless_the_node_has_mlflow(
    tmp_path: Path,
) -> None:
    """mlflow's UI and server pull pyarrow, scikit-learn, Flask, docker...: 50-100 MB a node does not need."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    def build(have_lines: List[str]) -> tuple:
        pyproject = tmp_path / "pyproject.toml"
        pyproject.write_text((ROOT / "pyproject.toml").read_text())
        have = tmp_path / "have.txt"
        have.write_text("\n".join(have_lines) + "\n")
        run = helper("node-build", pyproject, have)
        assert run.returncode == 0, run.stderr
        return tomllib.loads(pyproject.read_text())["project"], run.stderr

    original = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    project, said = build(["torch==2.11.0", "pandas==3.1.1"])
    names = [re.split(r"[<>=!~ ;]", d)[0] for d in project["dependencies"]]
    assert "mlflow" not in names and {"mlflow-skinny", "sqlalchemy", "alembic"} <= set(names), names
    assert len(names) == len(original["dependencies"]) + 2
    assert project["version"] == original["version"] + "+node" and "no MLflow UI" in said
    project, said = build(["mlflow==3.17.2"])
    assert project == original and "the node has mlflow" in said


def test_a_list_of_names_known_beforehand_is_the_nodes_packages_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A node's packages known by name alone (as a workplace's notes list them): each is the node's, kept as it
    is; the missing versions are said once, not 190 times. scripts/lent_gpu_have.txt is a node's real freeze."""
    spec = importlib.util.spec_from_file_location("wheelhouse_have", HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lent = module.read_have(str(ROOT / "scripts" / "lent_gpu_have.txt"))
    assert capsys.readouterr().err == "" and None not in lent.values()
    assert lent["torch"] == "2.11.0" and lent["torchvision"] == "0.26.0" and lent["certifi"] == "2026.7.22"
    assert "hydra-core" not in lent and "mlflow" not in lent
    names = tmp_path / "names.txt"
    names.write_text("torch==2.11.0\ntorchvision==0.26.0\n" + "".join(f"{name}\n" for name in sorted(lent)[:150]))
    have = module.read_have(str(names))
    said = capsys.readouterr().err.strip().splitlines()
    unversioned = [name for name, version in have.items() if version is None]
    assert have["torch"] == "2.11.0" and have["torchvision"] == "0.26.0" and len(unversioned) == 150
    assert len(said) == 1 and f"{len(unversioned)} packages with no version (absl-py, " in said[0], said
    assert "not constraints; the node's are kept as they are" in said[0]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--have"], "--have needs a file"),
        (["--have", "/nonexistent/freeze.txt"], "--have /nonexistent/freeze.txt: no such file"),
        (["--python-version", "312"], "--python-version 312: expected MAJOR.MINOR"),
        (["--bogus"], "unknown argument --bogus"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, argv: List[str], said: str) -> None:
    run = subprocess.run([str(SCRIPT), str(tmp_path / "wh"), *argv], capture_output=True, text=True)
    assert run.returncode == 2 and said in run.stderr and run.stderr.count("\n") == 1, run.stderr


@pytest.mark.slow
def test_script_writes_only_what_the_node_lacks(tmp_path: Path) -> None:
    """The documented `scripts/wheelhouse.sh DIR --have FILE`, for real: this interpreter (which has wif's closure)
    as the node, less hydra-core and what only it and wif need (omegaconf, and antlr4-python3-runtime and
    prefetch_generator, source only: built here), and less mlflow: those four and wif come out, nothing the node
    has, and no mlflow: the node build needs only mlflow-skinny and the store's packages, which the node has."""
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    lacking = {"hydra-core", "omegaconf", "antlr4-python3-runtime", "prefetch-generator", "mlflow"}
    kept = [
        line
        for line in freeze.stdout.splitlines()
        if re.sub(r"[-_.]+", "-", re.split(r"[=@ ]", line)[0]).lower() not in lacking
    ]
    assert len(kept) == len(freeze.stdout.splitlines()) - 5, "this interpreter lacks part of wif's closure"
    have = tmp_path / "have.txt"
    have.write_text("\n".join(kept) + "\n")
    out = tmp_path / "wh"
    run = subprocess.run(
        [str(SCRIPT), str(out), "--have", str(have)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHON": sys.executable},
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert wheel_names(out) == sorted(lacking - {"mlflow"} | {"wif"}), run.stderr[-3000:]
    wif_wheel = next(out.glob("wif-*.whl"))
    with zipfile.ZipFile(wif_wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    assert "Requires-Dist: mlflow-skinny" in meta and "Requires-Dist: mlflow>" not in meta and "+node" in wif_wheel.name
    assert re.search(r"wheelhouse: .* 5 wheels written, [\d.]+ MB", run.stdout), run.stdout
