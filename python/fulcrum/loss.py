"""Token-mean loss over a whole data-parallel step."""

from __future__ import annotations

from typing import Any

from fulcrum.sampler import StepInfo


def normalize_loss(loss_sum: Any, info: StepInfo) -> Any:
    """Scales a micro-batch's *summed* per-token loss so that training minimises the mean over every token of
    the optimizer step, on every rank and in every micro-batch.

    With balanced batching, ranks and micro-batches hold different numbers of tokens, so averaging inside each
    micro-batch (and then across ranks, as DDP does) weights tokens unequally. Summing, then dividing by the
    step's global token count ``info.step_tokens`` is exact; the factor ``world_size`` undoes DDP's gradient
    average. Accumulate gradients over the step's micro-batches as usual (no further division).
    """
    return loss_sum * info.loss_scale
