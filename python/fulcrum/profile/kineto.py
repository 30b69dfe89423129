"""Reads layer timings back from a torch.profiler (Kineto) trace.

:func:`fulcrum.profile.profile_model` run under ``torch.profiler.profile`` labels every timed run
``fulcrum/<layer>/<tokens>/<run>`` (``record_function``); the exported Chrome trace therefore holds the same
measurements, and a trace taken elsewhere (on the training cluster, say) becomes a profile table here.
"""

from __future__ import annotations

import os
import re
import statistics
from collections import defaultdict
from typing import Any, Mapping, Union

from fulcrum.profile.layers import passes_from_medians, read_json, table_from_measurements

_LABEL = re.compile(r"^fulcrum/(\d+)/(\d+)/(forward|backward|backward_input|backward_weight)$")


def import_kineto_trace(path: Union[str, os.PathLike], model_json: Mapping[str, Any], *, device: str = "cpu",
                        dtype: str = "fp32") -> dict:
    """The profile table of the labelled ranges in a ``torch.profiler`` Chrome trace (``export_chrome_trace``):
    the median duration of each run per layer and token count. ValueError naming the file when it holds none."""
    path = os.fspath(path)
    trace = read_json(path, "a Chrome trace")
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise ValueError(f"{path}: no traceEvents array")
    runs: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    for e in events:
        # On CUDA Kineto gives each labelled range twice: the host's span, which encloses the timed call as
        # profile_model times it, and a span of the GPU's work under the same name, which is left out.
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") == "gpu_user_annotation":
            continue
        m = _LABEL.match(str(e.get("name", "")))
        if m and isinstance(e.get("dur"), (int, float)):
            runs[(int(m.group(1)), int(m.group(2)), m.group(3))].append(float(e["dur"]) * 1e-6)
    if not runs:
        raise ValueError(f"{path}: no fulcrum/<layer>/<tokens>/<run> ranges (profile under torch.profiler first)")
    measured: dict[int, dict[int, dict[str, float]]] = defaultdict(dict)
    for layer, tokens in sorted({(k[0], k[1]) for k in runs}):
        def median(run):
            times = runs.get((layer, tokens, run))
            return statistics.median(times) if times else None

        forward, whole = median("forward"), median("backward")
        if forward is None:
            raise ValueError(f"{path}: layer {layer} at {tokens} tokens lacks its forward runs")
        if whole is None:  # a frozen layer on inputs that take no gradient runs no backward (as time_layer gives)
            if median("backward_input") is not None or median("backward_weight") is not None:
                raise ValueError(f"{path}: layer {layer} at {tokens} tokens has split backward runs but no whole "
                                 "backward")
            measured[layer][tokens] = {"forward": forward, "recompute": forward}
            continue
        measured[layer][tokens] = passes_from_medians(forward, whole, median("backward_input"),
                                                      median("backward_weight"))
    return table_from_measurements(model_json, measured, device=device, dtype=dtype)
