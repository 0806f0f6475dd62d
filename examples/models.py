"""A model factory as `model=custom model._target_=examples.models.small_cnn` calls it.

The factory takes `num_classes`, so wif passes it, from the data. Any other argument comes from
`+model.kwargs.NAME=VALUE`, e.g. `+model.kwargs.width=32`.
"""

from __future__ import annotations

from torch import nn


def small_cnn(num_classes: int, width: int = 16) -> nn.Module:
    """Two strided convolutions, global pooling and a linear head: a stand-in for your own network."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=2, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )
