"""What a run is: the typed schema of every config group, the checks a type cannot express, composing
`conf/` for the command-line tools, and the exit codes. The bottom layer: imports no other wif package.

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

__all__ = ["Augment", "Config", "ConfigError", "DataConfig", "DataFormat", "DataSource", "Device", "EngineConfig",
           "EngineName", "Decode", "DecodeBackend",
           "LoaderConfig", "MeasureConfig", "ModelConfig", "ModelName", "OptimizerConfig", "PageCache",
           "Precision", "RaceConfig", "StartMethod", "SweepConfig",
           "TrackingConfig", "TrainerConfig", "TrainerMode", "TransferConfig", "TransferKind", "UserCodeError", "as_plain",
           "register_configs", "require", "validate", "warnings_for"]
