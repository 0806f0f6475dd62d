"""The project's Hydra configuration for command-line tools other than train.py (wif-tune, wif-batch-size).

They compose the same `conf/` with the same overrides train.py takes, so a setting found by a tool is
pasted back into train.py unchanged. Errors come back as `ConfigError`, one sentence for the user.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from wif.config.checks import validate
from wif.config.schema import Config, ConfigError, register_configs
from wif.config.targets import typed

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # the checkout's conf/, beside train.py


def load_config(overrides: Sequence[str], config_dir: Optional[Path] = None) -> Config:
    """Compose `conf/config.yaml` with `overrides`, convert to the typed schema, and validate it."""
    folder = Path(config_dir or CONF_DIR).expanduser().resolve()
    if not (folder / "config.yaml").is_file():
        raise ConfigError(f"no config.yaml in {folder}: pass --config-dir pointing at the project's conf/ folder.")
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
        conf: Config = typed(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(" ".join(str(err).split())) from None
    validate(conf)
    return conf


def setup_logging(prog: str) -> None:
    """Warnings and the supervisor's messages, prefixed with the tool's name; no Hydra log files."""
    logging.basicConfig(level=logging.WARNING, format=f"{prog}: %(message)s")


def tool_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A tool's command line: the same KEY=VALUE overrides train.py takes, and where `conf/` is."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="the same overrides train.py takes")
    p.add_argument("--config-dir", type=Path, help="the project's conf/ folder (default: the checkout's)")
    return p
