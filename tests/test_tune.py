"""wif-tune and wif.tune_workers as a first-hour user meets them (issue 48): a worker-only key set by the user
is the search's to apply, and the table never prints a figure it did not measure as nan."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from tests.tools import run_tool, tool_runs


@pytest.mark.slow
def test_wif_tune_takes_persistent_workers_for_the_trials_with_workers(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    proc = run_tool(
        tmp_path,
        store,
        cache_dir,
        "wif.tools.tune",
        "preset=smoke",
        "data.fraction=0.1",
        "loader.persistent_workers=true",
        "--batches",
        "2",
        "--epochs",
        "2",
        "--max-workers",
        "1",
        "--step",
        "1",
        "--radius",
        "0",
        "--min-gain",
        "10",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    persistent = {
        int(r.data.tags["wif.num_workers"]): r.data.params["loader.persistent_workers"]
        for r in tool_runs(store, "tune")
    }
    assert persistent == {0: "False", 1: "True"}  # off without workers, on with them
    line = next(x for x in proc.stdout.splitlines() if x.startswith("Use it: "))
    assert "loader.num_workers=0" in line and "loader.persistent_workers=false" in line  # the pick, 0 workers


def test_tune_workers_table_says_why_it_has_no_ram_figure() -> None:
    import wif

    data = TensorDataset(torch.zeros(32, 3, 8, 8), torch.zeros(32, dtype=torch.long))
    pick = wif.tune_workers(data, batch_size=8, max_workers=0, batches=2, epochs=2, verbose=False)
    header, row, note = pick.table.splitlines()
    assert "RAM PSS MB" in header and "nan" not in pick.table
    assert row.split()[6] == "-" and note.startswith("RAM PSS MB '-': not measured (wif.tune_workers runs")
