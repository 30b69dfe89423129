"""A backward pass split into its input-gradient and weight-gradient halves, as zero-bubble schedules run it.

The executor runs ``BI`` and ``W`` instructions through these two calls, and the profiler times the same calls,
so the profile prices the split as this runtime pays for it: PyTorch's split walks the autograd graph twice,
and on small layers the halves together take longer than one whole backward.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

try:
    # PyTorch's own split (its zero-bubble schedules use it): the input-gradient pass keeps the gradients at the
    # nodes where weights join, so the weight pass starts there instead of at the outputs.
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
except ImportError:  # an older PyTorch: the weight pass runs the backward again from the outputs
    stage_backward_input = stage_backward_weight = None


def backward_input(roots: Sequence[torch.Tensor], grads: Optional[Sequence[torch.Tensor]],
                   inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> tuple[list, Any]:
    """The gradients of ``inputs`` (None where unused), and what :func:`backward_weight` needs to finish the
    parameters' gradients later. ``grads`` are the roots' incoming gradients (None for a scalar loss)."""
    if stage_backward_input is not None:
        found, groups = stage_backward_input(list(roots), None if grads is None else list(grads), list(inputs),
                                             iter(params))
        return list(found), ("groups", groups)
    found = torch.autograd.grad(list(roots), list(inputs), grads, retain_graph=True, allow_unused=True)
    return list(found), ("graph", list(roots), grads)


def backward_weight(params: Sequence[torch.Tensor], pending: Any) -> None:
    """Accumulates the parameters' gradients that :func:`backward_input` left for later."""
    if pending[0] == "groups":
        stage_backward_weight(iter(params), pending[1])
    else:
        torch.autograd.backward(pending[1], pending[2], inputs=list(params))


__all__ = ["backward_input", "backward_weight"]
