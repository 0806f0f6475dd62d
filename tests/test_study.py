"""The study as a user runs it: one real multirun of train.py, read back from a real MLflow store."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import STUDY_LOADERS, new_store, run_train, train_runs
from wif.measure.sysinfo import usable_cores

pytestmark = pytest.mark.slow

EPOCH_METRICS = {
    "epoch_time_s",
    "throughput_img_s",
    "train_loss",
    "val_loss",
    "val_acc",
    "val_time_s",
    "data_wait_s",
    "compute_s",
    "data_wait_share",
    "compute_share",
    "first_batch_s",
    "cpu_util_pct",
    "minor_faults",
    "tree_cpu_s",
}
RUN_METRICS = {
    "time_total_s",
    "epoch_time_mean_s",
    "epoch_time_median_s",
    "host_other_cpu_pct",
    "test_acc",
    "setup_s",
    "ram_peak_rss_mb",
    "ram_peak_uss_mb",
    "ram_peak_pss_mb",
    "workers_peak",
    "shm_peak_mb",
    "sampler_cpu_pct",
    "job_overhead_s",
}
GPU_ONLY = {
    "vram_peak_allocated_mb",
    "vram_peak_reserved_mb",
    "vram_peak_device_mb",
    "gpu_idle_s",
    "gpu_util_pct",
    "gpu_blocked_s",
}
# The README's grid, smaller: a quarter of preset=smoke's training images, a third of its test images, and two
# epochs (a warm-up and a measured one) instead of three. Each worker-based run's cost is its workers' starts,
# one per epoch and split. Batches of 32 keep the steps that let the model learn (test_the_smaller_model_learns).
EPOCHS = 2
GRID = (
    "loader=glob(*)",
    "data.fraction=0.1,0.4,0.7",
    "preset=smoke",
    "repeat=0",
    "data.num_train=500",
    "data.num_test=64",
    f"trainer.epochs={EPOCHS}",
    "data.batch_size=32",
)


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    """The README's smoke grid, run once for this module: 11 loaders x 3 fractions, one repeat."""
    work = tmp_path_factory.mktemp("grid")
    store = new_store(work)
    proc = run_train(work, store, cache_dir, *GRID)
    return work, store, proc


def test_smoke_grid_leaves_33_finished_runs(grid) -> None:
    _, store, proc = grid
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = train_runs(store, status="FINISHED")
    assert len(runs) == 33
    assert {r.data.tags["wif.loader"] for r in runs} == set(STUDY_LOADERS)
    assert {r.data.tags["wif.fraction"] for r in runs} == {"0.1", "0.4", "0.7"}
    assert {r.data.tags["wif.cell"] for r in runs} == {
        f"{lo}@{f}" for lo in STUDY_LOADERS for f in ("0.1", "0.4", "0.7")
    }
    assert sorted(int(r.data.tags["wif.sweep_pos"]) for r in runs) == list(range(33))
    ran = [r.data.tags["wif.cell"] for r in sorted(runs, key=lambda r: int(r.data.tags["wif.sweep_pos"]))]
    grid_order = [f"{lo}@{f}" for lo in sorted(STUDY_LOADERS) for f in ("0.1", "0.4", "0.7")]
    assert ran != grid_order  # the block's cells run in shuffled order (hydra/sweeper=blocks)
    assert {r.data.tags["wif.block"] for r in runs} == {"0"}
    (sweep_id,) = {r.data.tags["wif.sweep_id"] for r in runs}
    # its folder, absolute: a sweep started in the same second in another folder has another id
    assert Path(sweep_id).is_absolute() and Path(sweep_id).parent.parent == grid[0].resolve() / "multirun"
    assert "[33/33]" in proc.stdout + proc.stderr  # progress names the job and the sweep's size


def test_workers_beyond_the_cores_are_said_once_per_job_not_every_epoch(grid) -> None:
    _, _, proc = grid
    out = proc.stdout + proc.stderr
    assert "This DataLoader will create" not in out  # PyTorch's warning, repeated per epoch, is replaced
    if usable_cores() < 8:
        assert out.count("loader.num_workers=8 is more than the") == 2 * 3  # pin_nb_w8_pf2/pf8 x 3 fractions


def test_every_run_carries_its_figures_and_context(grid) -> None:
    _, store, _ = grid
    client = MlflowClient(store)
    for run in train_runs(store):
        m, tags, params = run.data.metrics, run.data.tags, run.data.params
        assert EPOCH_METRICS | RUN_METRICS <= m.keys(), run.info.run_name
        assert not GPU_ONLY & m.keys(), "a CPU run must not report GPU figures (never a false 0)"
        assert tags["wif.device"] == "cpu" and tags["wif.gpu"] == "none"
        assert tags["wif.contended"] in ("true", "false")
        for key in (
            "wif.cpu",
            "wif.cpu_logical_cores",
            "wif.ram_total_gb",
            "wif.host",
            "wif.git_commit",
            "wif.version.torch",
            "wif.config_hash",
        ):
            assert tags[key], key
        assert params["loader.name"] == tags["wif.loader"] and params["data.fraction"] == tags["wif.fraction"]
        assert int(params["trainer.epochs"]) == EPOCHS
        history = client.get_metric_history(run.info.run_id, "epoch_time_s")
        assert sorted(h.step for h in history) == list(range(EPOCHS))  # one figure per epoch, the warm-up's too
        assert m["ram_peak_uss_mb"] <= m["ram_peak_pss_mb"] <= m["ram_peak_rss_mb"]
        assert 0 < m["data_wait_share"] < 1 and m["compute_s"] < m["epoch_time_s"]
        assert m["first_batch_s"] <= m["data_wait_s"]  # the workers' start-up (iter()) is waited for, and counted
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"config.yaml"}


