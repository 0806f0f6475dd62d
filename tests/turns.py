"""Two tests at once, but a test of timings alone.

pyproject's addopts run the suite in two pytest-xdist workers (`-n 2 --dist loadfile`: a file's tests in one
worker, so a module's fixtures are built once): the suite's subprocesses keep one of two cores busy on average,
and CI must stay within 35 minutes. Three workers on CI's two cores are no faster: the whole suite took 1947 s
once and 2315 s in `.ci/run`, against 2159 s in two (2026-11-27; the tests' summed durations 4312 and 5181 s
against 3534 s: three heavy tests at once, each of several processes of torch, slow each other down).

A test marked `alone` makes a claim that another test beside it would disturb (a timing, an advice's pick, the
CPU that other processes took): it waits for the test running beside it to end and runs with none beside it. A
readers-writer lock on two files that the workers of one run share (`flock(2)`, in a folder the controller
makes): the other tests hold the lock shared, an `alone` test exclusively; a gate taken first by everyone, and
held by an `alone` test while it waits, keeps new tests from starving it.

The `alone` tests are collected last, and the workers take the files' tests in that order (a file whose tests
are of both kinds is two units): the tests that can share the cores run two at once first, then the `alone`
ones one after another, instead of each `alone` test idling the other worker wherever it falls.

NOTE [ Two tests, four threads ]: torch's CPU ops run on as many OpenMP threads as cores, and libgomp's threads
spin while they wait. Two tests at once on two cores put four spinning threads on two cores. Beside another
test, a test's subprocesses get `OMP_WAIT_POLICY=PASSIVE`: the same threads, asleep while they wait. A smoke
sweep of two runs beside busy tests took 20.6 and 15.8 user CPU-s by default, 13.2 and 11.7 with it (2026-11-30).
An `alone` test keeps the caller's environment: its timings are a user's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List

import pytest

_FOLDER: List[str] = []  # the controller's folder of the two files, made for the run's first worker


@contextmanager
def turn(alone: bool, folder: str) -> Iterator[None]:
    """Hold the run's lock, exclusively if `alone`, for the duration of the block."""
    with open(os.path.join(folder, "gate"), "a") as gate, open(os.path.join(folder, "lock"), "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller, as it starts a worker: the folder where the workers take their turns."""
    if not _FOLDER:
        _FOLDER.append(tempfile.mkdtemp(prefix="wif-tests-turns-"))
    node.workerinput["wif_turns"] = _FOLDER[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _FOLDER:  # the controller's, once every worker has ended
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """The `alone` tests last, each kind in its files' order (a stable sort)."""
    items.sort(key=lambda item: item.get_closest_marker("alone") is not None)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadfile in the collection's order: a unit is a file's run of consecutive tests."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class InOrder(LoadFileScheduling):
        units: Dict[str, str] = {}  # node id -> its unit, once the collection is known

        def schedule(self) -> None:
            if self.collection is None and self.collection_is_completed and self.registered_collections:
                runs: Dict[str, int] = {}
                units, last = {}, None
                for nodeid in next(iter(self.registered_collections.values())):
                    file = LoadFileScheduling._split_scope(self, nodeid)
                    if file != last:
                        runs[file] = runs.get(file, -1) + 1
                    units[nodeid], last = f"{file}#{runs[file]}", file
                self.units = units
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return self.units.get(nodeid) or LoadFileScheduling._split_scope(self, nodeid)

    config.option.loadscopereorder = False  # xdist's default sorts the units by their number of tests
    return InOrder(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: object) -> Iterator[None]:
    """Each test's setup, call and teardown (a module fixture's too, built in its first test) in its turn."""
    folder = getattr(item.config, "workerinput", {}).get("wif_turns")  # a pytest-xdist worker's only
    if not folder:
        yield
        return
    alone = item.get_closest_marker("alone") is not None
    with turn(alone, folder), passive_openmp(not alone):
        yield


@contextmanager
def passive_openmp(shared: bool) -> Iterator[None]:
    """Beside another test, the subprocesses' OpenMP threads sleep as they wait (NOTE [ Two tests, four threads ])."""
    if not shared or "OMP_WAIT_POLICY" in os.environ:  # an alone test, or the caller's own policy, runs as it is
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)
