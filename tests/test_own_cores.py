"""The cores a run may use are its own CPUs and its cgroup's quota, not the machine's; and a job's sibling rank
is the job's own CPU, never another's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wif.measure.contention import HostCpuMeter, machine_busy_s
from wif.measure.sysinfo import cpu_quota

ROOT = Path(__file__).resolve().parents[1]


def test_a_cgroups_quota_caps_the_cores_and_max_or_minus_one_is_none(tmp_path: Path) -> None:
    v2, v1, uncapped = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    for folder in (v2, v1, uncapped):
        folder.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    (uncapped / "cpu.max").write_text("max 100000\n")
    assert cpu_quota([str(v2)]) == 1.5 and cpu_quota([str(tmp_path / "absent"), str(v1)]) == 4.0
    assert cpu_quota([str(uncapped)]) is None
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota([str(v1)]) is None and cpu_quota([str(tmp_path / "absent")]) is None


def test_the_cores_are_the_processs_cpus_under_taskset() -> None:
    """Under `taskset -c 0` a process may use 1 core, whatever the machine has (before: the machine's count);
    its meter reads its one CPU's busy time, less than the machine's."""
    code = (
        "from wif.measure import contention as c, sysinfo as s;"
        "print(s.usable_cores(), c.CORES, c.machine_busy_s() < c.machine_busy_s(None) or c.MACHINE == 1)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1", "True"]
    assert machine_busy_s() is not None


SPIN = "import time\nwhile time.process_time() < 0.6:\n    pass\n"  # 0.6 CPU s, however loaded the machine


def test_a_sibling_ranks_cpu_is_the_jobs_own() -> None:
    """The meter of one rank (a child of this process, the job's launcher) counts a sibling that burns 0.6
    CPU seconds as the job's own; metered alone, the rank has none of it (before: the sibling was "others")."""
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        job, alone = HostCpuMeter(rank.pid, job_pid=os.getpid()), HostCpuMeter(rank.pid)
        for meter in (job, alone):
            meter.mark()
        subprocess.run([sys.executable, "-c", SPIN], check=True)  # the sibling: ended and reaped by the launcher
        for meter in (job, alone):
            meter.mark()
        assert job.marks[1].ours_s - job.marks[0].ours_s >= 0.5  # whole ticks, user and system apart
        assert alone.marks[1].ours_s - alone.marks[0].ours_s < 0.5  # this process's own wait, and the rank's sleep
        assert job.tree_s(0, 1) < 0.5  # the run's own CPU is its own tree still (wif-advise prices a loader by it)
    finally:
        rank.kill()
        rank.wait()
