"""A multirun's configuration as Hydra composes it (`compose_hydra`), the sbatch file submitit would write for it,
and SMOKE, one smoke job's overrides (tests/test_cluster.py, tests/test_ddp.py, tests/test_local_gpus.py)."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from tests.conftest import CONF

SMOKE = ("preset=smoke", "repeat=0")


def compose_hydra(*overrides: str) -> DictConfig:
    """The configuration a multirun would launch with, hydra node included."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def sbatch_script(launcher: DictConfig, jobs: int) -> str:
    """The sbatch file submitit would write for this launcher config: the launcher's own translation
    (generic keys -> SLURM's names, others as they are), rendered by submitit's own writer."""
    from submitit.slurm.slurm import SlurmExecutor, _convert_mem, _make_sbatch_string

    params = OmegaConf.to_container(launcher, resolve=False)
    for key in ("_target_", "submitit_folder", "max_num_timeout"):
        params.pop(key)
    eq = SlurmExecutor._equivalence_dict()
    params = {eq.get(k, k): v for k, v in params.items() if v is not None}
    params["mem"] = _convert_mem(params["mem"])
    params["job_name"] = "train"
    return _make_sbatch_string(
        command="python -u -m submitit.core._submit /sweep", folder="/sweep/%j", map_count=jobs, **params
    )
