"""The project's Hydra configuration for command-line tools other than the study (wif-tune, wif-plan, ...).

They compose the same `conf/`, shipped in the package, with the study's overrides, so a setting pastes back
unchanged. A user's `--config-dir` is searched after it. Errors come back as `ConfigError`, one sentence.
"""

from __future__ import annotations

import argparse
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra._internal.hydra import Hydra
from hydra.core.config_loader import ConfigLoader
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from wif.config.checks import validate
from wif.config.exits import one_line
from wif.config.schema import Config, ConfigError, register_configs
from wif.config.targets import typed

STUDY_COMMAND = "wif-study"  # what a printed line to paste starts with: the installed command, in any folder
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # wif/conf: the checkout's conf/, or the wheel's copy


def user_config_dir(config_dir: Optional[Path]) -> Optional[Path]:
    """The user's own YAML folder as an absolute path (None: none given); ConfigError if it is no folder."""
    if config_dir is None:
        return None
    folder = Path(config_dir).expanduser().resolve()
    if not folder.is_dir():
        raise ConfigError(
            f"--config-dir {config_dir}: no such folder (a folder of your own YAML, e.g. "
            "myconf/loader/mine.yaml, searched after wif's conf/)."
        )
    return folder


@contextmanager
def wif_hydra(config_dir: Optional[Path] = None) -> Iterator[ConfigLoader]:
    """Hydra initialized on wif's `conf/`, the user's folder searched after it, as `--config-dir` does for the study."""
    folder = user_config_dir(config_dir)
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        if folder is not None:  # as hydra._internal.utils._run_hydra adds --config-dir
            search_path = GlobalHydra.instance().config_loader().get_search_path()
            search_path.prepend("command-line", f"file://{folder}", anchor=SearchPathQuery(provider="schema"))
            GlobalHydra.instance().clear()
            Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
        yield GlobalHydra.instance().config_loader()


def load_config(overrides: Sequence[str], config_dir: Optional[Path] = None) -> Config:
    """Compose `conf/config.yaml` with `overrides` (a name also looked up in `config_dir`, the user's own
    folder), convert to the typed schema, and validate it."""
    try:
        with wif_hydra(config_dir):
            cfg = compose("config", overrides=list(overrides))
        conf: Config = typed(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(one_line(err)) from None
    validate(conf)
    return conf


def setup_logging(prog: str) -> None:
    """Warnings and the supervisor's messages, prefixed with the tool's name; no Hydra log files."""
    logging.basicConfig(level=logging.WARNING, format=f"{prog}: %(message)s")


def tool_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A tool's command line: the same KEY=VALUE overrides and --config-dir the study takes."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    add_config_args(p, "the same overrides wif-study takes")
    return p


def add_config_args(p: argparse.ArgumentParser, overrides_help: str) -> None:
    """The overrides, and --config-dir: a folder of the user's own YAML composed with wif's conf/."""
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=overrides_help)
    p.add_argument(
        "--config-dir",
        type=Path,
        help="a folder of your own YAML (e.g. myconf/loader/mine.yaml: "
        "loader=mine), searched after wif's conf/ as wif-study --config-dir searches it",
    )
