"""Whether this machine has CUDA (tests/test_first_gpu.py, tests/test_first_gpu_setup.py), and `gpu_only`, a test's
`gpu` mark and its skip without CUDA (tests/test_tools.py, tests/test_bottlenecks.py). torch and pytest only."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

CUDA = torch.cuda.is_available()


def gpu_only(test: Callable) -> Callable:
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(test))
