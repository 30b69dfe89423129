"""Parameters a runtime would leave untrained: trainable ones of the model that none of the layers it runs hold.

A runtime trains the layers its plan indexes (``model.layers``, or the components a task graph names); a
parameter kept elsewhere on the model, say a learnt scale beside the layers, would never reach an optimizer or
a gradient reduction, and training would go on without it unannounced. Frozen ones lose nothing.
"""

from __future__ import annotations

import warnings
from typing import Iterable

from torch import nn

_SHOWN = 5  # names listed in the warning; the rest are counted


def warn_parameters_outside(model: nn.Module, parts: Iterable[nn.Module], parts_name: str) -> list[str]:
    """Warns (``UserWarning``) of the trainable parameters of ``model`` that no module in ``parts`` holds, and
    returns their names; ``parts_name`` says in the warning what the parts are."""
    held = {id(p) for part in parts for p in part.parameters()}
    outside = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if outside:
        shown = ", ".join(outside[:_SHOWN])
        if len(outside) > _SHOWN:
            shown += f" and {len(outside) - _SHOWN} more"
        warnings.warn(f"{len(outside)} parameter(s) of the model are outside {parts_name}, so no stage trains "
                      f"them: {shown}", UserWarning, stacklevel=3)
    return outside
