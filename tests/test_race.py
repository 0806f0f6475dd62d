"""The racing sweep: its rule on simulated sweeps (pure), and a real race of train.py jobs."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import (
    STUDY_LOADERS,
    SideBySide,
    compose_cfg,
    new_store,
    run_train,
    selected_params,
    start_train,
    train_runs,
)
from tests.processes import wait_for_workers
from wif.decide.race import FractionState, RaceRules, look, replay
from wif.report.report_cli import main as report_main

NAMES = [f"s{i}" for i in range(11)]


def simulated_runs(rows: list) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["loader", "block", "fraction", "t"])


def race(rng: np.random.Generator, effects: np.ndarray, rules: RaceRules) -> tuple[FractionState, list]:
    """A simulated race: blocks of the alive settings, a look after each; the final state and its runs' rows.
    Each look on the runs so far, as `replay` takes them (it redoes every earlier look: 36 fits for 8 looks)."""
    state, rows = FractionState(0.1, list(NAMES)), []
    for block in range(rules.max_blocks):
        shift = rng.normal(0.0, 0.1)
        rows += [(n, block, 0.1, effects[NAMES.index(n)] * np.exp(shift + rng.normal(0.0, 0.05))) for n in state.alive]
        state = look(state, simulated_runs(rows), "t", rules, block + 1)
        if state.settled:
            break
    return state, rows


def identical_races(seed: int, n: int, rules: RaceRules) -> list[FractionState]:
    """`n` simulated races of 11 identical settings, their draws from `seed`: their final states."""
    rng = np.random.default_rng(seed)
    return [race(rng, np.ones(len(NAMES)), rules)[0] for _ in range(n)]


@pytest.mark.parametrize(
    "rules,n", [(RaceRules(), 50), (RaceRules(min_blocks=2, max_blocks=3), 100)], ids=["default", "look-at-2"]
)  # 50 races of up to 10 looks: about 50 s on a laptop core
def test_identical_settings_are_never_declared_fastest(rules: RaceRules, n: int) -> None:
    """Half the races in a process of their own, on the other core (a fresh interpreter: this one has torch's
    threads), half here; each half's draws from a seed of its own, so the outcome does not depend on timing."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        other = pool.submit(identical_races, 12, n // 2, rules)
        ends = identical_races(11, n - n // 2, rules) + other.result()
    single = sum(len(s.alive) == 1 for s in ends)
    tied = sum("tied" in s.settled for s in ends)
    print(
        f"\n{n} races of 11 identical settings: {single} declared one fastest, {tied} ended tied, "
        f"{n - single - tied} ran to max_blocks"
    )
    assert single == 0
    assert all(s.settled for s in ends)


def test_a_clear_winner_is_found_in_fewer_runs_than_the_fixed_grid() -> None:
    rng, rules = np.random.default_rng(12), RaceRules()
    effects = np.linspace(1.0, 3.0, len(NAMES))
    effects[4] = 0.5  # twice as fast as the next
    state, rows = race(rng, effects, rules)
    assert state.alive == ["s4"] and state.settled == "one setting is fastest"
    assert len(rows) <= 0.5 * len(NAMES) * rules.max_blocks
    blocks = rows[-1][1] + 1  # a resumed race replays its looks from the runs alone, to the same state
    assert replay(simulated_runs(rows), "t", rules, {0.1: NAMES}, blocks)[0.1] == state
    assert all(state.dropped[n] > 1.5 for n in NAMES if n != "s4")


def test_rules_refuse_what_cannot_race() -> None:
    assert RaceRules().problems() == []
    assert "at least 2 blocks" in RaceRules(min_blocks=1).problems()[0]
    assert "below race.min_blocks" in RaceRules(min_blocks=4, max_blocks=3).problems()[0]
    assert "race.margin=-0.1" in RaceRules(margin=-0.1).problems()[0]


@pytest.fixture(scope="module")
def refusals(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    cache_dir: Path,
    side_by_side: SideBySide,
) -> SideBySide:
    """Each selected bad race command's train.py, in a folder and store of its own, a few at once: a refusal
    times nothing, and each process spends seconds on its imports before the race sweeper refuses."""
    for bad in dict.fromkeys(selected_params(request, "test_bad_race_settings_stop_before_any_job", "bad")):
        work = tmp_path_factory.mktemp("bad-race")
        store = new_store(work)
        side_by_side.start(
            bad,
            lambda work=work, store=store, bad=bad: (
                run_train(work, store, cache_dir, "preset=smoke", "hydra/sweeper=race", *bad.split()),
                store,
            ),
        )
    return side_by_side


ALL_AT_ONCE = "loader=baseline race.min_blocks=1 race.max_blocks=0 race.margin=-0.5"  # one command, each said


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad, says",
    [
        (ALL_AT_ONCE, "race.min_blocks=1: the model needs at least 2 blocks"),
        (ALL_AT_ONCE, "race.max_blocks=0 is below race.min_blocks=1"),
        (ALL_AT_ONCE, "race.margin=-0.5"),
        (ALL_AT_ONCE, "has one setting (baseline): a race needs at least two"),
        ("loader=baseline,pin_nb device=cpu", "once the options that run the same code on this CPU race as one"),
    ],
)
def test_bad_race_settings_stop_before_any_job(refusals: SideBySide, bad: str, says: str):
    """Each problem is said on a line of its own, the several of one command each."""
    proc, store = refusals.result(bad)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert any("Bad setting: " in line and says in line for line in out.splitlines()), out[-2000:]
    assert "Traceback" not in out
    assert not train_runs(store)


