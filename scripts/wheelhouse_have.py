"""scripts/wheelhouse.sh's helper: what a node already has (its `pip freeze`), and which wheels it lacks.

  wheelhouse_have.py constraints HAVE WIF_WHEEL EXTRAS PYTHON_VERSION STUBS [PLATFORM...] > constraints.txt
      A constraint name==version for each package of HAVE that wif's own requirements accept, and a
      metadata-only stand-in wheel of it in STUBS, so that pip takes the node's version as it is: also where no
      index has it (torch 2.11.0+cu128, a container's 2.6.0a0+git...), and without fetching it (torch: 500 MB).
      A package whose version wif's requirements exclude gets no constraint: pip picks one, its wheel is written.
  wheelhouse_have.py platforms PLATFORM... > platforms.txt
      The platforms a node of PLATFORM runs wheels of: manylinux_2_28_x86_64 runs manylinux_2_17 (2014) ones
      too (pip before 24 does not infer it for --platform).
  wheelhouse_have.py sdists REPORT
      name==version of each package of pip's --report that comes as source, not as a wheel (wif aside).
  wheelhouse_have.py node-build PYPROJECT HAVE
      Rewrites a copy's pyproject.toml into the node build: MLflow's client and its SQL store (mlflow-skinny,
      sqlalchemy, alembic) for mlflow, whose UI and server bring 50-100 MB the node does not need (the store is
      browsed where it is brought back). A node that has mlflow keeps it. Says what it did on one line.
  wheelhouse_have.py select REPORT WITH_TORCH [HAVE] > requirements.txt
      name==version of each package of pip's --report to put in the wheelhouse: not wif (built apart), not the
      torch stack unless WITH_TORCH, and, with HAVE, not what the node has at that very version.

Runs under the interpreter that runs pip (any Python pip supports), so it uses pip's vendored `packaging`.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional
from urllib.parse import unquote, urlparse

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ImportError:  # a bare interpreter: pip's own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import InvalidVersion, Version

# CUDA runtime wheels, not NVML or DALI
TORCH_STACK = re.compile(r"^(torch|torchvision|triton|cuda-.*|nvidia-(?!ml-py$|dali).*)$")
# name-1.2.3-... of a wheel or sdist file name, in a `name @ file:///.../name-1.2.3-py3-none-any.whl` line
ARCHIVE = re.compile(r"^([A-Za-z0-9_.]+?)-(\d[^-]*?)(?:-.*\.whl|\.tar\.gz|\.zip|\.tar\.bz2)$")


UNVERSIONED_SHOWN = 5  # names of unversioned packages a warning shows


def warn(message: str) -> None:
    print(f"wheelhouse.sh: {message}", file=sys.stderr)


def quiet(message: str) -> None:
    """Say nothing: a second reading of the same file."""


class Pin(NamedTuple):
    """A package line of a pip freeze: its canonical name and version, or None where the line gives none."""

    name: str
    version: Optional[str]
    listed_as: Optional[str] = None  # the name as written, where the line is a name alone: said once for all


def editable_pin(line: str, where: str, say: Callable[[str], None]) -> Optional[Pin]:
    """A `-e` line's package by its #egg= name, kept as the node has it; None without one."""
    egg = re.search(r"[#&]egg=([A-Za-z0-9_.-]+)", line)
    if not egg:
        say(f"{where}: an editable install with no #egg= name, skipped")
        return None
    say(f"{where}: editable, not a constraint; the node's {egg.group(1)} is kept as it is")
    return Pin(canonicalize_name(egg.group(1)), None)


def requirement_pin(line: str, where: str, say: Callable[[str], None]) -> Optional[Pin]:
    """A requirement line's package and its pinned version; None where the line is no requirement."""
    try:
        req = Requirement(line)
    except Exception:  # noqa: BLE001 - packaging's InvalidRequirement, or an older packaging's own error
        say(f"{where}: not a requirement, skipped")
        return None
    name = canonicalize_name(req.name)
    pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
    if pins:
        return Pin(name, pins[0])
    if req.url:  # pip freeze's `name @ file:///...`: the version is in a wheel's or sdist's file name
        match = ARCHIVE.match(unquote(urlparse(req.url).path.rsplit("/", 1)[-1]))
        version = match.group(2) if match and canonicalize_name(match.group(1)) == name else None
        if version is None:
            say(f"{where}: no version in it, not a constraint; the node's {req.name} is kept as it is")
        return Pin(name, version)
    return Pin(name, None, listed_as=req.name)  # a list of names known beforehand: the node's image as documented


def line_pin(line: str, where: str, say: Callable[[str], None]) -> Optional[Pin]:
    """The package a pip freeze line names; None, said, where it names none."""
    if line.startswith(("-e ", "--editable")):
        return editable_pin(line, where, say)
    if line.startswith("-"):
        say(f"{where}: a pip option, skipped")
        return None
    return requirement_pin(line, where, say)


def read_have(path: str, loud: bool = True) -> Dict[str, Optional[str]]:
    """{canonical name: version, or None where the line names the package but no version} of a pip freeze.

    What cannot be read as a package, such as options or a `-e` without #egg=, is skipped with a warning. The
    warnings are said once: `loud` is False on a second reading.
    """
    say = warn if loud else quiet
    have: Dict[str, Optional[str]] = {}
    unversioned: List[str] = []
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        pin = line_pin(line, f"{path}:{number}: {line}", say)
        if pin is None:
            continue
        have[pin.name] = pin.version
        if pin.listed_as is not None:
            unversioned.append(pin.listed_as)
    if unversioned:
        shown = ", ".join(unversioned[:UNVERSIONED_SHOWN]) + (", ..." if len(unversioned) > UNVERSIONED_SHOWN else "")
        say(
            f"{path}: {len(unversioned)} packages with no version ({shown}): not constraints; the node's are kept "
            "as they are"
        )
    return have