def test_workers_are_counted(grid) -> None:
    _, store, _ = grid
    runs = {(r.data.tags["wif.loader"], r.data.tags["wif.fraction"]): r.data.metrics for r in train_runs(store)}
    for fraction in ("0.1", "0.4", "0.7"):
        main, w8 = runs[("pin_nb", fraction)], runs[("pin_nb_w8_pf2", fraction)]
        assert (main["workers_peak"], w8["workers_peak"]) == (0, 8)
        assert w8["ram_peak_rss_mb"] > main["ram_peak_rss_mb"]  # PSS growth is tested in test_measure.py


def test_the_smaller_model_learns(grid) -> None:
    _, store, _ = grid
    accs = [r.data.metrics["val_acc"] for r in train_runs(store) if r.data.tags["wif.fraction"] == "0.7"]
    assert sum(accs) / len(accs) > 0.2  # ten classes: chance is 0.1


def test_rerunning_the_same_command_resumes(grid, cache_dir: Path) -> None:
    work, store, _ = grid
    proc = run_train(work, store, cache_dir, *GRID)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(train_runs(store, status="FINISHED")) == 33
    assert "33 skipped" in proc.stdout + proc.stderr


TRANSFER_CELLS = {
    "pin_w4_pf2": "float",
    "pin_nb_w4_pf2": "float",
    "pin_nb_w4_pf2+stream": "float",
    "pin_nb_w4_pf2+uint8": "uint8",
    "pin_nb_w4_pf2+stream+uint8": "uint8",
    "pin_nb_w4_pf2+device_decode": "encoded",
    "pin_nb_w4_pf2+stream+device_decode": "encoded",
}


def test_the_transfers_study_runs_on_the_cpu_and_its_report_lists_every_transfer_with_its_bytes(
    tmp_path: Path, cache_dir: Path
) -> None:
    """+study=transfers on data=encoded (every cell), then on data=folder (a host and a device decode): each sweep's
    report has a row per transfer with the bytes it copied an epoch, data=fixed as the bound, and the caveat
    that device decoding on a CPU says nothing of its speed."""
    import pandas as pd

    from tests.decoding import smoke_conf
    from wif.data.datasets import load_datasets
    from wif.data.formats.source import encoded_files
    from wif.report.report_cli import main as report

    store = new_store(tmp_path)
    sizes = ("data.num_train=500", "data.num_test=64")  # a quarter of smoke's images: 40 to train on, 64 to test
    small = ("preset=smoke", "repeat=0", "data.fraction=0.1", "trainer.epochs=2", *sizes)  # a warm-up, a measured epoch
    encoded = run_train(tmp_path, store, cache_dir, "+study=transfers", "data=encoded", *small)
    assert encoded.returncode == 0, encoded.stderr[-3000:]
    runs = train_runs(store, status="FINISHED")
    assert {r.data.tags["wif.cell"] for r in runs} == {f"{c}@0.1" for c in TRANSFER_CELLS} | {"fixed@0.1"}
    folder = encoded_files(smoke_conf(cache_dir, "data=encoded", *sizes).data).where  # data=encoded's JPEGs as files
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "+study=transfers",
        "data=folder",
        f"data.root={folder}",
        "+transfers=non_blocking,device_decode,bound",
        *small,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = {
        r.data.params["data.source"]: r.data.tags["wif.sweep_id"]
        for r in train_runs(store, status="FINISHED")
        if r.data.params["data.source"] != "fixed"
    }
    assert len(set(sweeps.values())) == 2  # one sweep each

    for source, cells in (("encoded", TRANSFER_CELLS), ("folder", ("pin_nb_w4_pf2", "pin_nb_w4_pf2+device_decode"))):
        conf = smoke_conf(cache_dir, f"data={source}", f"data.root={folder}", "data.fraction=0.1", *sizes)
        train = load_datasets(conf.data).train
        n = len(train)
        want = {
            "float": n * (4 * 3 * 64 * 64 + 8),
            "uint8": n * (3 * 64 * 64 + 8),
            "encoded": sum(len(train.decoder.encoded(int(j))) for j in train.indices) + 8 * n,
        }
        out = tmp_path / f"report-{source}"
        assert (
            report(
                [
                    "--tracking-uri",
                    store,
                    "--out",
                    str(out),
                    "--no-log",
                    "--keep-contended",
                    "--sweep-id",
                    sweeps[source],
                ]
            )
            == 0
        )
        rows = pd.read_csv(out / "summary.csv").set_index("loader")
        assert set(rows.index) == set(cells), source
        for cell in cells:
            assert rows.loc[cell, "copy_bytes_per_epoch"] == want[TRANSFER_CELLS[cell]], (source, cell)
        md = (out / "summary.md").read_text()
        assert "copied MB/epoch" in md and "1 as the on-device upper bound" in md
        assert "speedup vs pin_w4_pf2" in md  # the study's own reference (tracking.baseline), not n/a
        if source == "encoded":
            assert rows.loc["pin_w4_pf2", "speedup"] == 1.0 and rows["speedup"].notna().all(), rows["speedup"]
        assert "**Note: decoded on the CPU.**" in md
