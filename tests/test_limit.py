"""What holds an epoch back (wif.advisor.limit), named from figures given by hand: each verdict, its words
and what moves it, and the advice's sentence carrying it. On a device the same figures come from the runs
(the GPU issue's checks); here they are constructed with known answers."""

from __future__ import annotations

import math

import pytest

from wif.advisor.answer import Bound, where_time_goes
from wif.advisor.limit import LAUNCH_REMEDIES, Figures, name_limit
from wif.advisor.runner import Measured

MARGIN = 0.05


def test_a_step_that_waits_for_its_batches_is_held_by_the_loader() -> None:
    held = name_limit(Figures(1.0, 0.40, 0.02, 0.55, 0.55), MARGIN)
    assert held.kind == "data" and held.share == pytest.approx(0.40) and "waits 40%" in held.said


def test_a_wait_for_a_loader_faster_than_the_step_is_the_wait_not_the_loader() -> None:
    """The same wait where the loader keeps up but is not overlapped with the step (0 workers): the limit is still
    the data's, said as its exposed wait (timm's train.py here was told "exposed, not a limit" and then "What
    holds the epoch: the loader")."""
    held = name_limit(Figures(1.0, 0.10, 0.0, 0.90, 0.90, exposed=True), MARGIN)
    assert held.kind == "data" and held.said.startswith("the wait for data, exposed: the step waits 10%")
    assert not held.said.startswith("the loader")


def test_a_copy_behind_the_gpu_is_the_copys() -> None:
    """The copy and the wait behind the GPU's queued work (gpu_blocked_s) together: 30% of the epoch."""
    held = name_limit(Figures(1.0, 0.02, 0.10, 0.65, 0.65, gpu_blocked_s=0.20, busy=0.9, on_gpu=True), MARGIN)
    assert held.kind == "copy" and held.share == pytest.approx(0.30) and "non_blocking" in held.said


def test_a_step_slowed_by_the_loaders_host_work_is_interference() -> None:
    """No wait, no copy, but the step takes 1.25x its replayed time: the loader's work slows it."""
    f = Figures(1.0, 0.01, 0.0, 0.90, 0.72, busy=0.5, on_gpu=True)
    held = name_limit(f, MARGIN)
    assert f.interference == pytest.approx(0.25)
    assert held.kind == "interference" and held.share == pytest.approx(0.18)
    assert "25% longer beside the loader" in held.said and "launches the step's kernels" in held.said
    on_cpu = name_limit(Figures(1.0, 0.01, 0.0, 0.90, 0.72), MARGIN)
    assert on_cpu.kind == "interference" and "share the cores" in on_cpu.said and "workers, " not in on_cpu.said


def test_a_gpu_idle_between_small_kernels_is_launch_bound() -> None:
    """The seed's GoogLeNet at 64 px on an H200: NVML busy 17-47%, no wait, the step as fast as replayed. The
    busy share is NVML's over the epoch taken over the step's part of it: 0.291 of a 1-s epoch whose step
    takes 0.97 s is 30% of the step."""
    held = name_limit(Figures(1.0, 0.01, 0.0, 0.97, 0.96, busy=0.291, on_gpu=True), MARGIN)
    assert held.kind == "launch" and held.share == pytest.approx(0.70) and held.busy == pytest.approx(0.30)
    assert "busy 30% of the step" in held.said and LAUNCH_REMEDIES in held.said and "0.960 s" in held.said
    assert "beyond it" not in held.said and held.launch_bound


def test_a_limit_on_a_gpu_that_idles_between_launches_says_the_launches_beyond_it() -> None:
    """The H200's baseline at fraction 0.7 (docs/on-a-gpu.md): 11.71-s epochs, 0.90 s of data wait, 0.30 s of
    copies, the step 1.40 s longer than replayed (10.40 against 9.00 s), NVML busy 25% of the epoch. The
    interference holds the epoch; mended, the step still idles between launches: the sentence names the
    interference and then the launches, busy 27% of the step (0.25 x 11.71 / 10.70), with the bound that caps
    the gain."""
    f = Figures(11.71, 0.90, 0.30, 10.40, 9.00, busy=0.25, on_gpu=True)
    held = name_limit(f, MARGIN)
    assert held.kind == "interference" and held.interference_s == pytest.approx(1.40)
    assert held.launch_bound and held.busy == pytest.approx(0.25 * 11.71 / 10.70)
    first, beyond = held.said.split("; beyond it, ")
    assert first.startswith("the loader's host work slows the step itself: it takes 16% longer")
    assert beyond.startswith("the launches: the GPU is busy 27% of the step") and "9.000 s an epoch" in beyond
    # The same epoch with the GPU busy 90% of it (98% of the step): the interference alone, no launches
    busy = name_limit(Figures(11.71, 0.90, 0.30, 10.40, 9.00, busy=0.90, on_gpu=True), MARGIN)
    assert busy.kind == "interference" and not busy.launch_bound and "beyond it" not in busy.said
    # On a CPU there is no busy share: never launch-bound
    cpu = name_limit(Figures(11.71, 0.90, 0.30, 10.40, 9.00), MARGIN)
    assert cpu.busy is None and not cpu.launch_bound and "beyond it" not in cpu.said


