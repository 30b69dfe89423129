"""Where a rank's tensors live: the device of the model it runs, so that every tensor the runtime makes (message
headers and buffers, counts and losses it all-reduces) sits beside the model's, as NCCL needs on GPUs."""

from __future__ import annotations

from typing import Iterable

import torch
import torch.distributed as dist
from torch import nn


def device_of(modules: Iterable[nn.Module]) -> torch.device:
    """The device of the first parameter or buffer of ``modules``; the CPU when they hold none."""
    for module in modules:
        for t in (*module.parameters(), *module.buffers()):
            return t.device
    return torch.device("cpu")


def refuse_untagged_backend(what: str) -> None:
    """Raises ValueError when the default process group's backend matches point-to-point messages by order alone.

    ``what`` (Fulcrum's executor, WaveRuntime) posts each step's receives ahead and matches every message to its
    receive by tag: NCCL ignores tags and pairs a rank's sends to a peer with the peer's receives in the order each
    side posts them, so a header would be paired with another message's tensor.
    """
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        raise ValueError(f"{what} pairs its messages between ranks by tag, and NCCL does not support tags: run it "
                         "with the gloo backend (init_process_group('gloo'))")


__all__ = ["device_of", "refuse_untagged_backend"]
