"""What checking a whole sweep before its first job costs: the study's 330 jobs, wif.sweep.preflight against
composing every job in full as Hydra's launcher does (measured on a sample, scaled to the sweep).

Imports (torch, torchvision) are paid before timing: the first job of the sweep pays them anyway.

    python benchmarks/preflight.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wif.config import register_configs  # noqa: E402
from wif.sweep.callback import plan_jobs  # noqa: E402
from wif.sweep.preflight import _typed, bad_jobs  # noqa: E402

STUDY = ["loader=glob(*)", "data.fraction=0.1,0.4,0.7"]
SAMPLE = 20  # jobs composed in full to estimate that cost per job


def main() -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", STUDY, run_mode=RunMode.MULTIRUN)
        jobs = plan_jobs(master.hydra.sweeper.params, master.hydra.overrides.task)
        bad_jobs(master, jobs[:1])  # imports and first use, as the sweep's first job would pay them
        t0 = time.perf_counter()
        bad = bad_jobs(master, jobs)
        checked = time.perf_counter() - t0
        t0 = time.perf_counter()
        for job in jobs[:SAMPLE]:
            _typed(loader.load_sweep_config(master, list(job)))
        full = (time.perf_counter() - t0) / SAMPLE
    print(f"{len(jobs)} jobs ({len(bad)} bad) checked in {checked:.2f} s, {1000 * checked / len(jobs):.1f} ms a job")
    print(
        f"composing each job in full: {1000 * full:.0f} ms a job, {full * len(jobs):.1f} s for the sweep "
        f"({full * len(jobs) / checked:.1f}x the check)"
    )


if __name__ == "__main__":
    main()
