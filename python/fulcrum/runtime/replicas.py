"""Replicas that start equal: a group's copies of the same parameters take one copy's values."""

from __future__ import annotations

from typing import Iterable

import torch
import torch.distributed as dist


def broadcast_from(tensors: Iterable[torch.Tensor], source: int, group) -> None:
    """Sets ``tensors`` on every rank of ``group`` to their values on global rank ``source``, one flat broadcast per
    dtype, as DistributedDataParallel's constructor does for its module. Call on every rank of the group, with
    the same tensors in the same order."""
    tensors = list(dict.fromkeys(tensors))
    with torch.no_grad():
        for dtype in sorted({t.dtype for t in tensors}, key=str):
            members = [t for t in tensors if t.dtype == dtype]
            flat = torch.cat([t.detach().reshape(-1) for t in members])
            dist.broadcast(flat, source, group=group)
            at = 0
            for t in members:
                t.copy_(flat[at:at + t.numel()].view_as(t))
                at += t.numel()


def destroy_groups(groups: Iterable) -> None:
    """Destroys the process groups a runtime made with new_group (``None`` and groups this rank is not in are
    skipped). Call on every rank, in the order they were made."""
    for g in groups:
        if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)
