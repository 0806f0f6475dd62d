"""Factories that break their promise, for the tests that check they are refused (importable as
tests.user_factories from the checkout, as a user's own module would be)."""

import torch


def a_tensor(num_classes: int = 10) -> torch.Tensor:
    """A model factory that returns a tensor instead of an nn.Module."""
    return torch.zeros(num_classes)


NOT_CALLABLE = 3
