"""The user's own workload through the real train.py: torchvision and custom models, a custom Dataset,
the step's precision, memory format and compilation, bad `_target_`s refused before any run, the Python
API from a user's script, and data=folder at the ImageNet example's transforms."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, needs, new_store, run_train, train_runs
from wif.config.targets import typed
from wif.measure.tracking import config_hash
from wif.report.runs import RunFilter, load_runs
from wif.sweep.identity import run_identity

TINY = (
    "preset=smoke",
    "data.num_train=100",
    "data.num_test=20",
    "data.image_size=32",
    "trainer.epochs=2",
    "data.fraction=0.5",
    "data.batch_size=16",
)
HAS_COMPILER = any(shutil.which(cc) for cc in ("c++", "g++", "clang++"))


@pytest.mark.slow
def test_two_torchvision_models_finish_in_separate_testbeds(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(tmp_path, store, cache_dir, *TINY, "model=torchvision", "model.arch=resnet18,mobilenet_v3_small")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = train_runs(store, status="FINISHED")
    assert sorted(r.data.params["model.arch"] for r in runs) == ["mobilenet_v3_small", "resnet18"]
    assert {r.data.tags["wif.model"] for r in runs} == {"torchvision:resnet18", "torchvision:mobilenet_v3_small"}
    assert len({r.data.tags["wif.config_hash"] for r in runs}) == 2
    frame = load_runs(MlflowClient(store), "who_is_faster", RunFilter())
    assert sorted(frame["testbed"]) == ["cpu, torchvision:mobilenet_v3_small", "cpu, torchvision:resnet18"]


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    """One run of a custom model on a custom Dataset in bf16, channels_last, 2 persistent workers, compiled where
    a C++ compiler lets torch.compile work on the CPU."""
    work = tmp_path_factory.mktemp("custom")
    store = new_store(work)
    proc = run_train(
        work,
        store,
        cache_dir,
        "preset=smoke",
        "trainer.epochs=3",
        "loader=baseline",
        "loader.num_workers=2",
        "loader.persistent_workers=true",
        "data.batch_size=32",
        "model=custom",
        "model._target_=examples.models.small_cnn",
        "+model.kwargs.width=8",
        "data=custom",
        "data._target_=examples.datasets.noisy_squares",
        "+data.kwargs.size=16",
        "+data.kwargs.n_train=200",
        "+data.kwargs.n_test=40",
        "data.fraction=0.5",
        "trainer.precision=bf16",
        "trainer.channels_last=true",
        f"trainer.compile={str(HAS_COMPILER).lower()}",
        multirun=False,
    )
    return store, proc


@pytest.mark.slow
def test_custom_model_and_dataset_finish_in_bf16_channels_last(custom_run) -> None:
    store, proc = custom_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = train_runs(store, status="FINISHED")
    p = run.data.params
    assert (
        p["model._target_"] == "examples.models.small_cnn" and p["data._target_"] == "examples.datasets.noisy_squares"
    )
    assert p["trainer.precision"] == "bf16" and p["trainer.channels_last"] == "True"
    assert run.data.tags["wif.model"] == "custom:examples.models.small_cnn width=8"
    assert run.data.tags["wif.step"].startswith("bf16+channels_last")
    assert run.data.tags["wif.n_train"] == "80" and run.data.tags["wif.n_val"] == "20"  # fraction, then val_split
    assert run.data.tags["wif.n_test"] == "40"


@pytest.mark.slow
def test_compile_time_is_logged_apart_from_the_epochs(custom_run) -> None:
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler: torch.compile cannot build CPU kernels here")
    store, proc = custom_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = train_runs(store, status="FINISHED")
    client = MlflowClient(store)
    epochs = [m.value for m in client.get_metric_history(run.info.run_id, "epoch_time_s")]
    compile_s = run.data.metrics["compile_s"]
    # Compilation takes seconds; had it landed in the first epoch, that epoch would take as long.
    assert compile_s > 1.0 and max(epochs) < compile_s / 5, (compile_s, epochs)
    assert "compile" in run.data.tags["wif.step"]


@pytest.mark.slow
def test_compile_leaves_the_persistent_workers_start_up_in_the_first_epoch(custom_run) -> None:
    """The compile warm-up's batch does not come from the loader: its persistent workers start in the first timed
    epoch, whose first_batch_s shows their start-up (the later epochs' first batch comes from live workers)."""
    if not HAS_COMPILER:
        pytest.skip("no C++ compiler: torch.compile cannot build CPU kernels here")
    store, proc = custom_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run,) = train_runs(store, status="FINISHED")
    first = [
        m.value
        for m in sorted(MlflowClient(store).get_metric_history(run.info.run_id, "first_batch_s"), key=lambda m: m.step)
    ]
    assert run.data.metrics["compile_s"] > 0 and len(first) == 3
    assert first[0] > 2 * max(first[1:]), first  # forking two workers, against a batch from workers alive


