"""The host's time per operator: how fast eager PyTorch issues a layer's kernels, the cluster file's
``kernel_launch_seconds``.

A layer pass cannot run faster than the host dispatches its operators, whatever the device's speed: on a few
sequences per device a transformer block's kernels are shorter than that, and the pass waits for the host (the
α of Spindle's scalability model). Timed here on a block so small that its kernels take no time: what is left
is the host's own work, divided by the operators the block dispatches.
"""

from __future__ import annotations

import collections
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


class PreNormBlock(nn.Module):
    """A pre-norm transformer block with a GELU MLP and biases, as ViT and CLIP towers run it."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class OperatorCount(TorchDispatchMode):
    """Counts the operators that reach a backend and are not views of their input: one device kernel each."""

    def __init__(self):
        super().__init__()
        self.operators: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        returns = func._schema.returns
        view = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
        if not view:
            self.operators[str(func)] += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class LaunchMeasurement:
    forward_operators: int   # the block's forward
    backward_operators: int  # its backward, the loss's gradient seed included
    step_seconds: float      # median over the repeats of one forward and backward
    spread: float            # (slowest − fastest) / median of the repeats

    @property
    def seconds_per_operator(self) -> float:
        return self.step_seconds / (self.forward_operators + self.backward_operators)


def measure_launch_seconds(device: str = "cpu", *, steps: int = 1000, repeats: int = 7,
                           warmup: int = 100) -> LaunchMeasurement:
    """Times ``steps`` forward and backward passes of a block of width 8 on 4 tokens on ``device``, ``repeats``
    times, and counts the operators one pass dispatches. Its ``seconds_per_operator`` is the cluster file's
    ``kernel_launch_seconds`` (on a GPU, measured on the GPU, so that the launch itself is in it)."""
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"steps ({steps}) and repeats ({repeats}) must be at least 1 and warmup ({warmup}) at "
                         "least 0")
    block = PreNormBlock(8, 2).to(device)
    x = torch.randn(1, 4, 8, device=device, requires_grad=True)

    def step():
        block.zero_grad(set_to_none=True)
        x.grad = None
        block(x).sum().backward()

    def sync():
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        step()
    block.zero_grad(set_to_none=True)
    x.grad = None
    with OperatorCount() as forward:
        out = block(x).sum()
    with OperatorCount() as backward:
        out.backward()
    runs = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        runs.append((time.perf_counter() - start) / steps)
    median = statistics.median(runs)
    return LaunchMeasurement(sum(forward.operators.values()), sum(backward.operators.values()), median,
                             (max(runs) - min(runs)) / median)
