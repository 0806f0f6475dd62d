"""User code named by `_target_` (a model, a dataset, an optimizer), and the keys a chosen option reads.

Nothing may be silently ignored. Each of these stops the run, in one line naming the key:
    A key the schema does not have: the typed conversion would drop `+model.nam=x`.
    A key of another option: `model.channels` with model=torchvision, `model._target_` with model=googlenet.
    A `_target_` that cannot be imported or is not callable.
Only a call tells whether a factory returns the right type: `wif.run.targets` calls it before any run exists.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Any, Callable, Dict, List, Tuple

from omegaconf import DictConfig, OmegaConf

from wif.config.schema import Config, ConfigError, DataConfig, DataSource, ModelConfig, ModelName, require

# The keys each model option reads beyond `name`; any other model key set away from its default is refused.
MODEL_KEYS: Dict[ModelName, Tuple[str, ...]] = {
    ModelName.googlenet: ("aux_logits", "aux_weight", "init_weights"),
    ModelName.tiny: ("channels",),
    ModelName.torchvision: ("arch", "weights", "kwargs"),
    ModelName.timm: ("arch", "weights", "kwargs"),
    ModelName.custom: ("_target_", "kwargs"),
}
# Data keys that only one data option reads (the others are shared by every option, or checked elsewhere).
DATA_ONLY: Dict[str, Tuple[DataSource, ...]] = {"_target_": (DataSource.custom,), "kwargs": (DataSource.custom,)}
# data=custom's Dataset makes its own images, so these keys mean nothing; num_train/num_test: a warning (warnings_for)
NOT_FOR_CUSTOM_DATA = ("root", "synthetic_seed", "noise", "augment", "jpeg_quality", "preload", "skip_bad")


def unknown_keys(cfg: DictConfig, schema: type = Config, prefix: str = "") -> List[str]:
    """Keys of a composed config the typed schema lacks (`+group.key=...`), which the conversion would drop."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out = []
    for key in cfg.keys():
        name = f"{prefix}{key}"
        if not prefix and key == "hydra":
            continue
        if key not in fields:
            out.append(name)
            continue
        sub = fields[key].default_factory if fields[key].default_factory is not dataclasses.MISSING else None
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and sub is not None and dataclasses.is_dataclass(sub):
            out += unknown_keys(node, sub, f"{name}.")
    return out


def typed(cfg: DictConfig) -> Config:
    """The composed config as the typed schema, refusing keys the schema does not have."""
    unknown = unknown_keys(cfg)
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0]))
    return OmegaConf.to_object(cfg)


def unknown_key_message(dotted: str) -> str:
    """One line for a key the schema does not have, listing the keys its group does have."""
    group = dotted.rpartition(".")[0]
    if group.endswith("kwargs"):  # a factory's own argument: new keys there are added with `+`
        return f"{dotted} is a new argument of {group}: add it with +{dotted}=VALUE."
    schema = _schema_of(group)
    known = ", ".join(f.name for f in dataclasses.fields(schema)) if schema else ""
    return (
        f"{dotted} is not a setting {f'of {group}' if group else 'at the top level'}"
        + (f" (its keys: {known})" if known else "")
        + ". Check the spelling; a factory's own arguments go "
        "under model.kwargs / data.kwargs / trainer.optimizer.kwargs, e.g. +model.kwargs.width=64."
    )


def _schema_of(group: str) -> Any:
    schema: Any = Config
    for part in filter(None, group.split(".")):
        found = {f.name: f for f in dataclasses.fields(schema)}.get(part)
        if found is None or found.default_factory is dataclasses.MISSING:
            return None
        schema = found.default_factory
        if not dataclasses.is_dataclass(schema):
            return None
    return schema


def _defaults(schema: type) -> Dict[str, Any]:
    return {
        f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
        for f in dataclasses.fields(schema)
    }


