"""A DataLoader that hands each collated micro-batch over with its StepInfo."""

from __future__ import annotations

from typing import Any, Callable, Optional

from torch.utils.data import DataLoader, default_collate

from fulcrum.sampler import BalancedBatchSampler, MicroBatch


class _InfoList(list):
    """Fetched samples of one micro-batch, carrying its StepInfo to the collate function."""

    __slots__ = ("info",)


class _WithStepInfo:
    """Wraps a map-style dataset so that fetching a MicroBatch keeps its StepInfo (in worker processes too)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, micro_batch: MicroBatch) -> _InfoList:
        getitems = getattr(self.dataset, "__getitems__", None)
        items = _InfoList(getitems(list(micro_batch)) if getitems else [self.dataset[i] for i in micro_batch])
        items.info = micro_batch.info
        return items


class _CollateWithInfo:
    def __init__(self, collate_fn: Callable[[list], Any]):
        self.collate_fn = collate_fn

    def __call__(self, items: _InfoList):
        return self.collate_fn(list(items)), items.info


def balanced_loader(dataset: Any, batch_sampler: BalancedBatchSampler,
                    collate_fn: Optional[Callable[[list], Any]] = None, **kwargs: Any) -> DataLoader:
    """``DataLoader(dataset, batch_sampler=batch_sampler, ...)`` that yields ``(batch, info)``: the collated
    micro-batch and its :class:`fulcrum.StepInfo` (step, micro-batch index, the step's global token count).
    Other keyword arguments (``num_workers``, ``pin_memory``, ...) go to the DataLoader."""
    return DataLoader(_WithStepInfo(dataset), batch_sampler=batch_sampler,
                      collate_fn=_CollateWithInfo(collate_fn or default_collate), **kwargs)
