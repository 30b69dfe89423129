"""One pipeline stage: a consecutive range of the model's layer chain, recomputing what the plan says."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def set_up_recompute(model: nn.Module, first: int, end: int, recompute: Sequence[str]) -> list[bool]:
    """Sets selective recomputation on the model's layers ``[first, end)`` (``model.set_recompute``) and returns,
    per layer, whether it is checkpointed whole: full recomputation, or selective without ``set_recompute``."""
    set_recompute = getattr(model, "set_recompute", None)
    whole = []
    for i in range(first, end):
        mode = recompute[i]
        whole.append(mode == "full" or (mode == "selective" and set_recompute is None))
        if set_recompute is not None:
            set_recompute(i, "selective" if mode == "selective" else "none")
    return whole


def run_layer(layer: nn.Module, checkpointed: bool, state: tuple, batch: Mapping[str, Any]) -> tuple:
    """``layer(state, batch)`` as a tuple, under ``torch.utils.checkpoint`` when ``checkpointed``."""
    if checkpointed and torch.is_grad_enabled():
        return tuple(checkpoint(layer, state, batch, use_reentrant=False))
    return tuple(layer(state, batch))


class StageModule(nn.Module):
    """Layers ``[first, end)`` of ``model.layers``, where each layer is ``layer(state, batch) -> state``.

    ``state`` is the tuple of activations between layers (empty before the first layer) and ``batch`` the
    micro-batch's tensors. A layer the plan recomputes fully runs under ``torch.utils.checkpoint``; for selective
    recomputation the model's ``set_recompute(layer, "selective")`` is called when it has one (the layer then
    reruns only its attention core), and the layer is checkpointed whole otherwise.

    Between stages, activations go through the model's ``to_boundary(state, batch, after_layer)`` before they are
    sent and ``from_boundary(state, batch, after_layer)`` after they arrive, when the model defines them: pipeline
    schedules need the same shapes for every micro-batch, so a model pads to fixed caps there and trims back.
    """

    def __init__(self, model: nn.Module, first: int, end: int, recompute: Sequence[str], pad_output: bool):
        super().__init__()
        layers = model.layers
        if not 0 <= first < end <= len(layers):
            raise ValueError(f"stage [{first}, {end}) is outside the model's {len(layers)} layers")
        self.first, self.end = first, end
        self.layers = nn.ModuleList(layers[first:end])
        self._pad_output = pad_output
        self._to_boundary = getattr(model, "to_boundary", None)
        self._from_boundary = getattr(model, "from_boundary", None)
        self._checkpointed = set_up_recompute(model, first, end, recompute)

    def run(self, state: tuple, batch: Mapping[str, Any]) -> tuple:
        """The stage's layers on ``state`` (already trimmed), without boundary padding."""
        for layer, whole in zip(self.layers, self._checkpointed):
            state = run_layer(layer, whole, state, batch)
        return state

    def forward(self, *received: torch.Tensor, **batch: Any):
        state = tuple(received)
        if self.first > 0 and self._from_boundary is not None:
            state = tuple(self._from_boundary(state, batch, self.first - 1))
        state = self.run(state, batch)
        if self._pad_output and self._to_boundary is not None:
            state = tuple(self._to_boundary(state, batch, self.end - 1))
        return state[0] if len(state) == 1 else state