def validate_options(cfg: Config) -> None:
    """Keys set for an option that does not read them, and the keys an option cannot run without."""
    m, d = cfg.model, cfg.data
    reads = MODEL_KEYS[m.name]
    for key, default in _defaults(ModelConfig).items():
        if key not in ("name", "aux_weight") and key not in reads and getattr(m, key) != default:
            raise ConfigError(
                f"model.{key}={getattr(m, key)} is not read by model={m.name.value} (it reads: "
                f"{', '.join(reads)}). Drop it, or choose the model option that takes it"
                f"{' (model=custom model._target_=pkg.module.factory)' if key == '_target_' else ''}."
            )
    if m.name in (ModelName.torchvision, ModelName.timm):
        require(bool(m.arch), f"model={m.name.value} needs model.arch=NAME, e.g. model.arch=resnet18.")
        _known_arch(m)
    if m.name is ModelName.custom:
        require(
            bool(m._target_), "model=custom needs model._target_=pkg.module.factory: a callable returning an nn.Module."
        )
        importable("model._target_", m._target_)
    data_defaults = _defaults(DataConfig)
    for key, sources in DATA_ONLY.items():
        require(
            d.source in sources or getattr(d, key) == data_defaults[key],
            f"data.{key} is read only by data={'|'.join(s.value for s in sources)}, not data={d.source.value}. "
            f"Drop it, or use data=custom data._target_=pkg.module.factory.",
        )
    if d.source is DataSource.custom:
        require(
            bool(d._target_),
            "data=custom needs data._target_=pkg.module.factory: a callable returning a "
            "map-style Dataset of (input, label).",
        )
        importable("data._target_", d._target_)
        for key in NOT_FOR_CUSTOM_DATA:
            require(
                getattr(d, key) == data_defaults[key],
                f"data.{key}={getattr(d, key)} is not read by data=custom: your Dataset makes its own samples. "
                f"Drop data.{key}.",
            )
    importable("trainer.optimizer._target_", cfg.trainer.optimizer._target_)


def _known_arch(m: ModelConfig) -> None:
    if m.name is ModelName.timm:
        try:
            import timm
        except ImportError:
            raise ConfigError(
                'model=timm needs the optional extra timm: pip install -e ".[timm]" (or pip install timm).'
            ) from None
        require(
            bool(timm.list_models(m.arch)), f"model.arch={m.arch} is not a timm model (timm.list_models() lists them)."
        )
        require(
            m.weights in (None, "pretrained"),
            f"model.weights={m.weights}: model=timm takes model.weights=pretrained (timm's default weights) or null.",
        )
        return
    import torchvision.models as tvm

    names = tvm.list_models(module=tvm)  # the classification models only
    require(
        m.arch in names,
        f"model.arch={m.arch} is not a torchvision classification model (e.g. "
        "resnet18, resnet50, mobilenet_v3_small, efficientnet_b0, vit_b_16).",
    )
    if m.weights is not None:
        try:
            tvm.get_model_weights(m.arch)[str(m.weights)]
        except KeyError:
            raise ConfigError(
                f"model.weights={m.weights} is not a weight of {m.arch}: one of "
                f"{', '.join(w.name for w in tvm.get_model_weights(m.arch))}, or DEFAULT."
            ) from None


def factory_failure(key: str, target: object, err: BaseException) -> str:
    """The one line a user's factory that raised is refused with: the key, the error, where it was raised."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{key}={target} raised {type(err).__name__}: {' '.join(str(err).split())}{where}."


def import_beside_you(module: str) -> Any:
    """`module`, imported as installed, or else from the working folder, as `python -m` would find it there.

    A console script such as `wif-study` has its own folder on sys.path, not the user's. The working folder is
    appended only once a module is found nowhere else: an installed package of the same name still wins.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        here = os.getcwd()
        if err.name != module.split(".")[0] or here in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module)


def importable(key: str, path: str) -> Callable[..., Any]:
    """The callable `path` names (pkg.module.name), or ConfigError naming `key` and what went wrong."""
    module, _, name = str(path).rpartition(".")
    require(bool(module) and bool(name), f"{key}={path} is not a dotted path: expected pkg.module.callable.")
    try:
        found = getattr(import_beside_you(module), name)
    except ModuleNotFoundError as err:
        raise ConfigError(
            f"{key}={path}: cannot import module {err.name!r} (expected an importable "
            "pkg.module.callable; is its folder on PYTHONPATH?)."
        ) from None
    except AttributeError:
        raise ConfigError(f"{key}={path}: module {module!r} has no attribute {name!r}.") from None
    except Exception as err:  # noqa: BLE001 - the user's module failed while importing: say so in one line
        raise ConfigError(f"{key}={path}: importing {module!r} raised {type(err).__name__}: {err}") from None
    require(
        callable(found),
        f"{key}={path} is a {type(found).__name__}, not a callable: expected a class or "
        "function that builds the object.",
    )
    return found