def test_a_busy_gpu_or_a_cpu_step_without_waits_computes() -> None:
    assert name_limit(Figures(1.0, 0.01, 0.0, 0.97, 0.96, busy=0.95, on_gpu=True), MARGIN).kind == "compute"
    assert name_limit(Figures(1.0, 0.01, 0.0, 0.97, math.nan), MARGIN).kind == "compute"  # no bound measured
    assert name_limit(Figures(1.0, 0.01, 0.0, 0.97, 0.96, busy=None, on_gpu=True), MARGIN).kind == "compute"


def test_the_advice_names_the_limit_beside_its_split() -> None:
    """A CPU step that waits 2% but runs 20% slower beside the loader than replayed: not data-bound, and the
    sentence says the loader's host work (before: 'the step itself, which loader settings cannot help')."""
    epoch = {"epoch_time_s": 1.0, "data_wait_s": 0.02, "copy_s": 0.0, "compute_s": 0.96}
    run = Measured("configured", "current", "r", "FINISHED", {}, [epoch, epoch])
    bound = Bound(epoch_s=0.8, source="data=fixed", items=900, compute_s=0.80)
    searched, said, _ = where_time_goes(run, bound, loader_img_s=2000.0, margin=MARGIN, workers=2, on_gpu=False)
    assert not searched and "beside the loader (its host work)" in said
    assert said.splitlines()[-1].startswith("What holds the epoch: the loader's host work slows the step itself")


def test_a_wait_no_loader_can_shorten_is_no_limit() -> None:
    """The H100's tiny step (2026-11-27): 24 layers of width 64 on batches of 8, whose step costs about as much
    as a TensorDataset's next(). The wait was 7% of the epoch with the GPU busy 7%: named "data" against the
    margin alone, yet the bound's replayed batches waited as long. Measured against the bound's own wait, the
    step idles between its launches."""
    f = dict(epoch_s=0.60, data_wait_s=0.042, copy_s=0.0, compute_s=0.558, bound_compute_s=0.55, busy=0.07)
    alone = name_limit(Figures(**f, on_gpu=True), MARGIN)
    assert alone.kind == "data" and alone.launch_bound and "beyond it, the launches" in alone.said
    held = name_limit(Figures(**f, bound_data_wait_s=0.040, on_gpu=True), MARGIN)
    assert held.kind == "launch" and held.busy == pytest.approx(0.07 * 0.60 / 0.558)
    # A loader that waits well beyond the bound's own wait is still the limit.
    slow = name_limit(Figures(**{**f, "data_wait_s": 0.20}, bound_data_wait_s=0.040, on_gpu=True), MARGIN)
    assert slow.kind == "data" and slow.share == pytest.approx(0.16 / 0.60)


GPU_STEP = """
import sys, torch, wif
tiny = sys.argv[1] == "tiny"
dev = torch.device("cuda")
# a list of ready device batches: each is handed over in about a microsecond, a step's launches take ~100 us
items, batch, width = (4096, 8, 64) if tiny else (32, 512, 4096)
batches = [torch.randn(batch, width, device=dev) for _ in range(items)]
layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(24)]).to(dev)
for epoch in range(3):
    for x in wif.watch(batches):
        layers(x)
"""


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_tiny_kernels_read_as_launch_bound_and_large_ones_as_compute(tmp_path, store: str) -> None:
    """The busy share is NVML's gpu_util_pct, read by the watch's sampler: a step of 24 tiny layers on batches
    of 8 leaves the GPU idle between launches (launch-bound), one of 4096-wide matmuls keeps it busy (compute).
    The batches are a list of device tensors, so neither step waits for data beyond the margin."""
    import os
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    script = tmp_path / "step.py"
    script.write_text(GPU_STEP)
    kinds = {}
    for case in ("tiny", "large"):
        env = {**os.environ, "MLFLOW_TRACKING_URI": store, "MLFLOW_EXPERIMENT_NAME": case}
        env.pop("WIF_WATCH_ORDERS", None)
        done = subprocess.run([sys.executable, str(script), case], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        client = MlflowClient(store)
        (run,) = client.search_runs([client.get_experiment_by_name(case).experiment_id])
        m = run.data.metrics
        figures = Figures(
            m["epoch_time_s"],
            m["data_wait_s"],
            0.0,
            m["compute_s"],
            math.nan,
            busy=m["gpu_util_pct"] / 100,
            on_gpu=True,
        )
        kinds[case] = (
            name_limit(figures, MARGIN).kind,
            m["gpu_util_pct"],
            round(m["data_wait_s"] / m["epoch_time_s"], 3),
        )
    assert kinds["tiny"][0] == "launch" and kinds["large"][0] == "compute", kinds
