"""The tools of issue 6: wif-tune and wif-batch-size. CPU tests run the real commands on the smoke preset; GPU tests
run where CUDA is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

import pytest
import torch
from omegaconf import OmegaConf

from tests import user_factories
from tests.conftest import compose_cfg
from tests.cuda import gpu_only
from tests.tools import run_tool, tool_runs
from wif.config import ConfigError, validate
from wif.tools.batch_probe import out_of_memory
from wif.tools.batch_size import find_largest


# ----------------------------------------------------------------------------- wif-tune
def test_wif_tune_searches_and_prints_a_train_line(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_tool(
        tmp_path,
        store,
        cache_dir,
        "wif.tools.tune",
        "preset=smoke",
        "data.fraction=0.4",
        "--batches",
        "3",
        "--epochs",
        "2",
        "--max-workers",
        "2",
        "--step",
        "2",
        "--radius",
        "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    trials = [line for line in proc.stdout.splitlines() if re.match(r"^(False|True)\s+\d+\s", line)]
    runs = tool_runs(store, "tune")
    assert 2 <= len(trials) == len(runs) <= 3 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["wif.num_workers"] for r in runs} <= {"0", "1", "2"}
    assert sum(r.data.tags.get("wif.tune_best") == "true" for r in runs) == 1
    assert all(r.data.metrics["throughput_mean_img_s"] > 0 for r in runs)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("Use it: wif-study "))
    overrides = line.removeprefix("Use it: wif-study ").split()
    assert overrides[0] == "loader=baseline" and "preset=smoke" in overrides and "data.fraction=0.4" in overrides
    validate(OmegaConf.to_object(compose_cfg(*overrides)))  # the printed line is a valid train.py command


def test_wif_tune_refuses_a_loader_it_cannot_tune(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_tool(tmp_path, store, cache_dir, "wif.tools.tune", "loader=bg")
    assert proc.returncode == 2 and "BackgroundGenerator" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- wif-batch-size's search
@pytest.mark.parametrize("threshold", [0, 1, 7, 63, 64, 65, 100, 1000, 4095, 4096, 10_000])
def test_find_largest_finds_the_threshold_probing_each_size_once(threshold: int) -> None:
    tried: List[int] = []

    def fits(n: int) -> bool:
        tried.append(n)
        return n <= threshold

    assert find_largest(fits, start=64, limit=4096) == min(threshold, 4096)
    assert len(tried) == len(set(tried)) and len(tried) <= 2 * 12 + 2
    assert all(1 <= n <= 4096 for n in tried)


def test_find_largest_edges() -> None:
    assert find_largest(lambda n: True, start=100, limit=50) == 50
    assert find_largest(lambda n: n <= 3, start=1, limit=1) == 1
    assert find_largest(lambda n: True, start=5, limit=0) == 0


# ----------------------------------------------------------------------------- wif-batch-size
def test_wif_batch_size_says_it_needs_cuda(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_tool(
        tmp_path, store, cache_dir, "wif.tools.batch_size", "preset=smoke", env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "needs a CUDA device" in proc.stderr


def test_wif_batch_size_probes_data_custom_with_its_own_first_sample() -> None:
    """data=custom: the probes train on the user's first sample repeated to the batch size (its shape and its
    classes, not data.image_size's), read once in a forked child; a factory that fails is one line."""
    from wif.config.targets import typed
    from wif.tools.batch_probe import first_sample, sample_batches

    conf = typed(
        compose_cfg(
            "preset=smoke",
            "data=custom",
            "data._target_=examples.datasets.noisy_squares",
            "+data.kwargs.size=20",
            "+data.kwargs.num_classes=6",
        )
    )
    sample = first_sample(conf)
    assert tuple(sample.x.shape) == (3, 20, 20) and sample.num_classes == 6
    batches = sample_batches(sample, 24, 3, torch.device("cpu"))
    assert len(batches) == 3 and tuple(batches[0][0].shape) == (24, 3, 20, 20) and batches[0][1].shape == (24,)
    assert torch.equal(batches[0][0][5], sample.x) and int(batches[0][1][7]) == sample.y
    bad = typed(compose_cfg("preset=smoke", "data=custom", "data._target_=tests.user_factories.raising_dataset"))
    with pytest.raises(ConfigError, match="data._target_=tests.user_factories.raising_dataset raised ValueError"):
        first_sample(bad)
    ended = typed(compose_cfg("preset=smoke", "data=custom", "data._target_=tests.user_factories.exiting_dataset"))
    with pytest.raises(ConfigError, match="ended with exit code 3$"):
        first_sample(ended)


