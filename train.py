"""Who is Faster: `python train.py -m 'loader=glob(*)' data.fraction=0.1,0.4,0.7` runs the whole study."""

import hydra
from omegaconf import DictConfig

from wif.config import register_configs
from wif.job import run_job

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> object:
    return run_job(cfg)


if __name__ == "__main__":
    main()
