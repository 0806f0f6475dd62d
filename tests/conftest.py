"""Shared helpers: compose the real config, run the real train.py, read the real MLflow store."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Sequence

import pytest
from hydra import compose, initialize_config_dir
from mlflow.entities import Run
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from tests.turns import (  # noqa: F401 (the hooks that run two tests at once)
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_runtest_protocol,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
from wif.config import register_configs
from wif.measure import names

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
LOADERS = sorted(p.stem for p in (CONF / "loader").glob("*.yaml"))
STUDY_LOADERS = [
    "baseline",
    "gpu_resident",
    "bg",
    "bg_pin",
    "bg_pin_nb",
    "pin_nb_w4_pf2",
    "pin_nb_w4_pf8",
    "pin_nb_w8_pf2",
    "pin_nb_w8_pf8",
    "pin_nb",
    "pin",
]

register_configs()

PACKAGES = ("torch", "torchvision", "lightning", "accelerate", "transformers", "timm")  # whose code the tests run


def pytest_report_header() -> str:
    """The versions of the packages whose own code the tests run (tests/test_package_scripts.py), in the header."""
    from importlib.metadata import PackageNotFoundError, version

    def said(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return f"{name} not installed"

    return "packages: " + ", ".join(said(name) for name in PACKAGES)


def compose_cfg(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One synthetic-data cache for the whole session: generation is paid once, as for a user."""
    return tmp_path_factory.mktemp("wif-cache")


_EMPTY_STORE: List[Path] = []


def new_store(folder: Path, name: str = "mlflow.db") -> str:
    """A real, empty MLflow SQLite store in `folder`: a copy of one that MLflow created and migrated once for the
    session. Each new store costs MLflow about a second of schema migrations in the first process that opens it,
    paid by a hundred tests; the tests of creating a store (many processes at once, a user's first run) use a
    path no store is at."""
    if not _EMPTY_STORE:
        where = Path(tempfile.mkdtemp(prefix="wif-empty-store-"))
        atexit.register(shutil.rmtree, where, True)
        MlflowClient(f"sqlite:///{where / 'mlflow.db'}").search_experiments()
        _EMPTY_STORE.append(where / "mlflow.db")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_EMPTY_STORE[0], folder / name)
    return f"sqlite:///{folder / name}"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return new_store(tmp_path)


@pytest.fixture
def own_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GPU locks of this test's own, apart from those of real jobs on this machine (and its sweeps)."""
    monkeypatch.setenv("WIF_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def run_train(
    tmp_path: Path,
    store: str,
    cache_dir: Path,
    *overrides: str,
    multirun: bool = True,
    timeout: float = 900,
    env: Dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """The real command line, in a subprocess, in its own working directory (one repeat unless asked)."""
    cmd = [sys.executable, str(ROOT / "train.py")] + (["-m"] if multirun else []) + one_repeat(overrides)
    full_env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": store,
        "WIF_CACHE_DIR": str(cache_dir),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    return subprocess.run(cmd, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=timeout)


def one_repeat(overrides: Sequence[str]) -> List[str]:
    """A multirun sweeps ten repeats by default; tests want one unless they say otherwise."""
    return list(overrides) + ([] if any(o.startswith("repeat=") for o in overrides) else ["repeat=0"])


def train_runs(store: str, experiment: str = "who_is_faster", status: str | None = None) -> List[Run]:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    filt = f"tags.`{names.TAG_KIND}` = 'train'" + (f" and attributes.status = '{status}'" if status else "")
    return list(client.search_runs([exp.experiment_id], filter_string=filt, max_results=5000))


def by_name(runs: Sequence[Run]) -> Dict[str, Run]:
    return {r.info.run_name: r for r in runs}


def _as_in_a_terminal() -> None:
    """Ctrl-C reaches a terminal's foreground job. A test runner started in the background (`nohup ... &`)
    passes SIGINT on ignored, and Python then installs no KeyboardInterrupt handler: restore the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_train(
    tmp_path: Path, store: str, cache_dir: Path, *overrides: str, multirun: bool = True
) -> subprocess.Popen:
    """train.py started, not awaited, in a session of its own: a test can signal it as a terminal would."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "WIF_CACHE_DIR": str(cache_dir), "PYTHONUNBUFFERED": "1"}
    args = ["-m", *one_repeat(overrides)] if multirun else list(overrides)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_as_in_a_terminal,
    )


