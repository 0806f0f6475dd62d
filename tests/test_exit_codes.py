"""Exit codes a script can trust, and errors raised in DataLoader workers shown as one line (the
traceback in the job's log file and the run's error.txt)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader, Dataset

from tests.conftest import run_train, train_runs
from tests.test_data import _data_cfg, _image_folder
from wif.config import ConfigError
from wif.exits import describe
from wif.folder_check import check_folder


class _Unreadable(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        try:
            raise OSError("disk gone")
        except OSError as err:  # chained, as wif.data raises its own error from the decoder's
            raise ConfigError(f"cannot read sample {i}. Replace it.") from err


def test_an_error_from_a_worker_is_described_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        next(iter(DataLoader(_Unreadable(), num_workers=1)))
    assert "Traceback" in str(caught.value)  # as PyTorch hands it over
    name, message = describe(caught.value, num_workers=1)
    assert (name, message) == ("ConfigError", "cannot read sample 0. Replace it. (raised in DataLoader worker 0)")
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert "DataLoader worker process died" in describe(reset, num_workers=2)[1]
    assert describe(reset, num_workers=0) == ("ConnectionResetError", str(reset))


@pytest.mark.slow
def test_a_failing_single_run_exits_1_and_keeps_the_worker_traceback_for_the_log(tmp_path: Path, store: str,
                                                                                   cache_dir: Path) -> None:
    root = _image_folder(tmp_path / "images")
    check_folder(_data_cfg(cache_dir, "data=folder", f"data.root={root}"))  # an earlier run's check, cached
    damaged = root / "train" / "class1" / "2.png"  # since damaged in place: same size, same mtime
    st = damaged.stat()
    damaged.write_bytes(b"x" * st.st_size)
    os.utime(damaged, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc = run_train(tmp_path, store, cache_dir, "preset=smoke", "data=folder", f"data.root={root}",
                     "data.fraction=1.0", "data.val_split=0.25", "loader=pin_nb_w4_pf2", "loader.num_workers=2",
                     multirun=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    (line,) = [line for line in out.splitlines() if "FAILED" in line]
    assert "class1/2.png" in line and "DataLoader worker" in line
    (run,) = train_runs(store)
    assert run.info.status == "FAILED"
    (log_file,) = tmp_path.glob("outputs/*/*/train.log")
    assert "Traceback" in log_file.read_text() and "_worker_loop" in log_file.read_text()
    error_txt = MlflowClient(store).download_artifacts(run.info.run_id, "error.txt", str(tmp_path))
    assert "_worker_loop" in Path(error_txt).read_text()