def wif_requirements(wheel: str, extras: List[str], python_version: str) -> List[Requirement]:
    """wif's own requirements (Requires-Dist of its wheel) that apply on the node: markers for its Python."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        env = {"python_version": python_version, "python_full_version": python_version + ".0"}
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in extras or [""]):
            reqs.append(req)
    return reqs


def best_tag(python_version: str, platforms: List[str]) -> str:
    """The wheel tag pip ranks first for the node: a stand-in with it (and a build number) wins over the index's
    wheel of the same version, which pip would otherwise fetch whole to read its metadata."""
    try:
        from pip._internal.utils.compatibility_tags import get_supported

        return str(get_supported(version=python_version.replace(".", ""), platforms=platforms or None)[0])
    except Exception:  # noqa: BLE001 - pip's internals moved: the stand-in still works, pip may fetch the real one as well
        return "py3-none-any"


def stub_wheel(folder: Path, name: str, version: str, tag: str) -> None:
    """A wheel that holds only metadata (no files, no dependencies): the node's package, for the resolver."""
    dist = f"{re.sub(r'[-.]+', '_', name)}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-1-{tag}.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{dist}.dist-info/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: wheelhouse.sh\nRoot-Is-Purelib: true\nBuild: 1\nTag: {tag}\n",
        )
        z.writestr(f"{dist}.dist-info/RECORD", "")


def expand_platforms(platforms: List[str]) -> List[str]:
    out: List[str] = []
    for platform in platforms:
        out.append(platform)
        match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
        if match:
            glibc, arch = int(match.group(1)), match.group(2)
            out += [f"manylinux_2_{g}_{arch}" for g in range(glibc - 1, 16, -1)]
            out += [f"manylinux2014_{arch}"] if glibc >= 17 else []  # pip adds 2010 and 1 to it
    return list(dict.fromkeys(out))


def sdists(report_path: str) -> List[str]:
    report = json.loads(Path(report_path).read_text())
    return [
        f"{i['metadata']['name']}=={i['metadata']['version']}"
        for i in report["install"]
        if canonicalize_name(i["metadata"]["name"]) != "wif" and not i["download_info"]["url"].endswith(".whl")
    ]


def constraints(have_path: str, wheel: str, extras: str, python_version: str, stubs: str, *platforms: str) -> None:
    have = read_have(have_path)
    tag = best_tag(python_version, list(platforms))
    needs = {
        canonicalize_name(r.name): r
        for r in wif_requirements(wheel, extras.split(",") if extras else [], python_version)
    }
    for name, version in sorted(have.items()):
        if version is None or name == "wif":
            continue
        req = needs.get(name)
        if req is not None and not req.specifier.contains(version, prereleases=True):
            warn(f"the node's {name} {version} is not what wif needs ({req}): not a constraint")
            continue
        print(f"{name}=={version}")
        stub_wheel(Path(stubs), name, version, tag)


# The SQL store's own packages, as mlflow 3 pins them; mlflow-skinny leaves them out.
NODE_STORE = '"sqlalchemy>=1.4,<3", "alembic>=1.8,<2,!=1.10.0"'


def node_build(pyproject: str, have_path: str) -> None:
    path = Path(pyproject)
    text = path.read_text()
    if "mlflow" in read_have(have_path, loud=False):
        warn("the node has mlflow: wif is built to use it as it is")
        return
    # A requirement carries its version ("mlflow>=2.16"); a bare "mlflow" (the keywords) is no requirement.
    text, n = re.subn(r'"mlflow(?![-\w])(\s*[<>=!~][^"]*)"', r'"mlflow-skinny\1", ' + NODE_STORE, text)
    text, m = re.subn(r'^version = "([^"+]+)"', r'version = "\1+node"', text, flags=re.M)
    if n != 1 or m != 1:
        warn(f"{pyproject}: no single mlflow requirement and version to rewrite for the node build")
        raise SystemExit(2)
    path.write_text(text)
    warn(
        "the node build: mlflow-skinny and the SQL store's packages for mlflow, no MLflow UI or server on the "
        "node (browse the store where you bring it back; --with-ui keeps them)"
    )


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def select(report_path: str, with_torch: bool, have_path: Optional[str] = None) -> List[str]:
    report = json.loads(Path(report_path).read_text())
    have = read_have(have_path, loud=False) if have_path else {}
    lines = []
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        canonical = canonicalize_name(name)
        if canonical == "wif":
            continue
        torch_stack = TORCH_STACK.match(canonical)
        node = have.get(canonical, "")
        if canonical in have and (node is None or same_version(node, version)):
            continue  # the node's own
        if not with_torch and torch_stack:
            if canonical in have:
                warn(
                    f"the node's {name} {node} is not what wif needs ({version} chosen); left out all the same "
                    "(the torch stack: --with-torch writes it)"
                )
            continue
        if canonical in have:
            warn(f"the node's {name} {node} is replaced: wif's closure needs {version}, its wheel is written")
        lines.append(f"{name}=={version}")
    return lines


def main(argv: List[str]) -> int:
    if argv[:1] == ["constraints"] and len(argv) >= 6:
        constraints(*argv[1:])
    elif argv[:1] == ["platforms"]:
        print("\n".join(expand_platforms(argv[1:])))
    elif argv[:1] == ["sdists"] and len(argv) == 2:
        print("\n".join(sdists(argv[1])))
    elif argv[:1] == ["node-build"] and len(argv) == 3:
        node_build(argv[1], argv[2])
    elif argv[:1] == ["select"] and len(argv) in (3, 4):
        print("\n".join(select(argv[1], argv[2] == "1", argv[3] if len(argv) == 4 else None)))
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
