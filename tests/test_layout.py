"""The folder tree is the architecture: packages by job, imports one way, no circles, small files.

Every import in `wif/` is read from its source (`ast`), those inside functions included: an import deferred
into a function is still a dependency, and hiding a circle that way is what this test exists to stop.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wif"
MAX_LINES = 320

# Which wif packages each package may import (its own always). Bottom to top: config <- measure <- data <- run
# <- sweep; tools beside sweep, advisor above tools; the report reads the store (measure.tracking alone: see
# REPORT_MAY_IMPORT) and decides with `decide`. Below them all, wif.dataloader_args: the standard library only, so
# the watch's hook may read it while torch is being imported.
MAY_IMPORT: Mapping[str, Set[str]] = {
    "config": {"dataloader_args"},
    "measure": {"config", "dataloader_args"},
    "data": {"config", "measure", "dataloader_args"},
    "run": {"config", "measure", "data", "dataloader_args"},
    "decide": {"measure"},
    "sweep": {"config", "measure", "data", "run", "decide", "report", "dataloader_args"},
    "tools": {"config", "measure", "data", "run", "dataloader_args"},
    "advisor": {"config", "measure", "data", "run", "tools", "watcher", "decide", "dataloader_args"},
    "report": {"measure", "decide"},
    "watcher": {"config", "measure", "data", "run", "dataloader_args"},
    "commands": set(),  # wif.commands: `wif`, the list of commands; imports nothing of wif
    "dataloader_args": set(),  # wif.dataloader_args: the table of DataLoader's arguments, below every package
}
REPORT_MAY_IMPORT = {"wif.measure.tracking", "wif.measure.lifetime", "wif.measure.names"}  # the store, its names
STDLIB = set(sys.stdlib_module_names)
HEAVY = {"torch", "torchvision", "prefetch_generator", "spdl", "torchdata"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool, known: Set[str]) -> Set[str]:
    """Every module this source imports, wherever the import statement stands; `from a import b` counts
    as an import of `a.b` when that is a module, else of `a`. Relative imports are resolved."""
    out: Set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return out


def import_graph(root: Path, top: str) -> Tuple[Dict[str, Set[str]], Dict[str, Set[str]]]:
    """(module -> the `top` modules it imports, module -> every top-level package it imports)."""
    files = {module_name(p, root): p for p in (root / top).rglob("*.py")}
    known = set(files)
    internal: Dict[str, Set[str]] = {}
    external: Dict[str, Set[str]] = {}
    for name, path in files.items():
        found = imports_of(path.read_text(), name, path.name == "__init__.py", known)
        internal[name] = {m for m in found if m in known and m != name}
        external[name] = {m.split(".")[0] for m in found}
    return internal, external


@dataclass
class Tarjan:
    """Tarjan's search for strongly connected components over one import graph."""

    graph: Mapping[str, Iterable[str]]
    index: Dict[str, int] = field(default_factory=dict)
    low: Dict[str, int] = field(default_factory=dict)
    stack: List[str] = field(default_factory=list)
    on_stack: Set[str] = field(default_factory=set)
    found: List[List[str]] = field(default_factory=list)

    def visit(self, v: str) -> None:
        """Number `v`, search what it imports, and close its component when `v` is its root."""
        self.index[v] = self.low[v] = len(self.index)
        self.stack.append(v)
        self.on_stack.add(v)
        for w in self.graph.get(v, ()):
            if w not in self.index:
                self.visit(w)
                self.low[v] = min(self.low[v], self.low[w])
            elif w in self.on_stack:
                self.low[v] = min(self.low[v], self.index[w])
        if self.low[v] == self.index[v]:
            self.close_component(v)

    def close_component(self, root: str) -> None:
        """Pop the stack down to `root`; keep the component if it is a circle."""
        component = []
        while True:
            w = self.stack.pop()
            self.on_stack.discard(w)
            component.append(w)
            if w == root:
                break
        if len(component) > 1 or root in self.graph.get(root, ()):
            self.found.append(sorted(component))


