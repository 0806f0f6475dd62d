"""Whether the user's factories build what they promise, found before any run is created.

Whether a model factory returns an `nn.Module`, or a dataset factory a map-style Dataset of (input, label), is
told by calling it. The call runs in a forked process: the supervisor never runs torch compute, and a factory
that crashes takes nothing down with it.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any, Callable, Dict, List, Optional, Tuple

from wif.config import Config, ConfigError, DataSource, ModelName
from wif.config.targets import factory_failure
from wif.data.custom import custom_sets
from wif.run.model import build_model

_SEEN: Dict[Tuple[str, str], Optional[str]] = {}
PROBE_TIMEOUT_S = 600.0


def _model_probe(conf: Config) -> None:
    build_model(conf.model, conf.data.num_classes)


def _data_probe(conf: Config) -> None:
    custom_sets(conf.data)


def _optimizer_probe(conf: Config) -> None:
    from torch import nn

    from wif.run.step import build_optimizer

    build_optimizer(conf.trainer, nn.Linear(2, 2).parameters())


def _probes(conf: Config, data: bool) -> List[Tuple[str, Any, Callable[[Config], None]]]:
    """(the factory's key, its node of `_target_` and kwargs, the call that checks it), for each factory to check."""
    out = []
    if conf.model.name is ModelName.custom:
        out.append(("model", conf.model, _model_probe))
    if data and conf.data.source is DataSource.custom:
        out.append(("data", conf.data, _data_probe))
    opt = conf.trainer.optimizer
    if opt._target_ != "torch.optim.SGD" or opt.kwargs:
        out.append(("trainer.optimizer", opt, _optimizer_probe))
    return out


def _run(probe: Callable[[Config], None], conf: Config, conn: object, key: str, target: str) -> None:
    try:
        probe(conf)
        conn.send(None)  # type: ignore[attr-defined]
    except ConfigError as err:
        conn.send(str(err))  # type: ignore[attr-defined]
    except BaseException as err:  # noqa: BLE001 - the user's factory raised: one line, its traceback in the log
        conn.send(factory_failure(f"{key}._target_", target, err))  # type: ignore[attr-defined]


def check_user_code(conf: Config, data: bool = True) -> None:
    """ConfigError naming the key where a custom model or dataset factory fails or returns the wrong type.

    Each factory is called once per process and arguments. With `data=False` the run's own process checks the
    dataset factory, so a slow one is called once per run.
    """
    for name, node, probe in _probes(conf, data):
        key = (name, f"{node._target_} {sorted(node.kwargs.items())}")
        if key not in _SEEN:
            ctx = mp.get_context("fork")
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_run, args=(probe, conf, child, name, node._target_), daemon=True)
            proc.start()
            child.close()
            verdict: Optional[str]
            try:
                verdict = (
                    parent.recv()
                    if parent.poll(PROBE_TIMEOUT_S)
                    else (f"{key[0]}._target_={key[1]} did not return within {PROBE_TIMEOUT_S:.0f} s.")
                )
            except EOFError:
                proc.join(5)
                verdict = f"{key[0]}._target_={key[1]}: the process calling it died (exit code {proc.exitcode})."
            proc.join(5)
            if proc.is_alive():
                proc.kill()
            _SEEN[key] = verdict
        if _SEEN[key]:
            raise ConfigError(_SEEN[key])