def assert_refused_only_with(option: str, overrides: Sequence[str], message: str) -> None:
    """`option` with `overrides` is refused in one line starting with `message`, and the same overrides without
    it validate (or ask only for an optional package this interpreter lacks: engine=dali, data.format=lmdb)."""
    from wif.config import ConfigError, validate
    from wif.config.targets import typed

    with pytest.raises(ConfigError) as err:
        validate(typed(compose_cfg("preset=smoke", option, *overrides)))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    try:
        validate(typed(compose_cfg("preset=smoke", *overrides)))
    except ConfigError as other:
        assert "is not installed" in str(other)


def needs(*modules: str) -> pytest.MarkDecorator:
    """A test of optional packages skips, saying which and the extra that brings it, where one is not installed
    (a lent GPU node with only the small wheelhouse has none of them); never an error. `modules` as imported."""
    from wif.config.engine_checks import installed

    extras = {
        "spdl": "pipelines",
        "torchdata": "pipelines",
        "nvidia": "dali",
        "lmdb": "formats",
        "torchcodec": "decode",
        "timm": "timm",
    }
    missing = [m if m.startswith("nvidia.") else m.split(".")[0] for m in modules if not installed(m)]
    said = [f'needs {m} (pip install -e ".[{extras[m.split(".")[0]]}]")' for m in missing]
    return pytest.mark.skipif(bool(missing), reason=", ".join(said))


def engine_case(engine: str, *more: object) -> object:
    """A parametrize case of `engine` (and its other values), skipped where the engine's package is not installed."""
    from wif.config import EngineName
    from wif.config.engine_checks import ENGINE_MODULES

    module = ENGINE_MODULES.get(EngineName(engine))
    return pytest.param(engine, *more, marks=needs(module) if module else ())


def holds_unless_disturbed(ok: bool, runs: Sequence[Run], claim: str) -> None:
    """A claim about timings must hold, unless other processes disturbed the runs it rests on (their own
    host_other_cpu_pct above the study's contended threshold): then the test skips and says so, as a user's
    `pytest` beside other work must. On an undisturbed machine a false claim fails."""
    from wif.config import MeasureConfig

    if ok:
        return
    others = max((r.data.metrics.get(names.HOST_OTHER_CPU_PCT, 0.0) for r in runs), default=0.0)
    if others > MeasureConfig.contended_pct:
        pytest.skip(
            f"{claim}: not shown, other processes used up to {others:.0f}% of a core during the runs "
            f"(contended above {MeasureConfig.contended_pct:g}): a timing claim needs a quiet machine"
        )
    pytest.fail(f"{claim}: does not hold, and the runs were not disturbed (others at most {others:.0f}% of a core)")


SIDE_BY_SIDE = 3  # processes at once: each spends seconds importing torch and MLflow on one core of CI's two


class SideBySide:
    """Commands that time nothing (a refusal, a check of what a run logged) run a few at once on threads, each in
    its own process: a process importing torch keeps one of CI's two cores busy for seconds. A test
    reads its own command's result; its claims are checked there, as if it had run the command itself."""

    def __init__(self, width: int = SIDE_BY_SIDE) -> None:
        self.pool = ThreadPoolExecutor(max_workers=width)
        self.started: Dict[Any, Future] = {}

    def start(self, key: Any, work: Callable[[], Any]) -> None:
        if key not in self.started:
            self.started[key] = self.pool.submit(work)

    def result(self, key: Any) -> Any:
        return self.started[key].result()


def selected_cases(request: pytest.FixtureRequest, test: str) -> List[pytest.Item]:
    """The selected cases of `test` in this module (`-k` and deselection respected): a module's side-by-side
    fixture starts only the commands of the tests that will run."""
    return [
        item
        for item in request.session.items
        if item.module is request.module and getattr(item, "originalname", None) == test
    ]


def selected_params(request: pytest.FixtureRequest, test: str, name: str) -> List[Any]:
    """The values of parameter `name` of the selected cases of `test` in this module."""
    return [item.callspec.params[name] for item in selected_cases(request, test)]


@pytest.fixture(scope="module")
def side_by_side() -> Iterator[SideBySide]:
    bg = SideBySide()
    yield bg
    bg.pool.shutdown(wait=True, cancel_futures=True)
