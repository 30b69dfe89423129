"""The split backward of zero-bubble schedules gives every parameter the gradient one whole backward gives."""

import pytest
import torch

from fulcrum.runtime.split_backward import backward_input, backward_weight


class Stage(torch.nn.Module):
    """A stage that takes a received activation ``x`` and its own token ids; ``use_x`` says whether its output
    depends on ``x`` (a text-only micro-batch's first LLM stage skips the image features)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 8)
        self.mix = torch.nn.Linear(8, 8)
        self.aux = torch.nn.Linear(8, 3)

    def forward(self, x, ids, use_x, shared):
        e = self.embed(ids)
        h = e + x if use_x else e
        # The second output never depends on x; with `shared` it reads the same embedding node as the first.
        return self.mix(h), self.aux(e if shared else self.embed(ids)).sum(-1)


def whole_and_split(use_x, shared):
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))
    out_grads = [torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(2)),
                 torch.randn(2, 4, generator=torch.Generator().manual_seed(3))]

    whole = Stage()
    xw = x.clone().requires_grad_()
    torch.autograd.backward(list(whole(xw, ids, use_x, shared)), out_grads)

    split = Stage()
    xs = x.clone().requires_grad_()
    roots = list(split(xs, ids, use_x, shared))
    params = list(split.parameters())
    found, pending = backward_input(roots, out_grads, [xs], params)
    backward_weight(params, pending)
    return whole, split, xw.grad, found[0]


@pytest.mark.parametrize("shared", [False, True])
def test_every_parameter_gets_the_whole_backwards_gradient_when_the_output_uses_the_input(shared):
    whole, split, want, got = whole_and_split(True, shared)
    assert torch.allclose(got, want)
    for (name, p), q in zip(whole.named_parameters(), split.parameters()):
        assert q.grad is not None, name
        assert torch.allclose(q.grad, p.grad, atol=1e-6), name


@pytest.mark.parametrize("shared", [False, True])
def test_parameters_the_input_does_not_reach_still_get_their_gradients(shared):
    whole, split, want, got = whole_and_split(False, shared)
    assert want is None and (got is None or not got.any())
    for (name, p), q in zip(whole.named_parameters(), split.parameters()):
        assert q.grad is not None, name
        assert torch.allclose(q.grad, p.grad, atol=1e-6), name
