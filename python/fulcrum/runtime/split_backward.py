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


def _independent(roots: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> list[int]:
    """The positions of the roots whose autograd graph reaches none of ``inputs``."""
    targets = {torch.autograd.graph.get_gradient_edge(t).node for t in inputs}
    cleared: set = set()  # nodes known to reach no input
    found = []
    for k, root in enumerate(roots):
        seen, stack, reaches = set(), [torch.autograd.graph.get_gradient_edge(root).node], False
        while stack and not reaches:
            node = stack.pop()
            if node is None or node in seen or node in cleared:
                continue
            reaches = node in targets
            seen.add(node)
            stack.extend(f for f, _ in node.next_functions)
        if not reaches:
            cleared |= seen
            found.append(k)
    return found


def backward_input(roots: Sequence[torch.Tensor], grads: Optional[Sequence[torch.Tensor]],
                   inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> tuple[list, Any]:
    """The gradients of ``inputs`` (None where unused), and what :func:`backward_weight` needs to finish the
    parameters' gradients later. ``grads`` are the roots' incoming gradients (None for a scalar loss)."""
    if stage_backward_input is not None:
        # PyTorch's split detaches the roots in place, which views refuse (a linear layer's output on 3-d input
        # is one): such a root is backpropagated through a copy of itself.
        roots = [r.clone() if r._is_view() else r for r in roots]
        # PyTorch's weight pass starts where the parameters' paths meet the inputs' part of the graph, so a root
        # that does not depend on the inputs (a text-only micro-batch's first LLM stage skipping the image
        # features, or an output of the stage's own tokens alone) would give no parameter its gradient. Such
        # roots are backpropagated to the parameters from their own graph nodes, held past the detach.
        alone = _independent(roots, inputs)
        edges = [torch.autograd.graph.get_gradient_edge(roots[k]) for k in alone]
        outputs = [torch.ones_like(roots[k]) if grads is None else grads[k] for k in alone]
        found, groups = stage_backward_input(list(roots), None if grads is None else list(grads), list(inputs),
                                             iter(params))
        return list(found), ("groups", groups, edges, outputs)
    found = torch.autograd.grad(list(roots), list(inputs), grads, retain_graph=True, allow_unused=True)
    return list(found), ("graph", list(roots), grads)


def backward_weight(params: Sequence[torch.Tensor], pending: Any) -> None:
    """Accumulates the parameters' gradients that :func:`backward_input` left for later."""
    if pending[0] == "groups":
        _, groups, edges, outputs = pending
        params = list(params)
        if edges:
            # Before PyTorch's pass, which frees the graph nodes these paths may share with its own.
            found = torch.autograd.grad(edges, params, outputs, retain_graph=True, allow_unused=True)
            for p, g in zip(params, found):
                if g is None:
                    continue
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad += g
        stage_backward_weight(iter(params), groups)
    else:
        torch.autograd.backward(pending[1], pending[2], inputs=list(params))


__all__ = ["backward_input", "backward_weight"]
