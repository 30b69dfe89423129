"""A chain of four 3 × 3 linear layers in the runtime's layer form, seeded alike wherever it is built: the model of
the runtime tests that run a step on one process or on two."""

import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, first: bool):
        super().__init__()
        self.first, self.linear = first, nn.Linear(3, 3)

    def forward(self, state, batch):
        return (self.linear(batch["x"] if self.first else state[0]),)


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(Layer(i == 0) for i in range(4))