BAD = {
    "a model that does not read it": ("model=tiny", "+model._target_=examples.models.small_cnn"),
    "a module that does not exist": ("model=custom", "model._target_=no.such.fn"),
    "a factory that returns a tensor": ("model=custom", "model._target_=tests.user_factories.a_tensor"),
    "a misspelt key": ("model.nam=x",),
    "not callable": ("model=custom", "model._target_=tests.user_factories.NOT_CALLABLE"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD)[:4])
def test_a_bad_target_or_key_exits_2_in_one_line_before_any_run(
    tmp_path: Path, store: str, cache_dir: Path, case: str
) -> None:
    proc = run_train(tmp_path, store, cache_dir, "preset=smoke", *BAD[case], multirun=False)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "Bad setting" in line]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in out, out[-3000:]
    key = "model.nam" if case == "a misspelt key" else "model._target_"
    assert key in lines[0]
    assert train_runs(store) == []


@pytest.mark.slow
def test_a_sweep_with_a_bad_target_refuses_before_its_first_job(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "model=custom",
        "model._target_=examples.models.small_cnn,tests.user_factories.a_tensor,tests.user_factories.NOT_CALLABLE",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "2 of 2 jobs" not in out and "2 of 3 jobs" in out, out[-3000:]
    assert "returned a Tensor, not a torch.nn.Module" in out and "is a int, not a callable" in out
    assert train_runs(store) == []


def test_the_step_is_part_of_the_identity_and_old_runs_keep_theirs() -> None:
    plain = typed(compose_cfg("preset=smoke"))
    identity = run_identity(plain, "cpu")
    assert "arch" not in identity["model"] and "precision" not in identity["trainer"]  # as before issue 26
    assert "_target_" not in identity["data"]
    bf16 = typed(compose_cfg("preset=smoke", "trainer.precision=bf16"))
    adam = typed(compose_cfg("preset=smoke", "trainer.optimizer._target_=torch.optim.Adam"))
    hashes = {config_hash(run_identity(c, "cpu")) for c in (plain, bf16, adam)}
    assert len(hashes) == 3


@pytest.mark.slow
def test_the_example_script_tunes_times_and_logs(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.user_script",
            "--epochs",
            "2",
            "--max-workers",
            "1",
            "--batches",
            "2",
            "--n-train",
            "128",
            "--mlflow-experiment",
            "mine",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MLFLOW_TRACKING_URI": store},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pick: num_workers=" in proc.stdout and "median epoch" in proc.stdout
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("mine").experiment_id])
    assert run.data.tags["wif.kind"] == "user"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "epoch_time_s")] == [0, 1]


def test_time_epochs_splits_data_wait_from_compute() -> None:
    import time

    from wif import time_epochs

    class Slow:
        batch_size = 2

        def __iter__(self):
            for _ in range(3):
                time.sleep(0.02)
                yield torch.zeros(2)

    times = time_epochs(Slow(), lambda b: time.sleep(0.01), epochs=2, device="cpu")
    e = times.epochs[1]
    assert e["samples"] == 6 and 0.05 < e["data_wait_s"] < 0.2 and 0.025 < e["compute_s"] < 0.1
    assert e["data_wait_s"] + e["compute_s"] <= e["epoch_time_s"] and times.measured == times.epochs[1:]


def test_folder_standard_augment_crops_as_the_imagenet_example(tmp_path: Path) -> None:
    from torchvision.io import write_png

    from wif.data.datasets import load_datasets

    for part in ("train", "test"):
        for c in range(2):
            d = tmp_path / part / f"class{c}"
            d.mkdir(parents=True)
            for i in range(4):
                write_png(torch.randint(0, 255, (3, 40 + 10 * i, 50), dtype=torch.uint8), str(d / f"{i}.png"))
    cfg = OmegaConf.to_object(
        compose_cfg(
            "preset=smoke",
            "data=folder",
            f"data.root={tmp_path}",
            "data.image_size=24",
            "data.augment=standard",
            "data.fraction=1",
        )
    ).data
    sets = load_datasets(cfg)
    assert sets.train[0][0].shape == sets.val[0][0].shape == sets.test[0][0].shape == (3, 24, 24)
    assert sets.train.decoder.native  # cropped from the full image, not from a 24 px copy


@needs("timm")
def test_timm_models_build_by_name_and_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from wif.config import ConfigError, validate
    from wif.run.model import build_model

    conf = typed(compose_cfg("preset=smoke", "model=timm", "model.arch=resnet10t"))
    validate(conf)
    assert build_model(conf.model, 3).eval()(torch.zeros(1, 3, 32, 32)).shape == (1, 3)
    monkeypatch.setitem(sys.modules, "timm", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r'model=timm needs the optional extra timm: pip install -e "\.\[timm\]"'):
        validate(conf)
