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


def backend_for(device: torch.device) -> str:
    """The default process group's backend for tensors on ``device``: a group made without a backend (the usual
    ``init_process_group()`` under torchrun) maps each device type to its own, gloo for the CPU, NCCL for CUDA."""
    config = dist.get_backend_config()  # "gloo", "cpu:gloo,cuda:nccl", ...
    if ":" not in config:
        return config
    backends = dict(part.split(":", 1) for part in config.split(","))
    return backends.get(device.type, "")


def refuse_untagged_backend(what: str, device: torch.device) -> None:
    """Raises ValueError when the default process group carries ``device``'s tensors with a backend that matches
    point-to-point messages by order alone.

    ``what`` (Fulcrum's executor, WaveRuntime) posts each step's receives ahead and matches every message to its
    receive by tag: NCCL ignores tags and pairs a rank's sends to a peer with the peer's receives in the order each
    side posts them, so a header would be paired with another message's tensor.
    """
    if dist.is_available() and dist.is_initialized() and backend_for(device) == "nccl":
        raise ValueError(f"{what} pairs its messages between ranks by tag, and NCCL does not support tags: run it "
                         "with the gloo backend (init_process_group('gloo'))")


__all__ = ["backend_for", "device_of", "refuse_untagged_backend"]
