"""Loader engines beside DataLoader (issue 18): real SPDL and torchdata.nodes on small data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import CONF, compose_cfg, engine_case, needs, run_train, train_runs
from tests.stores import samples_per_epoch
from wif.config import ConfigError, EngineName, validate
from wif.data.datasets import load_datasets
from wif.data.engines import build_engine_batches
from wif.data.loaders import Reading
from wif.sweep.identity import cell_name

ENGINES = [e.value for e in EngineName]
CELLS = sorted(p.stem for p in (CONF / "pipelines").glob("*.yaml"))


def _conf(*overrides: str):
    return OmegaConf.to_object(compose_cfg("preset=smoke", *overrides))


def test_engines_are_a_group_of_their_own_and_the_loader_group_keeps_11() -> None:
    assert sorted(p.stem for p in (CONF / "engine").glob("*.yaml")) == sorted(ENGINES)
    assert len(list((CONF / "loader").glob("*.yaml"))) == 11
    assert _conf().engine.name is EngineName.dataloader  # the default: the study as before


@pytest.mark.parametrize(
    "overrides,named",
    [
        (("engine=spdl", "loader=pin_nb"), "needs at least one worker"),
        (("engine=nodes_procs", "loader=pin_nb"), "needs at least one worker"),
        (("engine=nodes_procs", "loader=pin_nb_w4_pf2", "loader.persistent_workers=true"), "no persistent workers"),
        (("engine=spdl", "loader=pin_nb_w4_pf2", "loader.persistent_workers=true"), "no persistent workers"),
        (("engine=nodes_threads", "loader=bg_pin"), "BackgroundGenerator"),
        (("engine=spdl", "loader=gpu_resident"), "data=fixed and loader=gpu_resident"),
        (("engine=nodes_threads", "data=fixed"), "data=fixed and loader=gpu_resident"),
        (
            ("engine=spdl", "loader=pin_nb_w4_pf2", "loader.multiprocessing_context=spawn"),
            "runs its workers on threads",
        ),
        (("engine.prefetch_factor=0",), "engine.prefetch_factor"),
    ],
)
def test_settings_an_engine_cannot_take_are_refused_in_one_line(overrides: tuple, named: str) -> None:
    with pytest.raises(ConfigError, match=named) as err:
        validate(_conf(*overrides))
    assert "\n" not in str(err.value)


@needs("torchdata.nodes")
def test_nodes_procs_takes_a_start_method_and_nodes_threads_zero_workers() -> None:
    validate(_conf("engine=nodes_procs", "loader=pin_nb_w4_pf2", "loader.multiprocessing_context=spawn"))
    validate(_conf("engine=nodes_threads", "loader=pin_nb"))


@pytest.mark.parametrize("engine,package", [("spdl", "spdl"), ("nodes_procs", "torchdata")])
def test_a_missing_package_gives_a_one_line_hint(engine: str, package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import spdl / torchdata now fails, as when not installed
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[pipelines\]"'):
        validate(_conf(f"engine={engine}", "loader=pin_nb_w4_pf2"))


def _epochs(split, engine: str, workers: int, epochs: int = 2):
    conf = _conf(
        f"engine={engine}", "loader=pin_nb_w4_pf2" if workers else "loader=pin_nb", f"loader.num_workers={workers}"
    )
    batches = build_engine_batches(split, conf.loader, conf.engine, Reading(batch_size=64, train=True, seed=3))
    out = []
    for _ in range(epochs):
        xs, ys = zip(*[(x, y) for x, y in batches])
        assert all(len(y) <= 64 for y in ys) and len(ys) == len(batches)
        x = torch.cat(xs)
        out.append((x.flatten(1).sum(1).sort().values, torch.cat(ys)))
    return out


@pytest.mark.parametrize(
    "engine,workers",
    [
        engine_case("spdl", 2),
        engine_case("nodes_threads", 0),
        engine_case("nodes_threads", 2),
        engine_case("nodes_procs", 2),
    ],
)
def test_an_engine_gives_the_same_samples_per_epoch_as_dataloader(engine: str, workers: int, cache_dir: Path) -> None:
    data = load_datasets(_conf("data.fraction=0.4", f"data.cache_dir={cache_dir}").data)
    reference = _epochs(data.train, "dataloader", workers)
    for (sums, labels), (ref_sums, ref_labels) in zip(_epochs(data.train, engine, workers), reference):
        assert len(labels) == len(data.train)
        assert torch.equal(labels.bincount(minlength=10), ref_labels.bincount(minlength=10))
        assert torch.allclose(sums, ref_sums)  # the same images, each once, in whatever order


@needs("spdl.pipeline", "torchdata.nodes", "nvidia.dali")
def test_every_pipelines_cell_is_valid_and_names_its_engine() -> None:
    """+study=pipelines: every engine at 2 and 4 workers, 0 where it takes them, persistent DataLoader apart."""
    study = OmegaConf.load(CONF / "study" / "pipelines.yaml")
    assert list(study.hydra.sweeper.params)[0] == "repeat"  # repeat varies slowest: repeat-major blocks
    cells = {}
    for cell in CELLS:
        conf = _conf("+study=pipelines", f"+pipelines={cell}", *(["data=encoded"] if cell.startswith("dali") else []))
        validate(conf)
        cells[cell_name(conf)] = (conf.engine.name.value, conf.loader.num_workers, conf.loader.persistent_workers)
    assert len(cells) == len(CELLS)
    assert {(e, w) for e, w, persistent in cells.values() if not persistent} == {
        ("dataloader", 0),
        ("dataloader", 2),
        ("dataloader", 4),
        ("spdl", 2),
        ("spdl", 4),
        ("nodes_threads", 0),
        ("nodes_threads", 2),
        ("nodes_threads", 4),
        ("nodes_procs", 2),
        ("nodes_procs", 4),
        ("dali", 2),
        ("dali", 4),
    }
    assert {c: v for c, v in cells.items() if v[2]} == {
        "pin_nb_w2_pf2+persistent@0.4": ("dataloader", 2, True),
        "pin_nb_w4_pf2+persistent@0.4": ("dataloader", 4, True),
    }
    assert "pin_nb_w4_pf2+spdl@0.4" in cells and "pin_nb+nodes_threads@0.4" in cells


@pytest.mark.slow
@needs("spdl.pipeline", "torchdata.nodes")
def test_each_engine_trains_like_dataloader_and_nodes_procs_counts_its_workers(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """One engine sweep on decoded JPEGs (epochs long enough for the sampler to see every worker)."""
    common = ("preset=smoke", "data=encoded", "data.fraction=0.4", "loader=pin_nb_w4_pf2")
    engines = [e for e in ENGINES if e != "dali"]  # engine=dali: tests/test_dali.py
    proc = run_train(tmp_path, store, cache_dir, *common, "loader.num_workers=1", f"engine={','.join(engines)}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_train(tmp_path, store, cache_dir, *common, "loader.num_workers=4", "engine=nodes_procs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception ignored" not in proc.stderr  # torchdata's iterators are never collected in a worker
    runs = {(r.data.tags["wif.engine"], r.data.params["loader.num_workers"]): r for r in train_runs(store)}
    assert all(r.info.status == "FINISHED" for r in runs.values()) and len(runs) == 5
    ref = runs[("dataloader", "1")].data
    for (engine, _workers), run in runs.items():
        m = run.data.metrics
        assert m.keys() == ref.metrics.keys(), engine
        assert run.data.params["wif.engine"] == engine
        suffix = "" if engine == "dataloader" else f"+{engine}"
        assert run.data.tags["wif.cell"] == f"pin_nb_w4_pf2{suffix}@0.4"
        assert samples_per_epoch(store, run.info.run_id) == [int(ref.tags["wif.n_train"])] * 3, engine
        assert m["val_acc"] > 0.2, engine  # ten classes: chance is 0.1
    threads, procs = (runs[(e, w)].data.metrics for e, w in (("nodes_threads", "1"), ("nodes_procs", "1")))
    # A finished epoch's workers exit within torchdata's queue timeout, so they may overlap the next loader's
    # (train, validation, test): at least the configured workers, at most those of the three loaders.
    many = runs[("nodes_procs", "4")].data.metrics
    assert threads["workers_peak"] == 0 and 1 <= procs["workers_peak"] <= 3 and 4 <= many["workers_peak"] <= 12
    # The workers are in the RAM figures: each forked worker maps most of its parent's pages, so RSS (which
    # counts a shared page in every process) more than doubles, while PSS (which counts it once) does not.
    assert many["ram_peak_rss_mb"] > 2 * threads["ram_peak_rss_mb"]
    assert many["ram_peak_uss_mb"] <= many["ram_peak_pss_mb"] < many["ram_peak_rss_mb"] / 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("engine", [engine_case(e) for e in ("spdl", "nodes_threads", "nodes_procs")])
def test_an_engine_pins_its_batches_on_cuda(engine: str, cache_dir: Path) -> None:
    conf = _conf(f"engine={engine}", "loader=pin_nb_w4_pf2", "loader.num_workers=2", f"data.cache_dir={cache_dir}")
    data = load_datasets(conf.data)
    batches = build_engine_batches(
        data.train, conf.loader, conf.engine, Reading(batch_size=64, train=True, seed=0, pin=True)
    )
    x, y = next(iter(batches))
    assert x.is_pinned() and y.is_pinned()
