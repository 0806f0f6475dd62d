"""engine=dali (issue 28): a real NVIDIA DALI pipeline, on the CPU here (device_id=None), mixed decoding on CUDA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import compose_cfg, run_train, train_runs
from tests.images import image_folder
from tests.stores import samples_per_epoch
from wif.config import ConfigError, validate, warnings_for
from wif.data.datasets import load_datasets
from wif.data.engines import build_engine_batches
from wif.data.loaders import Reading

pytest.importorskip("nvidia.dali")  # the `dali` extra (and `dev`): CI installs it, so these run there


def _conf(*overrides: str):
    return OmegaConf.to_object(compose_cfg("preset=smoke", "engine=dali", "loader=pin_nb_w4_pf2", *overrides))


@pytest.mark.parametrize(
    "overrides,named",
    [
        (("data=synthetic",), "engine=dali decodes the images itself"),
        (("data=folder", "data.root=/tmp", "data.preload=true"), "data.preload=true"),
        (("data=encoded", "loader.in_order=false"), "in order"),
        (("data=encoded", "loader=bg_pin"), "BackgroundGenerator"),
        (("data=encoded", "loader=pin_nb"), "needs at least one worker"),
        (("data=encoded", "loader.persistent_workers=true"), "no persistent workers"),
    ],
)
def test_what_dali_cannot_take_is_refused_in_one_line(overrides: tuple, named: str) -> None:
    with pytest.raises(ConfigError, match=named) as err:
        validate(_conf(*overrides), here=False)
    assert "\n" not in str(err.value)


def test_pin_memory_is_named_as_ignored_and_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _conf("data=encoded")
    validate(conf)
    assert any("engine=dali ignores loader.pin_memory" in w for w in warnings_for(conf, cuda=False))
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # as when the package is not installed
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[dali\]"'):
        validate(conf)


def _epochs(conf, device=None, epochs: int = 2):
    data = load_datasets(conf.data)
    batches = build_engine_batches(
        data.train,
        conf.loader,
        conf.engine,
        Reading(batch_size=64, train=True, seed=3),
        data=conf.data,
        device=device,
    )
    out = []
    for _ in range(epochs):
        xs, ys = zip(*[(x, y) for x, y in batches])
        assert len(ys) == len(batches) and all(len(y) <= 64 for y in ys)
        out.append((torch.cat(xs), torch.cat(ys)))
    return data, out


def test_dali_gives_each_image_once_per_epoch_in_a_new_order(cache_dir: Path) -> None:
    conf = _conf(
        "data=encoded", "data.augment=none", "data.fraction=0.2", "loader.num_workers=2", f"data.cache_dir={cache_dir}"
    )
    data, ((x0, y0), (x1, y1)) = _epochs(conf)
    n = len(data.train)
    assert x0.shape == (n, 3, 64, 64) and x0.dtype == torch.float32 and len(y0) == n  # last batch partial
    assert torch.equal(y0.sort().values, data.train.labels[torch.as_tensor(data.train.indices)].sort().values)
    assert not torch.equal(y0, y1)  # reshuffled
    # the same images as torchvision decodes them (decoders may differ by a grey level), each once
    ref = torch.stack([data.train[i][0] for i in range(n)])
    assert torch.allclose(x0.flatten(1).mean(1).sort().values, ref.flatten(1).mean(1).sort().values, atol=0.02)
    assert torch.allclose(x0.mean(), ref.mean(), atol=0.01) and torch.allclose(x0.std(), ref.std(), atol=0.02)


@pytest.mark.slow
def test_dali_trains_like_dataloader_on_encoded_and_on_a_folder(tmp_path: Path, store: str, cache_dir: Path) -> None:
    common = (
        "preset=smoke",
        "data=encoded",
        "data.augment=none",
        "data.fraction=0.4",
        "loader=pin_nb_w4_pf2",
        "loader.num_workers=1",
    )
    proc = run_train(tmp_path, store, cache_dir, *common, "engine=dataloader,dali")
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = image_folder(tmp_path / "images")
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "engine=dali",
        "data=folder",
        f"data.root={folder}",
        "data.fraction=1.0",
        "loader=pin_nb_w4_pf2",
        "loader.num_workers=1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {(r.data.tags["wif.engine"], r.data.params["data.source"]): r for r in train_runs(store)}
    assert all(r.info.status == "FINISHED" for r in runs.values()) and len(runs) == 3
    ref, dali = runs[("dataloader", "encoded")], runs[("dali", "encoded")]
    assert (
        samples_per_epoch(store, dali.info.run_id)
        == samples_per_epoch(store, ref.info.run_id)
        == [int(ref.data.tags["wif.n_train"])] * 3
    )
    # labels intact: the model learns the set as well (ten classes: chance is 0.1)
    assert dali.data.metrics["test_acc"] > 0.3 and ref.data.metrics["test_acc"] > 0.3
    assert abs(dali.data.metrics["test_acc"] - ref.data.metrics["test_acc"]) < 0.3
    on_folder = runs[("dali", "folder")]
    assert samples_per_epoch(store, on_folder.info.run_id) == [int(on_folder.data.tags["wif.n_train"])] * 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_dali_decodes_on_the_gpu_with_mixed_decoding(cache_dir: Path) -> None:
    conf = _conf("data=encoded", "data.fraction=0.2", "loader.num_workers=2", f"data.cache_dir={cache_dir}")
    data, ((x, y), _) = _epochs(conf, device=torch.device("cuda", 0))
    assert x.is_cuda and len(y) == len(data.train)


@pytest.mark.parametrize(
    "wheel,driver,refused",
    [
        ("nvidia-dali-cuda130", "575.57.08", True),
        ("nvidia-dali-cuda130", "580.65.06", False),
        ("nvidia-dali-cuda130", "595.45", False),
        ("nvidia-dali-cuda120", "525.60.13", False),
        ("nvidia-dali-cuda120", "520.61.05", True),
        ("nvidia-dali-cuda130", None, False),
        (None, "470.1", False),
    ],
)
def test_a_driver_older_than_the_dali_wheels_cuda_needs_is_refused_naming_both(wheel, driver, refused) -> None:
    """Issue 47 item 11: nvidia-dali-cuda130 needs a 580 driver; an older one failed inside DALI's first pipeline."""
    from wif.config.engine_checks import dali_driver_refusal

    said = dali_driver_refusal(wheel, driver)
    assert (said is not None) == refused
    if refused:
        assert wheel in said and f"this machine's is {driver}" in said and "\n" not in said


def test_the_driver_is_checked_on_a_gpu_only() -> None:
    from wif.config.engine_checks import dali_wheel, validate_dali_driver

    assert dali_wheel() == "nvidia-dali-cuda130"  # pyproject's dali extra
    validate_dali_driver(_conf("data=encoded"), "cpu")  # no driver to read here, nothing to refuse on the CPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_issue47_item11_dali_on_this_gpus_driver_runs_or_is_refused_in_one_line(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    from wif.config.engine_checks import dali_driver_refusal, dali_wheel, nvidia_driver

    driver = nvidia_driver()
    assert driver, "NVML gave no driver version on a GPU machine"
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "engine=dali",
        "data=encoded",
        "device=cuda",
        "loader=pin_nb_w4_pf2",
        multirun=False,
    )
    if dali_driver_refusal(dali_wheel(), driver):
        assert proc.returncode == 2 and f"this machine's is {driver}" in proc.stdout + proc.stderr, proc.stderr[-3000:]
        assert not train_runs(store)
    else:
        assert proc.returncode == 0, f"item 11 (driver {driver}): {proc.stderr[-3000:]}"
