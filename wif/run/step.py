"""The training step as configured: the optimizer (`trainer.optimizer._target_`), precision, memory format, compile.

The loop in `wif.run.loop` times the step; nothing here synchronizes the device.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass, field
from typing import Any, ContextManager, Dict, Iterable, Optional

import torch
from torch import nn

from wif.config import Config, ConfigError, Precision, TrainerConfig
from wif.config.targets import importable
from wif.measure.timing import synchronize
from wif.run.model import training_loss

DTYPES = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}
FP32 = contextlib.nullcontext()  # reusable: fp32's autocast, not made again each step


def build_optimizer(
    tr: TrainerConfig, params: Iterable[nn.Parameter], device: Optional[torch.device] = None
) -> torch.optim.Optimizer:
    """Build trainer.optimizer._target_, by default SGD with trainer.lr, momentum and weight_decay where it takes them.

    trainer.optimizer.kwargs adds or overrides arguments. Under fp16 on CUDA, an optimizer that takes `fused` gets
    fused=True, unless the kwargs choose fused, foreach or differentiable. An unfused step reads found_inf with
    `.item()`, a sync every step.
    """
    target = tr.optimizer._target_
    cls = importable("trainer.optimizer._target_", target)
    try:
        accepted = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        accepted = {}
    study: Dict[str, Any] = {"lr": tr.lr, "momentum": tr.momentum, "weight_decay": tr.weight_decay}
    kwargs = {k: v for k, v in study.items() if k in accepted}
    kwargs.update(tr.optimizer.kwargs)
    if (
        tr.precision is Precision.fp16
        and device is not None
        and device.type == "cuda"
        and "fused" in accepted
        and not {"fused", "foreach", "differentiable"} & kwargs.keys()
    ):
        kwargs["fused"] = True
    optimizer = cls(params, **kwargs)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"trainer.optimizer._target_={target} built a {type(optimizer).__name__}, not a torch.optim.Optimizer."
        )
    return optimizer


def step_label(tr: TrainerConfig) -> str:
    """The step as the report names a testbed: precision, then what is set away from the study's step."""
    parts = [tr.precision.value] + [
        name for name, on in (("channels_last", tr.channels_last), ("compile", tr.compile)) if on
    ]
    if tr.optimizer._target_ != "torch.optim.SGD" or tr.optimizer.kwargs:
        parts.append(
            tr.optimizer._target_.rsplit(".", 1)[-1]
            + "".join(f" {k}={v}" for k, v in sorted(tr.optimizer.kwargs.items()))
        )
    return "+".join(parts)


@dataclass(eq=False)
class Step:
    """Forward, loss, backward and optimizer step on one batch on the device; the loss stays there, unread."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: nn.Module
    aux_weight: float
    device: torch.device
    precision: Precision = Precision.fp32
    channels_last: bool = False
    dtype: Optional[torch.dtype] = field(init=False)  # autocast's; None under fp32
    scaler: Optional[torch.amp.GradScaler] = field(init=False)  # fp16's

    def __post_init__(self) -> None:
        self.dtype = DTYPES.get(self.precision)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision is Precision.fp16 else None

    def syncs_every_step(self) -> bool:
        """Whether fp16's GradScaler.step reads found_inf with `.item()`: where the optimizer does not do it fused."""
        return self.scaler is not None and not getattr(self.optimizer, "_step_supports_amp_scaling", False)

    def autocast(self) -> ContextManager[Any]:
        """The precision's autocast; nothing under fp32."""
        if self.dtype is None:
            return FP32
        return torch.autocast(self.device.type, dtype=self.dtype)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of images in the step's memory format."""
        if self.channels_last and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            loss = training_loss(self.model(self.inputs(x)), y, loss_fn=self.loss_fn, aux_weight=self.aux_weight)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return loss.detach()


def prepare_model(model: nn.Module, tr: TrainerConfig) -> nn.Module:
    """channels_last and torch.compile, applied to a model already on its device."""
    if tr.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if tr.compile:
        model = torch.compile(model)
    return model


def compile_now(step: Step, batch: Optional[tuple], device: torch.device) -> float:
    """Compile the model now, not in a timed epoch; returns the seconds it took.

    It runs training and evaluation passes on a batch and on half of it, then restores weights, buffers and gradients.
    """
    if batch is None:
        return 0.0
    model = step.model
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = batch
    # A smaller second batch marks the batch size dynamic: an epoch's partial last batch does not recompile.
    shapes = [(x, y)] + ([(x[: len(x) // 2], y[: len(y) // 2])] if len(x) > 1 else [])
    synchronize(device)
    t0 = time.perf_counter()
    for xs, ys in shapes:
        model.train()
        with step.autocast():
            loss = training_loss(model(step.inputs(xs)), ys, loss_fn=step.loss_fn, aux_weight=step.aux_weight)
        loss.backward()
        model.eval()
        with torch.inference_mode(), step.autocast():
            model(step.inputs(xs))
    synchronize(device)
    seconds = time.perf_counter() - t0
    model.load_state_dict(saved)
    step.optimizer.zero_grad(set_to_none=True)
    return seconds


def step_for(model: nn.Module, optimizer: torch.optim.Optimizer, cfg: Config, device: torch.device) -> Step:
    """The run's step for `model`: the study's loss, and the precision and memory format `cfg` sets."""
    return Step(
        model=model,
        optimizer=optimizer,
        loss_fn=nn.CrossEntropyLoss(),
        aux_weight=cfg.model.aux_weight,
        device=device,
        precision=cfg.trainer.precision,
        channels_last=cfg.trainer.channels_last,
    )
