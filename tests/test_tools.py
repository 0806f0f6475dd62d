"""The bottleneck tools of issue 6: loader-only mode, the data=fixed upper bound, the CUDA-stream prefetcher,
wif-tune and wif-batch-size. CPU tests run the real commands on the smoke preset; GPU tests run where CUDA is."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.conftest import compose_cfg, run_train, train_runs
from wif.config import ConfigError, DataSource, TransferKind, validate, warnings_for
from wif.data.loaders import FixedBatches
from wif.data.transfer import StreamPrefetcher, make_transfer
from wif.run.training import CappedBatches
from wif.tools.batch_probe import out_of_memory
from wif.tools.batch_size import find_largest
from wif.tools.worker_search import double_workers, doubled_counts, pick_best, search_workers

# cpu_util_pct and workers_peak come from the sampler's 0.5 s tree samples: a smoke loader-only run is shorter.
LOADER_FIGURES = {
    "epoch_time_s",
    "throughput_img_s",
    "data_wait_s",
    "first_batch_s",
    "data_wait_share",
    "epoch_time_mean_s",
    "throughput_mean_img_s",
    "first_batch_mean_s",
    "ram_peak_rss_mb",
    "ram_peak_uss_mb",
    "ram_peak_pss_mb",
    "setup_s",
}


def gpu_only(test: Callable) -> Callable:
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(test))


def _runs(store: str, kind: str) -> list:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    return [] if exp is None else client.search_runs([exp.experiment_id], f"tags.`wif.kind` = '{kind}'")


def _tool(
    tmp_path: Path, store: str, cache_dir: Path, module: str, *args: str, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "MLFLOW_TRACKING_URI": store, "WIF_CACHE_DIR": str(cache_dir), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=600
    )


# ----------------------------------------------------------------------------- configuration
def test_stream_and_fixed_options_compose() -> None:
    conf = OmegaConf.to_object(compose_cfg("loader=pin", "transfer=stream"))
    assert conf.transfer.kind is TransferKind.stream and conf.transfer.non_blocking and conf.loader.pin_memory
    validate(conf)
    assert any("falls back to a plain copy" in w for w in warnings_for(conf, cuda=False))
    conf = OmegaConf.to_object(compose_cfg("data=fixed"))
    assert conf.data.source is DataSource.fixed
    validate(conf)
    assert any("data=fixed" in w for w in warnings_for(conf, cuda=True))


def test_more_workers_than_cores_is_said_once_per_job() -> None:
    conf = OmegaConf.to_object(compose_cfg("loader=pin_nb_w8_pf2"))
    said = [w for w in warnings_for(conf, cuda=True, cores=2) if "num_workers=8 is more than the 2 cores" in w]
    assert len(said) == 1
    assert not any("num_workers" in w for w in warnings_for(conf, cuda=True, cores=8))
    assert not any("num_workers" in w for w in warnings_for(conf, cuda=True))  # no core count: not checked


def test_stream_with_resident_data_is_refused() -> None:
    conf = OmegaConf.to_object(compose_cfg("loader=gpu_resident", "transfer=stream"))
    with pytest.raises(ConfigError, match="transfer=stream.*loader=gpu_resident"):
        validate(conf)


# ----------------------------------------------------------------------------- batches on the CPU
def _host_batches(n: int = 5, size: int = 4) -> List[tuple]:
    return [(torch.full((size, 3, 2, 2), float(i)), torch.full((size,), i)) for i in range(n)]


def test_stream_prefetcher_falls_back_to_a_plain_copy_on_the_cpu() -> None:
    batches = _host_batches()
    out = list(StreamPrefetcher(batches, torch.device("cpu")))
    assert len(StreamPrefetcher(batches, torch.device("cpu"))) == len(batches) == len(out)
    for (x, y), (hx, hy) in zip(out, batches):
        assert torch.equal(x, hx) and torch.equal(y, hy)
    identity = make_transfer(OmegaConf.to_object(compose_cfg("transfer=stream")).transfer, torch.device("cpu"))
    assert identity(batches[0]) is batches[0]  # the prefetcher already copied


def test_fixed_batches_match_the_split_they_stand_for() -> None:
    fixed = FixedBatches(samples=150, batch_size=64, image_size=8, num_classes=10, device=torch.device("cpu"), seed=0)
    sizes = [len(y) for _, y in fixed]
    assert sizes == [64, 64, 22] and len(fixed) == 3
    first, last = next(iter(fixed))[0], list(fixed)[-1][0]
    assert first.shape == (64, 3, 8, 8) and last.data_ptr() == first.data_ptr()  # one tensor, never copied
    assert len(CappedBatches(fixed, 2)) == 2 and len(list(CappedBatches(fixed, 2))) == 2


# ----------------------------------------------------------------------------- the search logic
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


def test_worker_search_goes_coarse_then_refines_and_stops_early() -> None:
    speed = {w: 100.0 + 50 * w if w <= 5 else 350.0 - 50 * (w - 5) for w in range(0, 33)}  # peak at 5
    calls: List[tuple] = []

    def measure(w: int, phase: str) -> float:
        calls.append((w, phase))
        return speed[w]

    assert search_workers(measure, max_workers=32, step=4, radius=3, min_gain=0.05) == 5
    coarse = [w for w, p in calls if p == "coarse"]
    assert coarse == [0, 4, 8]  # 8 is slower than 4: the coarse walk stops there, never reaching 32
    assert sorted(w for w, p in calls if p == "refine") == [1, 2, 3, 5, 6, 7]


def test_worker_search_leaves_out_counts_the_caller_shows_cannot_win() -> None:
    speed = {0: 100.0, 4: 400.0, 1: 100.0, 2: 200.0, 3: 300.0}
    calls = []

    def measure(w, phase):
        calls.append(w)
        return speed[w]

    assert search_workers(measure, max_workers=4, step=4, radius=3, min_gain=0.05, beaten=lambda w, best: w < best) == 4
    assert calls == [0, 4]  # 1..3 shown beaten by the caller's bound: never measured
    calls.clear()
    assert search_workers(measure, max_workers=4, step=4, radius=3, min_gain=0.05, beaten=lambda w, best: w < 2) == 4
    assert calls == [0, 4, 2, 3]


def test_worker_search_prefers_fewer_workers_and_survives_failures() -> None:
    assert pick_best({0: 100.0, 2: 103.0, 4: 104.0}, min_gain=0.05) == 0  # within 5%: fewest workers
    assert pick_best({0: None, 1: 10.0}, min_gain=0.05) == 1
    assert pick_best({0: None}, min_gain=0.05) is None
    fails_from_4 = lambda w, phase: None if w >= 4 else 100.0 * (w + 1)  # noqa: E731
    assert search_workers(fails_from_4, max_workers=16, step=4, radius=3, min_gain=0.05) == 3


def test_doubled_search_takes_about_log2_trials_on_16_and_64_cores() -> None:
    """wif-advise's search: a loader that sleeps on I/O keeps scaling past the cores, and one that levels off at
    6 workers; on 16 and 64 cores (up to 32 and 128 workers) the doubled search finds each in a few trials,
    where the stepped search of wif-tune takes 12 and 28 (the H100 node's advice: 12 trials, no race)."""
    sleeps = lambda w: 100.0 * max(w, 0.5)  # noqa: E731
    levels = lambda w: 100.0 * min(max(w, 0.5), 6)  # noqa: E731
    for cores, loader, best, trials, stepped in (
        (16, sleeps, 32, [0, 4, 8, 16, 32, 24], 12),
        (64, sleeps, 128, [0, 4, 8, 16, 32, 64, 128, 96], 28),
        (16, levels, 6, [0, 4, 8, 16, 6, 12], 10),
        (64, levels, 6, [0, 4, 8, 16, 6, 12], 10),
    ):
        tried: List[int] = []
        measure = lambda w, phase, tried=tried, loader=loader: tried.append(w) or loader(w)  # noqa: E731
        assert double_workers(measure, max_workers=2 * cores, min_gain=0.05) == best
        assert tried == trials, (cores, tried)
        tried.clear()
        search_workers(measure, max_workers=2 * cores, step=4, radius=3, min_gain=0.05)
        assert len(tried) == stepped, (cores, tried)


def test_doubled_search_stops_at_a_cut_trial_and_skips_counts_that_cannot_win() -> None:
    assert doubled_counts(4) == [0, 4] and doubled_counts(24)[-2:] == [16, 24] and doubled_counts(2) == [0, 2]
    tried: List[int] = []
    cut_from_8 = lambda w, phase: tried.append(w) or (None if w >= 8 else 100.0 * (w + 1))  # noqa: E731
    assert double_workers(cut_from_8, max_workers=32, min_gain=0.05) == 6  # 4's neighbours: 2 and 6
    assert tried == [0, 4, 8, 2, 6]
    tried.clear()
    assert double_workers(cut_from_8, max_workers=32, min_gain=0.05, beaten=lambda w, best: w < best) == 6
    assert tried == [0, 4, 8, 6]


# ----------------------------------------------------------------------------- the real commands
def test_loader_only_mode_logs_the_loader_figures(tmp_path: Path, store: str, cache_dir: Path) -> None:
    # Ten epochs: a smoke loader-only epoch takes milliseconds, and the sampler reads RSS every 0.1 s.
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "trainer.mode=loader_only",
        "loader=pin_nb",
        "transfer=non_blocking,stream",
        "trainer.epochs=10",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "falls back to a plain copy" in proc.stdout + proc.stderr
    assert train_runs(store) == []  # never counted as study runs
    runs = _runs(store, "loader")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    client = MlflowClient(store)
    for run in runs:
        m = run.data.metrics
        assert LOADER_FIGURES <= m.keys(), LOADER_FIGURES - m.keys()
        assert not {"train_loss", "val_loss", "val_acc", "test_acc"} & m.keys()  # no model, no false figures
        assert m["compute_s"] == 0 and m["throughput_mean_img_s"] > 0
        assert run.data.params["trainer.mode"] == "loader_only" and run.info.run_name.startswith("loader-")
        assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "epoch_time_s")) == list(range(10))


@pytest.mark.alone
def test_fixed_data_is_the_reports_upper_bound(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(tmp_path, store, cache_dir, "preset=smoke", "loader=baseline", "data=synthetic,fixed")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {r.data.params["data.source"]: r for r in train_runs(store, status="FINISHED")}
    assert runs.keys() == {"synthetic", "fixed"}
    fixed, real = runs["fixed"], runs["synthetic"]
    assert fixed.data.tags["wif.cell"] == "fixed@0.1"  # never pooled with the loader option's cell
    assert fixed.data.tags["wif.n_train"] == real.data.tags["wif.n_train"]  # as many images per epoch
    assert fixed.data.metrics["throughput_mean_img_s"] > 0
    if platform.libc_ver()[0] == "glibc":  # keep_heap (wif.run.batches): the step keeps its heap
        assert fixed.data.tags["wif.heap_kept"] == "true"
        assert fixed.data.metrics["minor_faults"] < 5000  # the last epoch's; 72,000-107,000 with the heap trimmed

    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "wif.report",
            "--tracking-uri",
            store,
            "--out",
            str(tmp_path / "report"),
            "--no-log",
            "--keep-contended",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert "1 as the on-device upper bound" in report.stdout
    header, row = (
        [c.strip() for c in line.strip("| ").split(" | ")]
        for line in report.stdout.splitlines()
        if line.startswith(("| loader |", "| baseline |"))
    )
    cell = dict(zip(header, row))
    expected = real.data.metrics["throughput_mean_img_s"] / fixed.data.metrics["throughput_mean_img_s"]
    assert float(cell["of bound"].rstrip("%")) / 100 == pytest.approx(expected, abs=0.01)
    # the step beside the loader against the bound's at the same fraction (the GPU step issue, item 1b)
    step = real.data.metrics["compute_mean_s"] / fixed.data.metrics["compute_mean_s"] - 1
    assert float(cell["step vs bound"].rstrip("%")) / 100 == pytest.approx(step, abs=0.01)
    assert "GPU busy" not in cell  # a CPU run has no NVML figure: no column, never a false 0


def test_wif_tune_searches_and_prints_a_train_line(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = _tool(
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
    runs = _runs(store, "tune")
    assert 2 <= len(trials) == len(runs) <= 3 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["wif.num_workers"] for r in runs} <= {"0", "1", "2"}
    assert sum(r.data.tags.get("wif.tune_best") == "true" for r in runs) == 1
    assert all(r.data.metrics["throughput_mean_img_s"] > 0 for r in runs)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("Use it: wif-study "))
    overrides = line.removeprefix("Use it: wif-study ").split()
    assert overrides[0] == "loader=baseline" and "preset=smoke" in overrides and "data.fraction=0.4" in overrides
    validate(OmegaConf.to_object(compose_cfg(*overrides)))  # the printed line is a valid train.py command


def test_wif_tune_refuses_a_loader_it_cannot_tune(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = _tool(tmp_path, store, cache_dir, "wif.tools.tune", "loader=bg")
    assert proc.returncode == 2 and "BackgroundGenerator" in proc.stderr and "Traceback" not in proc.stderr


def test_wif_batch_size_says_it_needs_cuda(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = _tool(tmp_path, store, cache_dir, "wif.tools.batch_size", "preset=smoke", env={"CUDA_VISIBLE_DEVICES": ""})
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


PARENT_STATE: Dict[str, str] = {}  # set in the test's process before a child starts: a forked child inherits it


def parent_state_seen() -> Dict[str, list]:
    """A data=custom factory whose one sample's label says whether its process inherited PARENT_STATE."""
    return {"train": [(torch.zeros(2), int(bool(PARENT_STATE)))]}


def test_wif_batch_size_runs_its_children_in_fresh_processes_that_inherit_nothing() -> None:
    """Issue 47 item 3: a process forked from one that has initialized CUDA (a test session, a user's script)
    cannot use CUDA. The probes and the dataset factory run in fresh interpreters: state set here is not there."""
    from wif.config.targets import typed
    from wif.tools.batch_probe import first_sample

    conf = typed(compose_cfg("preset=smoke", "data=custom", "data._target_=tests.test_tools.parent_state_seen"))
    PARENT_STATE["cuda"] = "initialized"  # what a fork would carry over: this process's memory
    try:
        sample = first_sample(conf)
    finally:
        PARENT_STATE.clear()
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
    proc = _tool(
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
@pytest.mark.parametrize("behind_cycles", [0, 20_000_000], ids=["compute-ahead", "compute-behind"])
def test_stream_prefetcher_never_uses_a_batch_before_its_copy(behind_cycles: int) -> None:
    """Large pinned batches, each filled with its index, read on the compute stream as soon as they are handed
    over. Compute ahead of the copies (no delay) exposes a missing wait_stream: a batch read before its copy
    landed. Compute far behind (a GPU sleep after each read) exposes a missing record_stream: a freed batch's
    memory refilled by a later copy before the compute stream read it."""
    device = torch.device("cuda", 0)
    host = [
        (torch.full((64, 3, 256, 256), float(i)).pin_memory(), torch.full((64,), i).pin_memory()) for i in range(12)
    ]
    seen = []
    for x, y in StreamPrefetcher(host, device):
        seen.append((x.clone(), y.clone(), x.sum()))  # on the compute stream, right after the handoff
        if behind_cycles:
            torch.cuda._sleep(behind_cycles)
    torch.cuda.synchronize()
    assert len(seen) == len(host)
    for i, (x, y, total) in enumerate(seen):
        assert x.min().item() == x.max().item() == float(i) and torch.all(y == i)
        assert total.item() == pytest.approx(float(i) * x.numel())


@gpu_only
def test_stream_prefetcher_trains_like_the_plain_copy(cache_dir: Path) -> None:
    from wif.run.training import train

    losses = {}
    for transfer in ("non_blocking", "stream"):
        conf = OmegaConf.to_object(
            compose_cfg(
                "preset=smoke",
                "loader=pin_nb",
                f"transfer={transfer}",
                "data.fraction=0.7",
                f"data.cache_dir={cache_dir}",
            )
        )
        epochs: List[dict] = []
        torch.backends.cudnn.deterministic = True  # the two runs differ only in how batches arrive
        try:
            on = lambda kind, p: epochs.append(p) if kind == "epoch" else None  # noqa: E731, B023 - called here
            train(conf, torch.device("cuda", 0), on)
        finally:
            torch.backends.cudnn.deterministic = False
        losses[transfer] = [(e["train_loss"], e["val_loss"]) for e in epochs]
    for plain, stream in zip(losses["non_blocking"], losses["stream"]):
        assert stream == pytest.approx(plain, rel=1e-3)


@gpu_only
def test_wif_batch_size_on_a_gpu(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = _tool(tmp_path, store, cache_dir, "wif.tools.batch_size", "preset=smoke", "--max-batch", "512")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Largest batch size: 512" in proc.stdout and "Use it: wif-study data.batch_size=512" in proc.stdout
    proc = _tool(tmp_path, store, cache_dir, "wif.tools.batch_size", "preset=smoke", "--fill", "0.0001")
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
