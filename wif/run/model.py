"""The models: GoogLeNet v1 as the study trains it, a tiny CNN for CPU runs, and the user's own.

The user's own is any torchvision or timm model by name, or any factory named by `model._target_`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List

import torch
from torch import nn

from wif.config import ConfigError, ModelConfig, ModelName
from wif.config.targets import importable


class TinyNet(nn.Module):
    """Strided 3x3 convolutions, global pooling, one linear layer: seconds per epoch on a laptop CPU."""

    def __init__(self, channels: List[int], num_classes: int) -> None:
        super().__init__()
        layers: List[nn.Module] = []
        c_in = 3
        for c_out in channels:
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            ]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of images."""
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def build_model(cfg: ModelConfig, num_classes: int) -> nn.Module:
    """The configured model with `num_classes` outputs (passed to a factory when it takes it)."""
    if cfg.name is ModelName.tiny:
        return TinyNet(list(cfg.channels), num_classes)
    if cfg.name is ModelName.torchvision:
        from torchvision.models import get_model

        # Named weights come with their own classifier (torchvision refuses another num_classes with them).
        extra = {"num_classes": num_classes} if cfg.weights is None else {}
        return get_model(str(cfg.arch), weights=cfg.weights, **{**extra, **cfg.kwargs})
    if cfg.name is ModelName.timm:
        import timm

        return timm.create_model(
            str(cfg.arch), pretrained=cfg.weights == "pretrained", **{"num_classes": num_classes, **cfg.kwargs}
        )
    if cfg.name is ModelName.custom:
        factory = importable("model._target_", str(cfg._target_))
        model = factory(**_with_classes(factory, num_classes, cfg.kwargs))
        if not isinstance(model, nn.Module):
            raise ConfigError(
                f"model._target_={cfg._target_} returned a {type(model).__name__}, not a "
                "torch.nn.Module: the factory must build and return the model."
            )
        return model
    from torchvision.models import googlenet

    return googlenet(
        weights=None,
        num_classes=num_classes,
        aux_logits=cfg.aux_logits,
        init_weights=cfg.init_weights,
        transform_input=False,
    )


def _with_classes(factory: Callable[..., Any], num_classes: int, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The user's keyword arguments, plus num_classes from the data where the factory takes it and none is given."""
    out = dict(kwargs)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes = "num_classes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    if takes and "num_classes" not in out:
        out["num_classes"] = num_classes
    return out


def model_label(cfg: ModelConfig) -> str:
    """The model as the report names a testbed: the option, or the arch or factory it builds."""
    args = "".join(f" {k}={v}" for k, v in sorted(cfg.kwargs.items()))
    if cfg.name in (ModelName.torchvision, ModelName.timm):
        return f"{cfg.name.value}:{cfg.arch}" + (f"({cfg.weights})" if cfg.weights else "") + args
    if cfg.name is ModelName.custom:
        return f"custom:{cfg._target_}{args}"
    return cfg.name.value


def training_loss(model_out: object, target: torch.Tensor, loss_fn: nn.Module, aux_weight: float) -> torch.Tensor:
    """The training loss of a model's output; GoogLeNet's aux losses weighted as its original recipe does.

    Args:
        model_out: logits, or GoogLeNet's (logits, aux2, aux1) in training mode.
        target: the labels.
        loss_fn: the loss.
        aux_weight: the aux losses' weight.
    """
    if isinstance(model_out, torch.Tensor):
        return loss_fn(model_out, target)
    logits, aux2, aux1 = model_out
    loss = loss_fn(logits, target)
    if aux1 is not None and aux2 is not None:
        loss = loss + aux_weight * (loss_fn(aux1, target) + loss_fn(aux2, target))
    return loss
