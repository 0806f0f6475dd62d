"""wif-advise end to end: a real run on a small data-bound workload with a real SQLite store, and a bad
override refused in one line before anything runs; its "where the time goes" split on figures given by hand."""

import math
from pathlib import Path

import pytest

from tests.advising_overrides import SLOW_READS, advise_overrides
from tests.conftest import SideBySide, holds_unless_disturbed
from wif.advisor.answer import PHASES, Bound, where_time_goes
from wif.advisor.runner import Measured
from wif.measure.epochs import EPOCH_KEYS


def test_a_bad_override_is_refused_in_one_line_before_anything_runs(tmp_path: Path, side_by_side: SideBySide) -> None:
    # the two refusals at once: each times nothing, and pays seconds of imports
    side_by_side.start(
        "override", lambda: advise_overrides(tmp_path, "preset=smoke", "loader.num_workerz=2", refused=True)
    )
    side_by_side.start("option", lambda: advise_overrides(tmp_path, "preset=smoke", "--max-blocks", "1", refused=True))
    out, bad_option = side_by_side.result("override"), side_by_side.result("option")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wif-advise:") and "num_workerz" in lines[0]
    assert bad_option.returncode == 2 and "max-blocks" in bad_option.stderr
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.alone
@pytest.mark.slow
def test_advise_finds_the_data_bound_and_races_a_worker_setting(tmp_path):
    # Its items sleep: others' CPU does not change which setting is faster, so here no run counts as contended
    # (tests/test_advise_folder.py tests what contention does to the race).
    reads = [o if o != "data.fraction=0.05" else "data.fraction=0.03" for o in SLOW_READS]  # epochs of ~0.8 s
    out = advise_overrides(
        tmp_path,
        *reads,
        "measure.contended_pct=10000",
        "--epochs",
        "2",
        "--race-candidates",
        "1",
        "--max-blocks",
        "3",
        "--max-epochs",
        "5",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`wif.kind` = 'advise'")
    parents = [r for r in runs if r.data.tags.get("wif.advise_role") == "parent"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == len(runs) - 1 >= 3
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"epoch_split.png", "candidates.txt"} <= artifacts
    holds_unless_disturbed(
        "Data-bound" in text and "3/4 the race: current against w" in text,
        children,
        "items that sleep 3 ms make the epoch data-bound, and a worker setting is raced",
    )
    answer = text[text.index("4/4 the answer") :]
    assert "predicted s" in answer and "measured s" in answer
    holds_unless_disturbed(
        "Pick: w" in answer, children, "workers overlap the items' waits: a worker setting is picked"
    )  # items wait 3 ms without CPU
    speed = float(answer.split("95% interval ")[1].split("-")[0])
    assert speed > 1.0
    assert "Use it: wif-study" in answer and "loader.num_workers=" in answer
    assert "DataLoader(" in answer
    assert len(children) >= 5 and {"measure", "loader", "race"} <= {r.data.tags["wif.advise_role"] for r in children}
    assert parents[0].data.tags["wif.advise.pick"].startswith("w")


def test_data_bound_is_said_only_where_the_loader_is_slower_than_the_model() -> None:
    """A serial loader 16x faster than the model still shows its wait (10% of the epoch): exposed, not the
    limit (before, "Data-bound"); a loader slower than the model is data-bound."""
    epoch = {"epoch_time_s": 1.0, "data_wait_s": 0.1, "copy_s": 0.0, "compute_s": 0.9}
    run = Measured("configured", "current", "r", "FINISHED", {}, [epoch, epoch])
    bound = Bound(epoch_s=0.9, source="data=fixed", items=900)
    searched, said, held = where_time_goes(run, bound, loader_img_s=16 * 1000.0, margin=0.05, workers=0)
    assert searched and "Data-bound" not in said and "exposed, not a limit" in said and "0 workers" in said
    assert said.splitlines()[-1].startswith("What holds the epoch: the wait for data, exposed: the step waits 10%")
    assert said.splitlines()[-1] == f"What holds the epoch: {held.said}."  # the limit recorded is the one said
    slow = {**epoch, "data_wait_s": 0.6, "compute_s": 0.4, "epoch_time_s": 1.0}
    run = Measured("configured", "current", "r", "FINISHED", {}, [slow, slow])
    bound = Bound(epoch_s=0.4, source="data=fixed", items=900)
    searched, said, _ = where_time_goes(run, bound, loader_img_s=1000.0, margin=0.05, workers=0)
    lines = said.splitlines()
    assert searched and lines[1].startswith("Data-bound: the loader gives 1,000 img/s")
    assert lines[2] == "What holds the epoch: the loader: the step waits 60% of the epoch for its batches."
    # the loader's trial never ran (accelerate's cv_example under --minutes 2 said "the loader gives nan img/s")
    searched, said, _ = where_time_goes(run, bound, loader_img_s=float("nan"), margin=0.05, workers=4)
    assert searched and said.splitlines()[1].startswith("Waiting for data: epochs are 150% slower"), said
    assert "nan" not in said, said


def test_where_the_time_goes_lists_gpu_blocked_so_a_gpu_epochs_phases_add_up() -> None:
    gpu = {
        "epoch_time_s": 1.0,
        "data_wait_s": 0.1,
        "copy_s": 0.05,
        "gpu_blocked_s": 0.3,
        "compute_s": 0.5,
        "gpu_idle_s": 0.05,
    }  # a CUDA run's epoch, the first of the two the warm-up
    bound = Bound(epoch_s=0.85, source="data=fixed", items=1000)
    _, sentence, _ = where_time_goes(
        Measured("configured", "pin_nb", "r", "FINISHED", {}, [gpu, gpu]), bound, loader_img_s=5000.0, margin=0.05
    )
    assert "GPU blocked 0.300 s" in sentence
    split = sentence.split("(", 1)[1].split(")", 1)[0]  # "data wait 0.100 s, copy 0.050 s, ..."
    assert sum(float(p.rsplit(" ", 2)[1]) for p in split.split(", ")) == pytest.approx(gpu["epoch_time_s"])
    assert {key for key, _ in PHASES} <= set(EPOCH_KEYS)  # each phase is read back from the run's epochs
    cpu = {**gpu, "gpu_blocked_s": math.nan, "gpu_idle_s": math.nan, "compute_s": 0.85}  # no CUDA: not measured
    _, sentence, _ = where_time_goes(
        Measured("configured", "pin_nb", "r", "FINISHED", {}, [cpu, cpu]), bound, loader_img_s=5000.0, margin=0.05
    )
    assert "GPU" not in sentence and "compute 0.850 s" in sentence


def test_the_line_to_paste_says_when_the_pick_holds_decoded_images_in_ram() -> None:
    """A preload pick's gain is the dataset's as much as the loader's: its DataLoader line alone would not give it."""
    from wif.advisor.candidates import Candidate
    from wif.advisor.mode import dataloader_kwargs

    keys = {"loader.num_workers": 2, "loader.persistent_workers": True}
    plain = Candidate(name="w2", keys=keys, workers=2, persistent=True, prefetch=2, copy_hidden=False)
    held = Candidate(
        name="w2-preload",
        keys={**keys, "data.preload": True},
        workers=2,
        persistent=True,
        prefetch=2,
        copy_hidden=False,
    )
    assert dataloader_kwargs(plain, False).startswith("DataLoader(dataset, batch_size=..., shuffle=True, num_workers=2")
    line = dataloader_kwargs(held, False)
    assert line.startswith("a dataset that holds its decoded images in RAM (wif's data.preload=true), DataLoader(")
    assert line.endswith("num_workers=2, persistent_workers=True, prefetch_factor=2, pin_memory=False)")


def test_on_a_gpu_the_dataset_on_the_device_is_a_candidate_as_the_study_has_it() -> None:
    """The GPU step issue, item 3: on the H200 gpu_resident beat baseline by more than the loader's wait and copy
    (its step was shorter: no loader work beside it); the advice tries it on a GPU. Applied to any loader setting
    it is the study's loader=gpu_resident; never on a CPU, nor where the data is already there or is made by the
    user's Dataset on access."""
    from wif.advisor.candidates import apply, resident
    from wif.advisor.mode import dataloader_kwargs
    from wif.config.compose import load_config

    base = load_config(["loader=pin_nb_w4_pf2", "data.fraction=0.4"])
    (cand,) = resident(base, cuda=True)
    got, study = apply(base, cand), load_config(["loader=gpu_resident", "data.fraction=0.4"])
    assert got.loader == study.loader and got.transfer == study.transfer
    assert cand.workers == 0 and cand.copy_hidden  # predicted with no copy and no worker
    assert dataloader_kwargs(cand, False).startswith("no DataLoader: the whole dataset moved to the device once")
    assert resident(base, cuda=False) == [] and resident(study, cuda=True) == []
    assert resident(load_config(["data=custom", "data._target_=torchvision.datasets.FakeData"]), cuda=True) == []
