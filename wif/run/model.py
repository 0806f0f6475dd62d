"""The models: torchvision's GoogLeNet v1 as the study trains it, and a tiny CNN for CPU runs."""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from wif.config import ModelConfig, ModelName


class TinyNet(nn.Module):
    """Strided 3x3 convolutions, global pooling, one linear layer: seconds per epoch on a laptop CPU."""

    def __init__(self, channels: List[int], num_classes: int) -> None:
        super().__init__()
        layers: List[nn.Module] = []
        c_in = 3
        for c_out in channels:
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c_out),
                       nn.ReLU(inplace=True)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def build_model(cfg: ModelConfig, num_classes: int) -> nn.Module:
    if cfg.name is ModelName.tiny:
        return TinyNet(list(cfg.channels), num_classes)
    from torchvision.models import googlenet

    return googlenet(weights=None, num_classes=num_classes, aux_logits=cfg.aux_logits,
                     init_weights=cfg.init_weights, transform_input=False)


def training_loss(model_out: object, target: torch.Tensor, loss_fn: nn.Module, aux_weight: float) -> torch.Tensor:
    """GoogLeNet in training mode returns (logits, aux2, aux1): the original recipe weights the aux losses."""
    if isinstance(model_out, torch.Tensor):
        return loss_fn(model_out, target)
    logits, aux2, aux1 = model_out
    loss = loss_fn(logits, target)
    if aux1 is not None and aux2 is not None:
        loss = loss + aux_weight * (loss_fn(aux1, target) + loss_fn(aux2, target))
    return loss