@pytest.mark.slow
def test_a_real_race_interrupted_resumes_logs_its_looks_and_never_reruns(tmp_path: Path, store: str, cache_dir: Path):
    """A race stopped by Ctrl-C while a job runs: that run KILLED, the race's record KILLED, not RUNNING. The same
    command resumes it: finished runs are kept, the killed job runs again, and the race ends, its looks logged and
    read by the report as the race decided. A third time runs nothing."""
    # Contention is measured but not acted on here: the race's mechanics must not depend on a quiet CI machine.
    # On a CPU, pin runs baseline's code (pin_memory does nothing there): it races as baseline.
    args = [
        "preset=smoke",
        "hydra/sweeper=race",
        "loader=baseline,pin,pin_nb_w4_pf2,bg",
        "race.min_blocks=2",  # one look, after block 2: six runs
        "race.max_blocks=2",
        "trainer.epochs=2",  # a warm-up and one measured epoch
        "measure.contended_pct=10000",
        "device=cpu",
    ]
    proc = start_train(tmp_path, store, cache_dir, *args)
    deadline = time.monotonic() + 300
    while len(train_runs(store, status="FINISHED")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    wait_for_workers(proc, 2)  # pin_nb_w4_pf2's job, running now
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    out, _ = proc.communicate(timeout=120)
    # A Ctrl-C that lands while a process forks its workers can print Python's "Exception ignored in
    # <_releaseLock>" (logging's at-fork hook); that is the interpreter's, not an error wif lets through.
    assert proc.returncode == 130 and out.count("Traceback") <= out.count("Exception ignored in"), out[-3000:]
    (killed,) = train_runs(store, status="KILLED")
    finished = train_runs(store, status="FINISHED")
    assert len(finished) >= 2 and len(train_runs(store)) == len(finished) + 1
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    (stopped,) = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race'")
    assert stopped.info.status == "KILLED"  # not left RUNNING

    resumed = run_train(tmp_path, store, cache_dir, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = resumed.stdout + resumed.stderr
    assert f"{len(finished)} skipped" in out  # finished runs count, and are not rerun
    assert "Race, look after block 2" in out and "Race done: at fraction 0.1 the possibly-fastest set is" in out
    assert "run the same code: pin race as baseline" in out
    runs = train_runs(store, status="FINISHED")
    cell = lambda r: (r.data.tags["wif.cell"], r.data.tags["wif.block"])  # noqa: E731
    assert len(runs) == 6 and len({cell(r) for r in runs}) == 6  # 3 settings x 2 blocks, each once
    assert cell(killed) in {cell(r) for r in runs}  # the interrupted job ran again
    (record,) = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race' and attributes.status = 'FINISHED'")
    looks = pd.read_csv(client.download_artifacts(record.info.run_id, "looks.csv", str(tmp_path)))
    assert list(looks["block"]) == [2] and looks["fixed_grid_runs"].iloc[0] == 8  # the grid asked for: 4 x 2
    assert record.data.tags["wif.race.same_as"] == "pin=baseline" and record.data.params["race.cells"] == "4"
    fastest = record.data.tags["wif.race.fastest.f0.1"].split()
    assert fastest and set(fastest) <= {"baseline", "pin_nb_w4_pf2", "bg"}
    assert record.data.tags["wif.race.ended.f0.1"] == (looks["settled"].fillna("").iloc[-1] or "runs ran out")
    # the report reads the race as the race decided: the same possibly-fastest set, said to be the race's
    assert report_main(["--tracking-uri", store, "--out", str(tmp_path / "report"), "--no-log"]) == 0
    table = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert set(table.loc[table["possibly_fastest"].astype(bool), "loader"]) == set(fastest)
    assert set(table["vs_fastest_by"]) == {f"race {record.data.tags['wif.race_id']}"}
    assert "'vs fastest' is the race's (race " in (tmp_path / "report" / "summary.md").read_text()

    again = run_train(tmp_path, store, cache_dir, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(train_runs(store, status="FINISHED")) == 6  # nothing ran twice
    assert "6 skipped" in again.stdout + again.stderr
    records = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'race' and attributes.status = 'FINISHED'")
    assert {r.data.tags["wif.race.fastest.f0.1"] for r in records} == {" ".join(fastest)}


def test_on_a_cpu_only_pin_memory_and_non_blocking_are_ignored_when_cells_are_merged() -> None:
    from omegaconf import OmegaConf

    from wif.sweep.race_cells import what_runs_on_cpu

    key = {name: what_runs_on_cpu(OmegaConf.to_object(compose_cfg(f"loader={name}"))) for name in STUDY_LOADERS}
    same = {name for name in STUDY_LOADERS if key[name] == key["baseline"]}
    assert same == {"baseline", "pin", "pin_nb"}
    assert {name for name in STUDY_LOADERS if key[name] == key["bg"]} == {"bg", "bg_pin", "bg_pin_nb"}
    assert len(set(key.values())) == 7  # gpu_resident differs by its transfer, the worker options by their workers
    other_fraction = OmegaConf.to_object(compose_cfg("loader=baseline", "data.fraction=0.4"))
    assert key["baseline"] != what_runs_on_cpu(other_fraction)
