"""Imported once by the forkserver that `wif.advisor.warm` forks the user's script from: what every PyTorch
training script under `wif.watch` imports before its first epoch. Nothing here starts a thread or touches
CUDA, so a fork is as clean as a new interpreter."""

import multiprocessing

import torch  # noqa: F401 - with its CUDA libraries, about 2 s here
import torch._dynamo  # noqa: F401 - the first optimizer imports it (about 2 s)
import torch.utils.data  # noqa: F401
from mlflow.store.tracking import sqlalchemy_store  # noqa: F401 - the watch's store (about 1 s)

import wif.watcher.watch  # noqa: F401

MAIN = multiprocessing.current_process()  # the server's: what a forked script restores, as `python` has it
