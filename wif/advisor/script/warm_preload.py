"""What every PyTorch script under `wif.watch` imports before its first epoch: the warm server's one preload.

A framework's imports are the server's further preloads (wif.advisor.script.warm.warm_up). Nothing here starts
a thread or touches CUDA, so a fork is as clean as a new interpreter.
"""

import atexit
import multiprocessing

REGISTERED = []  # the exit handlers these imports register: the child registers them again, wif.advisor.script.warm
_register = atexit.register


def _recorded(func, *args, **kwargs):
    """atexit.register, kept: MLflow's handler ends a script's own run left open, and is the script's too."""
    REGISTERED.append((func, args, kwargs))
    return _register(func, *args, **kwargs)


atexit.register = _recorded
try:
    import torch  # noqa: F401 - with its CUDA libraries, about 2 s here
    import torch._dynamo  # noqa: F401 - the first optimizer imports it (about 2 s)
    import torch.utils.data  # noqa: F401
    from mlflow.store.tracking import sqlalchemy_store  # noqa: F401 - the watch's store (about 1 s)

    import wif.watcher.watch  # noqa: F401
finally:
    atexit.register = _register

MAIN = multiprocessing.current_process()  # the server's: what a forked script restores, as `python` has it