def test_wif_batch_size_runs_its_children_in_fresh_processes_that_inherit_nothing() -> None:
    """Issue 47 item 3: a process forked from one that has initialized CUDA (a test session, a user's script)
    cannot use CUDA. The probes and the dataset factory run in fresh interpreters: state set here is not there."""
    from wif.config.targets import typed
    from wif.tools.batch_probe import first_sample

    conf = typed(compose_cfg("preset=smoke", "data=custom", "data._target_=tests.user_factories.parent_state_seen"))
    user_factories.PARENT_STATE["cuda"] = "initialized"  # what a fork would carry over: this process's memory
    try:
        sample = first_sample(conf)
    finally:
        user_factories.PARENT_STATE.clear()
    assert sample.y == 0, "the child inherited its parent's state: it was forked"


def test_every_way_cuda_says_out_of_memory_is_a_batch_too_big() -> None:
    """Issue 47 item 10: the search bisects down on each of these instead of stopping; any other error stops it.
    The messages are torch's and CUDA's libraries' own (torch's caching allocator, the CUDA runtime through
    AcceleratorError, cuBLAS, cuDNN 8 and 9, cuSOLVER, cuFFT)."""
    said = [
        torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.19 GiB of which 1.06 GiB is free."
        ),
        torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
        RuntimeError("cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`"),
        RuntimeError("cuFFT error: CUFFT_ALLOC_FAILED"),
        RuntimeError(
            "CUDA ran out of memory outside PyTorch's allocator. If this workload uses many dynamic "
            "shapes, cuDNN may need additional device memory"
        ),
    ]
    assert [out_of_memory(e) for e in said] == [True] * len(said)
    raised = []  # raised by torch here, on the CPU: none is the device's memory
    for fails in (
        lambda: torch.empty(1 << 62, dtype=torch.uint8),  # the host's allocator: "not enough memory"
        lambda: torch.ones(2, 3) @ torch.ones(2, 3),
        lambda: torch.ones(2).view(3),
    ):
        with pytest.raises(RuntimeError) as caught:
            fails()
        raised.append(caught.value)
    others = [
        *raised,
        torch.AcceleratorError("CUDA error: device-side assert triggered"),
        ValueError("out of memory, said by something that is not CUDA"),
    ]
    assert [out_of_memory(e) for e in others] == [False] * len(others), [str(e)[:80] for e in others]


# ----------------------------------------------------------------------------- GPU
@gpu_only
def test_wif_batch_size_finds_a_batch_for_a_custom_model_on_custom_data(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    # wif.examples, not the checkout's examples/: the tool runs in an empty folder, where a GPU node may have wif
    # from its wheel (as scripts/gpu_session.sh installs it; the H200 run of 2026-11-26 failed on examples.models)
    proc = run_tool(
        tmp_path,
        store,
        cache_dir,
        "wif.tools.batch_size",
        "preset=smoke",
        "model=custom",
        "model._target_=wif.examples.models.small_cnn",
        "data=custom",
        "data._target_=wif.examples.datasets.noisy_squares",
        "+data.kwargs.size=48",
        "--max-batch",
        "256",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "inputs (3, 48, 48) from data._target_=wif.examples.datasets.noisy_squares" in proc.stdout
    assert "Largest batch size: 256" in proc.stdout and "data.batch_size=256" in proc.stdout


@gpu_only
def test_wif_batch_size_on_a_gpu(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_tool(tmp_path, store, cache_dir, "wif.tools.batch_size", "preset=smoke", "--max-batch", "512")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Largest batch size: 512" in proc.stdout and "Use it: wif-study data.batch_size=512" in proc.stdout
    proc = run_tool(tmp_path, store, cache_dir, "wif.tools.batch_size", "preset=smoke", "--fill", "0.0001")
    assert proc.returncode == 1 and "not even a batch" in proc.stderr and "Traceback" not in proc.stderr


@gpu_only
def test_issue47_items3_10_wif_batch_size_probes_from_a_process_holding_cuda() -> None:
    """Issue 47 item 3: a forked probe here failed with "Cannot re-initialize CUDA in forked subprocess"."""
    from wif.tools.batch_probe import run_probe

    torch.zeros(1, device="cuda")  # this process now holds a CUDA context, as a test session or a user's script
    conf = OmegaConf.to_object(compose_cfg("preset=smoke"))
    probe = run_probe(conf, 64, 2)
    assert probe.trained and not probe.error, f"item 3: {probe.error}"
    assert 0 < probe.reserved_mb < probe.used_mb < probe.total_mb
    big = OmegaConf.to_object(compose_cfg("model=googlenet"))
    too_big = run_probe(big, 1 << 16, 1)  # 3 GiB of input, ~500 GiB saved for backward (7.8 MB an image)
    assert not too_big.trained and not too_big.error, f"item 10: {too_big.error}"
