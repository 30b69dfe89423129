"""balanced_loader: DataLoader batches arrive with their StepInfo, in the main process and from workers."""

import pickle

import pytest
import torch
from conftest import random_lengths

import fulcrum
from fulcrum import MicroBatch, StepInfo


class IdDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i])


def test_micro_batches_pickle_with_their_info():
    mb = MicroBatch([3, 1], StepInfo(0, 5, 1, 2, 4, 900, 300))
    back = pickle.loads(pickle.dumps(mb))
    assert back == [3, 1] and back.info == mb.info


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_yields_collated_batches_with_info(workers):
    tokens, tiles = random_lengths(120, 1)
    sampler = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=1, world_size=2, micro_batches=2)
    expected = [(list(b), b.info) for b in sampler]
    loader = fulcrum.balanced_loader(IdDataset(120), sampler, num_workers=workers,
                                     multiprocessing_context="fork" if workers else None)
    got = [(batch.flatten().tolist(), info) for batch, info in loader]
    assert got == expected
    assert len(loader) == len(expected)


def test_loader_uses_the_dataset_getitems_when_it_has_one():
    calls = []

    class Batched(IdDataset):
        def __getitems__(self, ids):
            calls.append(list(ids))
            return [torch.tensor([i]) for i in ids]

    tokens, tiles = random_lengths(40, 2)
    sampler = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles)
    batches = list(fulcrum.balanced_loader(Batched(40), sampler))
    assert [b.flatten().tolist() for b, _ in batches] == calls
