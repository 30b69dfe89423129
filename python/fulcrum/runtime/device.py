"""Where a rank's tensors live: the device of the model it runs, so that every tensor the runtime makes (message
headers and buffers, counts and losses it all-reduces) sits beside the model's, as NCCL needs on GPUs."""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def device_of(modules: Iterable[nn.Module]) -> torch.device:
    """The device of the first parameter or buffer of ``modules``; the CPU when they hold none."""
    for module in modules:
        for t in (*module.parameters(), *module.buffers()):
            return t.device
    return torch.device("cpu")


__all__ = ["device_of"]
