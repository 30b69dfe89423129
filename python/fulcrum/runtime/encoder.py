"""The encoders on their own plan, run inside the LLM pipeline's bubbles (Optimus's encoder section).

A schedule with an ``encoder`` section splits the model in two: the encoder side (the layers before the LLM's
first stage) runs as ``pipelines`` encoder pipelines of ``pp`` stages per LLM pipeline, every pipeline rank
holding one encoder stage; the LLM's stages cover the rest. Each rank's program interleaves its encoder stage's
layer passes with the LLM's passes where the bubble schedule placed them. The runtime runs a layer pass whole,
at the last of the kernel ranges the schedule cut it into (a CPU runs one thing at a time), and keeps the
activations between layers apart, so each layer's backward runs where the schedule puts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch
from torch import nn

from fulcrum.runtime.stage import run_layer, set_up_recompute


@dataclass(frozen=True)
class EncoderLayout:
    """The encoder section of a schedule with TP 1: ``stages[e]`` is encoder stage ``e``'s ``[first, end)`` of
    the layer chain, ``llm_micro_batch[j][k]`` the LLM micro-batch whose images encoder pipeline ``j``'s ``k``-th
    micro-batch carries. Pipeline ``j``'s stage ``e`` runs on LLM pipeline rank ``e · (pp_llm / pp) + j``."""

    dp: int
    pp: int
    pipelines: int
    stages: tuple
    llm_micro_batch: tuple
    llm_pp: int

    @classmethod
    def from_json(cls, section: Mapping[str, Any], llm_pp: int, where: str) -> "EncoderLayout":
        stages = []
        for e, ranges in enumerate(section["stages"]):
            first, end = int(ranges[0][0]), int(ranges[0][1])
            for a, b in ranges[1:]:
                if int(a) != end:
                    raise ValueError(f"{where}: encoder stage {e} holds layers that are not one run of the layer "
                                     f"chain ({[list(r) for r in ranges]})")
                end = int(b)
            stages.append((first, end))
        return cls(dp=int(section["dp"]), pp=int(section["pp"]), pipelines=int(section["pipelines"]),
                   stages=tuple(stages), llm_micro_batch=tuple(tuple(int(i) for i in p)
                                                               for p in section["llm_micro_batch"]),
                   llm_pp=llm_pp)

    @property
    def end_layer(self) -> int:
        return self.stages[-1][1]

    def rank_of(self, pipeline: int, stage: int) -> int:
        """The LLM pipeline rank holding ``stage`` of encoder pipeline ``pipeline``."""
        return stage * (self.llm_pp // self.pp) + pipeline

    def stage_on(self, rank: int) -> int:
        return rank // (self.llm_pp // self.pp)

    def pipeline_on(self, rank: int) -> int:
        return rank % (self.llm_pp // self.pp)

    def micro_batch_of(self, pipeline: int, llm_micro_batch: int) -> int:
        """The encoder micro-batch of ``pipeline`` that feeds LLM micro-batch ``llm_micro_batch``."""
        return self.llm_micro_batch[pipeline].index(llm_micro_batch)


class EncoderStage(nn.Module):
    """This rank's encoder stage: layers ``[first, end)`` of ``model.layers``, run one layer pass at a time.

    Activations between its layers are cut from one another's autograd graphs, so a layer's backward can run
    alone: the layer's inputs are kept as leaves beside its outputs until its backward. Boundaries are the
    pipeline's: arriving activations go through ``model.from_boundary``, departing ones through
    ``model.to_boundary`` (the last stage's feed the LLM's first stage)."""

    def __init__(self, model: nn.Module, first: int, end: int, recompute: Sequence[str], trains: bool):
        super().__init__()
        self.first, self.end, self.trains = first, end, trains
        self.layers = nn.ModuleList(model.layers[first:end])
        self._checkpointed = set_up_recompute(model, first, end, recompute)
        self._to_boundary = getattr(model, "to_boundary", None)
        self._from_boundary = getattr(model, "from_boundary", None)
        self._saved: dict = {}  # (micro-batch, layer) -> (input leaves, outputs)
        self._between: dict = {}  # micro-batch -> activations (forward) or their gradients (backward) in flight

    def forward_layer(self, layer: int, micro_batch: int, batch: Mapping[str, Any],
                      received: Optional[tuple] = None) -> Optional[tuple]:
        """Layer ``layer``'s forward on micro-batch ``micro_batch``: from ``received`` (the stage's first layer)
        or the previous layer's output. Returns the stage's output after its last layer, None before."""
        state = tuple(received or ()) if layer == self.first else self._between.pop(micro_batch)
        with torch.set_grad_enabled(self.trains):
            inputs = tuple(t.detach().requires_grad_() if t.is_floating_point() and self.trains else t
                           for t in state)
            state = inputs
            if layer == self.first and layer > 0 and self._from_boundary is not None:
                state = tuple(self._from_boundary(state, batch, layer - 1))
            i = layer - self.first
            state = run_layer(self.layers[i], self._checkpointed[i], state, batch)
            if layer == self.end - 1 and self._to_boundary is not None:
                state = tuple(self._to_boundary(state, batch, layer))
        if self.trains:
            self._saved[(micro_batch, layer)] = (inputs, state)
        out = tuple(t.detach() for t in state)
        if layer == self.end - 1:
            return out
        self._between[micro_batch] = out
        return None

    def backward_layer(self, layer: int, micro_batch: int, grads: Optional[tuple] = None) -> Optional[tuple]:
        """Layer ``layer``'s backward: from ``grads`` (of the stage's output, for its last layer) or the next
        layer's input gradients. Returns the gradients of the stage's input after its first layer."""
        inputs, outputs = self._saved.pop((micro_batch, layer))
        if layer != self.end - 1:
            grads = self._between.pop(micro_batch)
        pairs = [(o, g) for o, g in zip([o for o in outputs if o.is_floating_point()], grads) if o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        input_grads = tuple(t.grad if t.grad is not None else torch.zeros_like(t)
                            for t in inputs if t.is_floating_point())
        if layer == self.first:
            return input_grads
        self._between[micro_batch] = input_grads
        return None

    def pending(self) -> list:
        """What a step left behind (empty after a complete one)."""
        return list(self._saved) + list(self._between)
