"""Fulcrum: balanced data, stages and schedules for training multimodal LLMs at scale.

The C++ core (``fulcrum._core``) reads length files and plans balanced micro-batches; this package puts it in a
PyTorch training script::

    sampler = fulcrum.BalancedBatchSampler("meta.json", batch_size=4, micro_batches=2)  # or a length file
    loader = fulcrum.balanced_loader(dataset, sampler, collate_fn=pack)
    for batch, info in loader:
        loss = fulcrum.normalize_loss(model(batch).sum(), info)

PyTorch is optional: the sampler and the planner work without it.
"""

from fulcrum._core import BatchPlan, Dataset, InputError, batcher_names, measure, plan
from fulcrum.loss import normalize_loss
from fulcrum.sampler import BalancedBatchSampler, MicroBatch, StepInfo

__all__ = [
    "BalancedBatchSampler", "BatchPlan", "Dataset", "InputError", "MicroBatch", "StepInfo",
    "batcher_names", "measure", "normalize_loss", "plan",
]


_SUBMODULES = ("megatron", "profile", "runtime")


def __getattr__(name):
    # The DataLoader helper and the submodules that import torch load only when asked for, so that
    # ``fulcrum.megatron.recompute_num_layers(...)`` works after a plain ``import fulcrum`` without it costing
    # every import torch's start-up (they stay out of __all__).
    if name == "balanced_loader":
        from fulcrum.loader import balanced_loader

        return balanced_loader
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"fulcrum.{name}")
    raise AttributeError(f"module 'fulcrum' has no attribute {name!r}")
