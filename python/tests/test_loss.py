"""The step's global token count and the loss normalisation built on it."""

import numpy as np
import pytest
import torch
from conftest import random_lengths
from hypothesis import given, settings
from hypothesis import strategies as st

import fulcrum

torch.set_num_threads(1)


def token_features(sample_id: int, count: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(sample_id)
    return torch.randn(count, 4, generator=g, dtype=torch.float64)


def summed_loss(model, ids, loss_tokens):
    x = torch.cat([token_features(i, int(loss_tokens[i])) for i in ids])
    return (model(x) ** 2).sum()


@settings(max_examples=25, deadline=None)
@given(world_size=st.integers(1, 4), micro_batches=st.integers(1, 3), seed=st.integers(0, 1000))
def test_normalized_micro_batch_losses_give_the_step_token_mean_gradient(world_size, micro_batches, seed):
    n = 60
    tokens, tiles = random_lengths(n, seed)
    loss_tokens = np.random.default_rng(seed).integers(1, 12, size=n)
    samplers = [fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, loss_tokens=loss_tokens, rank=r,
                                             world_size=world_size, micro_batches=micro_batches, seed=seed)
                for r in range(world_size)]
    firsts = [[b for b in s if b.info.step == 0] for s in samplers]  # step 0 on every rank
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, dtype=torch.float64)

    # What DDP computes: each rank accumulates its micro-batches' gradients, then ranks are averaged.
    rank_grads = []
    for batches in firsts:
        model.zero_grad()
        for batch in batches:
            fulcrum.normalize_loss(summed_loss(model, batch, loss_tokens), batch.info).backward()
        rank_grads.append(model.weight.grad.clone())
    ddp_grad = torch.stack(rank_grads).mean(0)

    # The target: the mean over every loss token of the step.
    everything = [i for batches in firsts for b in batches for i in b]
    model.zero_grad()
    (summed_loss(model, everything, loss_tokens) / int(loss_tokens[everything].sum())).backward()
    assert torch.allclose(ddp_grad, model.weight.grad, rtol=1e-10, atol=1e-12)


def test_step_tokens_counts_every_rank_and_micro_batch():
    tokens, tiles = random_lengths(400, 9)
    samplers = [fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=r, world_size=3, micro_batches=2)
                for r in range(3)]
    per_step = {}
    for s in samplers:
        for b in s:
            assert b.info.tokens == int(tokens[list(b)].sum())
            per_step.setdefault(b.info.step, []).append(b)
    for step, batches in per_step.items():
        assert len(batches) == 6
        total = sum(int(tokens[list(b)].sum()) for b in batches)
        assert {b.info.step_tokens for b in batches} == {total}
        assert samplers[0].step_tokens(step) == total
        assert batches[0].info.loss_scale == pytest.approx(3 / total)


def test_loss_tokens_must_match_the_samples():
    tokens, tiles = random_lengths(10, 0)
    with pytest.raises(ValueError, match="loss_tokens"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, loss_tokens=np.ones(9))
    with pytest.raises(ValueError, match="loss_tokens"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, loss_tokens=-np.ones(10))
