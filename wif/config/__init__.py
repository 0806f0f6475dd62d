"""What a run is: the typed schema of every config group, its checks, and how a job ends.

    `schema`: the typed schema of every config group; `choices`: the errors, and the choices each key takes.
    `checks`: the checks a type cannot express, with the data's and the trainer's.
    `pipeline_checks`: the loader's, the transfer's, storage's and decoding's; `engine_checks`: the engines'.
    `targets`: user code named by `_target_`; `compose`: `conf/` composed for the command-line tools.
    `exits`: exit codes, the one line a failure prints, and where its traceback goes.

The checks live here so that checking a config never imports a data pipeline. This is the bottom layer: it
imports no other wif package, only wif.dataloader_args, the table of DataLoader's arguments.

The schema and its checks are re-exported here, the vocabulary every other package speaks.
"""

from wif.config.checks import validate, warnings_for
from wif.config.schema import (
    Augment,
    Config,
    ConfigError,
    DataConfig,
    DataFormat,
    DataSource,
    Decode,
    DecodeBackend,
    Device,
    EngineConfig,
    EngineName,
    LoaderConfig,
    MeasureConfig,
    ModelConfig,
    ModelName,
    PageCache,
    Precision,
    TrackingConfig,
    TrainerConfig,
    TrainerMode,
    TransferConfig,
    TransferKind,
    UserCodeError,
    as_plain,
    register_configs,
)

__all__ = [
    "Augment",
    "Config",
    "ConfigError",
    "DataConfig",
    "DataFormat",
    "DataSource",
    "Device",
    "EngineConfig",
    "EngineName",
    "Decode",
    "DecodeBackend",
    "LoaderConfig",
    "MeasureConfig",
    "ModelConfig",
    "ModelName",
    "PageCache",
    "Precision",
    "TrackingConfig",
    "TrainerConfig",
    "TrainerMode",
    "TransferConfig",
    "TransferKind",
    "UserCodeError",
    "as_plain",
    "register_configs",
    "validate",
    "warnings_for",
]
