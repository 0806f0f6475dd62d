"""wif's submitit launchers (`hydra/launcher=slurm`, `slurm_ddp`, `local_gpus`): hydra-submitit-launcher's,
waiting for every job however it ends (launchers.py). Hydra instantiates launchers only from the
`hydra_plugins` namespace package, as it does sweepers (hydra_plugins/wif_sweeper).
"""
