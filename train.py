"""Who is Faster: `python train.py -m 'loader=glob(*)' data.fraction=0.1,0.4,0.7` runs the whole study."""

import hydra
from omegaconf import DictConfig

from wif.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> object:
    # Imported here, not above: DataLoader workers started with spawn or forkserver import this file as
    # their main module, and must not pay for MLflow and the job machinery they never use.
    from wif.sweep.job import run_job

    return run_job(cfg)


if __name__ == "__main__":
    from wif.config.exits import main_with_bad_settings

    main_with_bad_settings(main)