def cycles(graph: Mapping[str, Iterable[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    search = Tarjan(graph)
    for v in list(graph):
        if v not in search.index:
            search.visit(v)
    return search.found


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def wrong_way(graph: Mapping[str, Iterable[str]]) -> List[str]:
    """Imports from one wif package into another that MAY_IMPORT does not allow, as 'a -> b' lines."""
    bad = []
    for src, targets in graph.items():
        here = package_of(src)
        for dst in targets:
            there = package_of(dst)
            if not here or there == here:
                continue
            allowed = there in MAY_IMPORT.get(here, set())
            if here == "report":
                allowed = dst in REPORT_MAY_IMPORT or there == "decide"
            if not allowed:
                bad.append(f"{src} -> {dst}")
    return sorted(bad)


# ----------------------------------------------------------------------------- the checker checks
def test_the_checker_finds_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """A tree with a circle hidden in a function and a data -> run import: both are found."""
    pkg = tmp_path / "wif"
    for sub in ("data", "run"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "a.py").write_text("def f():\n    from wif.data import b\n")
    (pkg / "data" / "b.py").write_text("from . import a\nfrom wif.run.loop import step\n")
    (pkg / "run" / "loop.py").write_text("import torch\nimport wif.data\n")
    graph, external = import_graph(tmp_path, "wif")
    assert cycles(graph) == [["wif.data.a", "wif.data.b"]]
    assert wrong_way(graph) == ["wif.data.b -> wif.run.loop"]
    assert external["wif.run.loop"] == {"torch", "wif"}


# ----------------------------------------------------------------------------- the tree itself
@pytest.fixture(scope="module")
def graph() -> Tuple[Dict[str, Set[str]], Dict[str, Set[str]]]:
    return import_graph(ROOT, "wif")


def test_every_package_is_one_the_layering_knows(graph) -> None:
    internal, _ = graph
    packages = {package_of(m) for m in internal} - {""}
    assert packages == set(MAY_IMPORT), "a new package needs its place in MAY_IMPORT (and wif/__init__.py)"


def test_no_import_circle(graph) -> None:
    internal, _ = graph
    assert cycles(internal) == []


def test_imports_run_one_way(graph) -> None:
    internal, _ = graph
    assert wrong_way(internal) == []


def test_the_report_never_imports_torch_or_the_training_code(graph) -> None:
    _, external = graph
    light = ("report", "decide")
    heavy = {m: sorted(libs & HEAVY) for m, libs in external.items() if package_of(m) in light and libs & HEAVY}
    assert heavy == {}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, wif.report.report_cli, wif.decide.race; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in %r))" % sorted(HEAVY),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert done.stdout.strip() == "[]"


def test_what_the_hook_reads_while_torch_is_imported_is_the_standard_library(graph) -> None:
    """wif.watcher.hook patches DataLoader inside `import torch`: what it imports at its top imports nothing more.
    The worker_init_fn of wif.dataloader_args imports the libraries whose threads it limits, in the worker alone."""
    internal, external = graph
    read = {"wif.watcher.proof", "wif.watcher.origin", "wif.dataloader_args"}
    in_worker = {"cv2", "threadpoolctl", "numpy"}
    allowed = {m: {"wif", "__future__"} | STDLIB | (in_worker if m == "wif.dataloader_args" else set()) for m in read}
    beyond = {m: sorted(internal[m] - read) + sorted(external[m] - allowed[m]) for m in read}
    assert {m: found for m, found in beyond.items() if found} == {}
    code = f"import sys, wif.dataloader_args; print(sorted(m for m in {sorted(in_worker)!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"  # not at import: only when a worker calls it


def test_each_package_says_what_lives_there() -> None:
    """Each package's docstring names every module and subpackage in it: the tree is read from its __init__s."""
    unnamed = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.relative_to(ROOT)} needs a docstring saying what lives there"
        here = init.parent
        parts = [p.stem for p in here.glob("*.py") if p.stem not in ("__init__", "__main__")]
        parts += [p.name for p in here.iterdir() if (p / "__init__.py").exists() and not p.is_symlink()]
        missing = sorted(name for name in parts if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", doc))
        if missing:
            unnamed[str(here.relative_to(ROOT))] = missing
    assert unnamed == {}


def test_no_file_is_long() -> None:
    long = {
        str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# A function fits on a screen; hand-offs go by keyword (CONTRIBUTING.md). validate's flat list of checks is the one
# function allowed past 100 lines; a call of 6 or more positional arguments is kept for APIs that take no keywords.
MAX_FUNCTION_LINES, MAX_LONG_FUNCTIONS, MAX_POSITIONAL_CALLS = 60, 3, 10


def long_functions_and_positional_calls(root: Path) -> Tuple[Dict[str, int], List[str]]:
    """({'path:line name': lines} of functions past MAX_FUNCTION_LINES, ['path:line callee'] of calls passing 6 or
    more positional arguments) in the tree below `root`."""
    long: Dict[str, int] = {}
    calls: List[str] = []
    for path in sorted(p for p in root.rglob("*.py") if not any(q.is_symlink() for q in [p, *p.parents])):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long[f"{where}:{node.lineno} {node.name}"] = n
            elif isinstance(node, ast.Call):
                if sum(not isinstance(a, ast.Starred) for a in node.args) >= 6:
                    calls.append(f"{where}:{node.lineno} {ast.unparse(node.func)}")
    return long, calls


def test_the_checker_counts_long_functions_and_positional_calls(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(
        f"def long():\n{body}\n\n\ndef short():\n    f(1, 2, 3, 4, 5, 6)\n    f(1, *a, b=2)\n"
    )
    long, calls = long_functions_and_positional_calls(tmp_path)
    assert long == {"m.py:1 long": MAX_FUNCTION_LINES + 1}
    assert calls == [f"m.py:{MAX_FUNCTION_LINES + 5} f"]  # short() starts 3 lines after long()'s last


def test_functions_fit_on_a_screen_and_hand_offs_go_by_keyword() -> None:
    long, calls = long_functions_and_positional_calls(PACKAGE)
    assert len(long) <= MAX_LONG_FUNCTIONS, long
    assert {name.split()[-1] for name, n in long.items() if n > 100} <= {"validate"}, long
    assert len(calls) <= MAX_POSITIONAL_CALLS, calls
