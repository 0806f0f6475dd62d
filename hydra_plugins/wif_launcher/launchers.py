"""hydra-submitit-launcher's Slurm and Local launchers, waiting for every job however it ends.

The plugin collects `job.results()` job by job. The first job that ended without a result raises there,
as Hydra's sweeper does on a job whose task raised. Such a job met scancel, preemption, a time limit, an
out-of-memory or SIGKILL, or is a run marked KILLED, whose job exits on purpose. The sweep command then dies
with a traceback while the jobs behind it run on, and nothing says how the sweep ended.

These launchers await every job. One that ended without a result is logged in one line, remembered in
`wif.sweep.callback.LOST` as job number -> why, and handed to Hydra as done with no value. So the sweep's
tally, read from the store, counts it as killed and closes a run it left RUNNING. The command fails as
for any killed run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, List, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

from hydra_plugins.hydra_submitit_launcher import submitit_launcher as plugin
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from wif.sweep import callback

log = logging.getLogger("wif")


class _AwaitsEveryJob(plugin.BaseSubmititLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """The plugin's launch (same executor, parameters and log lines), but every job awaited."""
        import submitit

        assert self.config is not None
        params = dict(self.params)
        timeouts = params.pop("max_num_timeout", None)
        init = {f"{self._EXECUTOR}_max_num_timeout": timeouts} if timeouts is not None else {}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=params.pop("submitit_folder"), **init)
        generic = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in generic else f"{self._EXECUTOR}_{k}": v for k, v in params.items()})
        log.info("Submitit '%s' sweep output dir : %s", self._EXECUTOR, self.config.hydra.sweep.dir)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        job_params: List[Any] = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*job_params))
        return [
            self._outcome(job, idx, overrides)
            for idx, (job, overrides) in enumerate(zip(jobs, job_overrides), start=initial_job_idx)
        ]

    @staticmethod
    def _outcome(job: Any, idx: int, overrides: Sequence[str]) -> JobReturn:
        from submitit.core.utils import FailedJobError, UncompletedJobError

        try:
            ret = job.results()[0]
            if ret.status != JobStatus.FAILED:
                return ret
            why = f"job {job.job_id} failed outside its run: {type(ret._return_value).__name__}: {ret._return_value}"
        except UncompletedJobError as err:  # FailedJobError too: an error outside the task, its last line says which
            last = str(err).strip().splitlines()[-1][:300] if isinstance(err, FailedJobError) else ""
            why = f"job {job.job_id} ended without a result ({job.state}){': ' + last if last else ''}"
        log.error("#%d %s; its log: %s", idx, why, job.paths.stderr)
        callback.LOST[idx] = why
        # COMPLETED with no value: Hydra's sweeper raises on a FAILED one before the sweep's tally is made
        return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None)


class SlurmLauncher(_AwaitsEveryJob):
    _EXECUTOR = "slurm"


class LocalLauncher(_AwaitsEveryJob):
    _EXECUTOR = "local"
