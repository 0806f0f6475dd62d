"""The `wif-study` command: the Who_is_Faster study, one run or a sweep; `python train.py` in a checkout.

It takes Hydra's command line on the `conf/` shipped in the package, and writes mlflow.db where it starts.
Imports stay light: spawned workers and ranks import the main module again.

    wif-study -m 'loader=glob(*)' data.fraction=0.1,0.4,0.7            # the study: 330 jobs
    wif-study preset=smoke loader=mine --config-dir myconf             # one run, a loader of your own
"""

import logging

import hydra
from omegaconf import DictConfig

from wif.config import register_configs
from wif.config.compose import CONF_DIR

register_configs()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> object:
    """One job of the study (Hydra calls it once per job of a multirun)."""
    from wif.config import ConfigError, validate
    from wif.config.exits import EXIT_BAD_SETTING
    from wif.config.targets import typed

    try:  # a bad value is refused before torch and MLflow are imported: seconds sooner on a laptop
        validate(typed(cfg))
    except ConfigError as err:
        logging.getLogger("wif").error("Bad setting: %s", err)
        raise SystemExit(EXIT_BAD_SETTING) from None
    from wif.sweep.job import run_job

    return run_job(cfg)


def run() -> None:
    """The console script: what Hydra refuses while composing is one line and exit 2, as train.py's."""
    from wif.config.exits import main_with_bad_settings, quick_exit

    quick_exit()
    main_with_bad_settings(main)


if __name__ == "__main__":
    run()
