"""What a run is: the typed schema of every config group (schema) and its vocabulary, the errors and the choices
each key takes (choices); the checks a type cannot express (checks), with those of the loader (loader_checks),
the trainer (trainer_checks), the storage formats (formats), of decoding on the device (decode) and of the
loader engines (engine_checks), kept here so that checking a config never imports a data pipeline; user code
named by `_target_` (targets); composing `conf/` for the command-line tools (compose); and how a job's end
reaches the user: exit codes, one line, the traceback where it is looked for (exits). The bottom layer: imports
no other wif package, only wif.dataloader_args, the table of DataLoader's arguments.

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
    OptimizerConfig,
    PageCache,
    Precision,
    RaceConfig,
    StartMethod,
    SweepConfig,
    TrackingConfig,
    TrainerConfig,
    TrainerMode,
    TransferConfig,
    TransferKind,
    UserCodeError,
    as_plain,
    register_configs,
    require,
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
    "OptimizerConfig",
    "PageCache",
    "Precision",
    "RaceConfig",
    "StartMethod",
    "SweepConfig",
    "TrackingConfig",
    "TrainerConfig",
    "TrainerMode",
    "TransferConfig",
    "TransferKind",
    "UserCodeError",
    "as_plain",
    "register_configs",
    "require",
    "validate",
    "warnings_for",
]
