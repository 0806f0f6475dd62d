"""The `worker_threads` option (a row of wif.dataloader_args, with its worker_init_fn): each DataLoader worker's
BLAS and OpenCV threads limited, read inside real workers; the study's knob; the rebuilt loader and its proof;
wif-advise's candidate and the line it pastes."""

from __future__ import annotations

import os
import pickle
import weakref

import numpy as np
import pytest
from threadpoolctl import threadpool_info
from torch.utils.data import DataLoader, Dataset

import wif
from wif.advisor import candidates
from wif.advisor.candidates import Candidate
from wif.advisor.mode import loader_args
from wif.advisor.script.mode import paste as script_paste
from wif.config import ConfigError
from wif.config.compose import load_config
from wif.data.loaders import Reading, build_batches
from wif.dataloader_args import LimitWorkerThreads, default_threads
from wif.measure.lifetime import dataloader_worker_init
from wif.measure.sysinfo import usable_cores
from wif.sweep.identity import cell_name
from wif.watcher.found import rebuild
from wif.watcher.proof import promised, unmet

OWN = "WIF_TEST_OWN_INIT"


def own_init(worker_id: int) -> None:
    """The script's own worker_init_fn: the limit must still call it."""
    os.environ[OWN] = str(worker_id)


class Threads(Dataset):
    """Each item a 256x256 matmul, then the BLAS threads this worker runs and whether its own init ran."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        a = np.ones((256, 256))
        _ = a @ a
        blas = max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        try:
            import cv2

            opencv = cv2.getNumThreads()
        except ImportError:
            opencv = -1
        return blas, opencv, os.environ.get(OWN, "")


def _seen(loader: DataLoader) -> list:
    return [tuple(int(v) if not isinstance(v, str) else v for v in (b[0], b[1], b[2][0])) for b in loader]


def test_workers_blas_threads_are_limited_and_the_own_init_still_runs() -> None:
    """Two workers: with the option their BLAS (and OpenCV) threads are 1 and the loader's own worker_init_fn
    ran; without it, each runs the library's default, as many as this process. The limit pickles, for spawn."""
    default = default_threads()
    if default < 2:
        pytest.skip("one thread per library here already: nothing to limit")
    for context in ("fork",):  # a spawned worker imports this test module: ~40 s on a loaded CPU
        limited = DataLoader(
            Threads(),
            batch_size=1,
            num_workers=2,
            multiprocessing_context=context,
            worker_init_fn=wif.limit_worker_threads(1, own_init),
        )
        seen = _seen(limited)
        assert {s[0] for s in seen} == {1}, (context, seen)
        assert {s[1] for s in seen} <= {1, -1}, (context, seen)  # -1: no OpenCV installed
        assert {s[2] for s in seen} == {"0", "1"}, (context, seen)
    plain = _seen(DataLoader(Threads(), batch_size=1, num_workers=2, multiprocessing_context="fork"))
    assert {s[0] for s in plain} == {max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")}
    assert min(s[0] for s in plain) > 1
    assert pickle.loads(pickle.dumps(wif.limit_worker_threads(2, own_init))).worker_threads == 2


def test_the_study_knob_composes_validates_and_names_its_cell() -> None:
    """loader.worker_threads=1 runs with workers and marks the cell; at 0 workers, or at 0 threads, it is refused."""
    conf = load_config(["loader.num_workers=2", "loader.worker_threads=1"])
    assert conf.loader.worker_threads == 1
    assert "wthreads1" in cell_name(conf)
    made = build_batches(Threads(), conf.loader, Reading(batch_size=1, train=False, seed=0)).worker_init_fn
    assert made.worker_threads == 1 and made.inner is dataloader_worker_init  # wif's own init still runs
    assert "wthreads" not in cell_name(load_config(["loader.num_workers=2"]))
    for bad, word in (
        (["loader.num_workers=0", "loader.worker_threads=1"], "needs worker processes"),
        (["loader.num_workers=2", "loader.worker_threads=0"], "at least 1"),
    ):
        with pytest.raises(ConfigError, match=word):
            load_config(bad)


def test_an_order_of_worker_threads_is_rebuilt_and_proven() -> None:
    """The rebuilt loader wraps the script's own worker_init_fn; the proof reads the limit off the iterator."""
    data = Threads()
    found = DataLoader(data, batch_size=1, num_workers=1, worker_init_fn=own_init)
    rebuilt = rebuild(found, {"worker_threads": 1})
    assert isinstance(rebuilt.worker_init_fn, LimitWorkerThreads) and rebuilt.worker_init_fn.inner is own_init
    assert rebuild(rebuilt, {}).worker_init_fn.worker_threads == 1  # kept where the order says nothing of it
    epoch = iter(rebuilt)
    next(epoch)
    started = [(weakref.ref(rebuilt), weakref.ref(epoch))]
    assert unmet(promised(found, rebuilt), data, started) is None
    said = unmet(promised(found, rebuild(found, {"worker_threads": 2})), data, started)
    assert said is not None and said.startswith("worker_threads=2 was ordered"), said
    del epoch


def test_wif_advise_offers_the_limit_and_its_paste_line_names_it() -> None:
    """At as many workers as cores, each running more than one BLAS thread, the candidates of a script that imports
    OpenCV limit them to their share (of one that does not: none); the line to paste says
    `worker_init_fn=wif.limit_worker_threads(n)`."""
    base = load_config(["loader.num_workers=2"])
    cores = usable_cores()
    best = Candidate(name=f"w{cores}", keys={"loader.num_workers": cores}, workers=cores, persistent=True)
    assert not [c for c in candidates.script_extras(base, best, False, None, 64) if "loader.worker_threads" in c.keys]
    made = candidates.script_extras(base, best, False, None, 64, threaded=True)  # the script imports OpenCV
    made = [c for c in made if "loader.worker_threads" in c.keys]
    if default_threads() < 2:
        assert made == []
        return
    assert [c.keys["loader.worker_threads"] for c in made] == [1]
    # where no workers were best, at the script's own count: oversubscribed threads slow every count with workers
    mine = load_config([f"loader.num_workers={cores}"])
    at_w0 = candidates.script_extras(mine, candidates.workers(mine, 0, False), False, None, 64, threaded=True)
    assert [(c.workers, c.keys["loader.worker_threads"]) for c in at_w0] == [(cores, 1)]
    line, _ = script_paste({}, loader_args(made[0], pin=False), ["python", "train.py"])
    assert "worker_init_fn=wif.limit_worker_threads(1)" in line, line
