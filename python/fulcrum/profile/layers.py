"""Measures a torch model's layers, pass by pass, into Fulcrum's profile table (``ProfiledCost``'s input).

The model is the runtime's layer chain (``model.layers``, each ``layer(state, batch) -> state``) beside its
Fulcrum model JSON, plus ``model.profile_inputs(layer_index, tokens) -> (state, batch)``: a micro-batch in which
that layer processes ``tokens`` tokens (for an encoder, whole items of its ``tokens_per_item``). Each distinct
layer shape is timed once per token count: forward, the whole backward, its two halves as the runtime's
zero-bubble instructions run them (``fulcrum.runtime.split_backward``: the input gradient, then the weight
gradient it left for later) and a recomputation (a forward again), each as the median of ``repeats`` runs after
``warmup``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from contextlib import nullcontext
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

import torch

from fulcrum.runtime.split_backward import backward_input, backward_weight

PROFILE_VERSION = 1
PASSES = ("forward", "backward_input", "backward_weight", "recompute", "backward")
_SHAPE_KEYS = ("hidden", "ffn", "heads", "kv_heads", "head_dim", "mlp", "window_tokens", "vocab", "in_features")


def flattened_layers(model_json: Mapping[str, Any]) -> list[dict]:
    """The model's layers in chain order, ``repeat`` expanded; each carries its component's name, role,
    ``tokens_per_item`` and ``merge``."""
    out = []
    components = model_json["components"]
    encoder: Optional[Mapping[str, Any]] = None
    for c in components:
        if c["role"] == "encoder":
            encoder = c
        for layer in c["layers"]:
            for _ in range(int(layer.get("repeat", 1))):
                entry = {k: v for k, v in layer.items() if k != "repeat"}
                entry["_component"], entry["_role"] = c["name"], c["role"]
                # The length of the sequences this layer attends over: an encoder item, its merged tokens in
                # the projector, a whole sample in the LLM (0: the profiled tokens are one sequence).
                per_item = int((encoder or {}).get("tokens_per_item", 0))
                if c["role"] == "encoder":
                    entry["_sequence_tokens"] = int(c.get("tokens_per_item", 0))
                elif c["role"] == "projector" and per_item:
                    kept = per_item - (1 if encoder.get("drops_class_token", False) else 0)
                    entry["_sequence_tokens"] = max(1, kept // max(1, int(encoder.get("merge", 1))))
                else:
                    entry["_sequence_tokens"] = 0
                out.append(entry)
    return out


def layer_shape(layer: Mapping[str, Any]) -> dict:
    """The keys that identify a layer in a profile table, with the model schema's defaults filled in, so an
    entry matches the layer exactly as the core reads it."""
    kind = layer["kind"]
    shape: dict[str, Any] = {"layer": kind, "hidden": int(layer["hidden"])}
    if kind == "transformer":
        heads = int(layer["heads"])
        shape.update(ffn=int(layer["ffn"]), heads=heads, kv_heads=int(layer.get("kv_heads", heads)),
                     head_dim=int(layer.get("head_dim", int(layer["hidden"]) // heads)),
                     mlp=layer.get("mlp", "gelu"), window_tokens=int(layer.get("window_tokens", 0)))
    elif kind in ("token_embedding", "lm_head"):
        shape["vocab"] = int(layer["vocab"])
    elif kind in ("patch_embedding", "projector"):
        shape.update(in_features=int(layer["in_features"]), ffn=int(layer.get("ffn", 0)))
    return shape


def _median_seconds(run: Callable[[Any], Any], warmup: int, repeats: int, label: str, profiler,
                    setup: Callable[[], Any] = lambda: None, sync: Callable[[], None] = lambda: None) -> float:
    """Median time of ``run(setup())`` over ``repeats`` runs after ``warmup``; ``setup`` is not timed. ``sync``
    waits for the device's queued work (a GPU's kernels run after the host has launched them)."""
    times = []
    for i in range(warmup + repeats):
        arg = setup()
        sync()
        context = torch.profiler.record_function(label) if profiler is not None and i >= warmup else nullcontext()
        with context:
            start = time.perf_counter()
            run(arg)
            sync()
            elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times)


def _requires_grad(state):
    return tuple(t.detach().requires_grad_() if t.is_floating_point() else t for t in state)


def time_layer(layer: torch.nn.Module, make_inputs: Callable[[], tuple], *, warmup: int = 2, repeats: int = 5,
               label: str = "layer", profiler=None) -> dict[str, float]:
    """Median seconds of each pass of ``layer`` on the inputs ``make_inputs()`` returns (``(state, batch)``):
    the forward; the whole backward and the input-gradient half, each after an untimed forward; the weight-
    gradient half after an untimed forward and input half; a recomputation is a forward again."""
    if warmup < 0 or repeats < 1:
        raise ValueError(f"timing needs warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    state, batch = make_inputs()
    state = _requires_grad(state)
    inputs = [t for t in state if t.is_floating_point()]
    params = [p for p in layer.parameters() if p.requires_grad]
    device = next((t.device for t in (*layer.parameters(), *inputs)), torch.device("cpu"))
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def median(run, label_suffix, setup=lambda: None):
        return _median_seconds(run, warmup, repeats, f"{label}/{label_suffix}", profiler, setup, sync)

    def forward(_=None):
        return [o for o in layer(state, batch) if o.is_floating_point() and o.requires_grad]

    grads = [torch.randn_like(o) for o in forward()]
    forward_seconds = median(forward, "forward")
    if not grads:  # frozen, on inputs that take no gradient: no backward pass at all
        return {"forward": forward_seconds, "recompute": forward_seconds}
    whole = median(lambda out: torch.autograd.backward(out, grads, inputs=inputs + params), "backward", forward)
    input_half = weight_half = None
    if inputs and not params:  # frozen: the input gradient is the whole backward, and no weight half
        input_half = whole
    elif inputs:
        input_half = median(lambda out: backward_input(out, grads, inputs, params), "backward_input", forward)
        weight_half = median(lambda pending: backward_weight(params, pending), "backward_weight",
                             lambda: backward_input(forward(), grads, inputs, params)[1])
    layer.zero_grad(set_to_none=True)
    return passes_from_medians(forward_seconds, whole, input_half, weight_half)


def passes_from_medians(forward: float, backward: float, backward_input: Optional[float],
                        backward_weight: Optional[float] = None) -> dict:
    """Pass times from the timed runs: a forward, the whole backward, and the split backward's halves. The
    input half is None for a layer whose input needs no gradient (the first of the chain: its weight half is the
    whole backward); without a timed weight half, it is the whole less the input half."""
    seconds = {"forward": forward, "recompute": forward, "backward": backward}
    if backward_input is None:
        seconds["backward_weight"] = backward
    else:
        seconds["backward_input"] = backward_input
        seconds["backward_weight"] = backward_weight if backward_weight is not None else max(
            backward - backward_input, 0.0)
    return seconds


def _distinct_shapes(layers: Sequence[Mapping[str, Any]], indices: Iterable[int]) -> Iterator[tuple[int, dict]]:
    """The first of ``indices`` with each profile shape (layer keys and attended sequence length)."""
    seen = set()
    for index in indices:
        shape = {**layer_shape(layers[index]), "sequence_tokens": layers[index]["_sequence_tokens"]}
        key = json.dumps(shape, sort_keys=True)
        if key not in seen:
            seen.add(key)
            yield index, shape


def read_json(path: Union[str, os.PathLike], what: str) -> Any:
    """A JSON file's document; ValueError naming the file when it is not JSON."""
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{os.fspath(path)}: not {what} ({e})") from None


def table_from_measurements(model_json: Mapping[str, Any], measured: Mapping[int, Mapping[int, Mapping[str, float]]],
                            *, device: str = "cpu", dtype: str = "fp32") -> dict:
    """A profile table from pass times per layer index and token count; layers of one shape share an entry
    (the first measured one's)."""
    layers = flattened_layers(model_json)
    entries = []
    for index, shape in _distinct_shapes(layers, sorted(measured)):
        grid = sorted(measured[index])
        for p in PASSES:
            seconds = [measured[index][t].get(p, 0.0) for t in grid]
            # Passes too short to time (a layer without a backward for its input) keep the analytic model's.
            if all(x > 0 for x in seconds):
                entries.append({**shape, "tp": 1, "sequence_parallel": False, "dtype": dtype, "pass": p,
                                "tokens": grid, "seconds": seconds})
    return {"fulcrum_profile": PROFILE_VERSION, "device": device, "entries": entries}


def profile_model(model: torch.nn.Module, model_json: Mapping[str, Any],
                  tokens: Union[Sequence[int], Mapping[str, Sequence[int]]], *, device: str = "cpu",
                  dtype: str = "fp32", warmup: int = 2, repeats: int = 5, rounds: int = 1, profiler=None,
                  after_round: Optional[Callable[[], None]] = None) -> dict:
    """Profiles every distinct layer shape of ``model`` at each token count and returns the profile table.

    ``tokens``: the token counts, for every component or per component name (``{"vision": [64, 128], ...}``).
    With ``rounds`` > 1 the whole grid is timed that many times over and each pass takes the median of its rounds,
    so a slow spell of a shared machine lands on one round of every entry instead of on every run of a few.
    With ``profiler`` (a running ``torch.profiler.profile``) every timed run is also a labelled range in its
    trace, which :func:`fulcrum.profile.import_kineto_trace` reads back. ``after_round`` is called after each pass
    over the grid: what it times (the whole model, say, to scale the table by) shares the machine's slow spells
    with the layers' rounds.
    """
    layers = flattened_layers(model_json)
    if len(layers) != len(model.layers):
        raise ValueError(f"the model JSON has {len(layers)} layers but the model has {len(model.layers)}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    grids = {}
    # Each shape is timed on a layer that trains where there is one: a frozen layer runs no weight gradient, and its
    # times would price the trained layers of its shape.
    def frozen(i: int) -> bool:
        params = list(model.layers[i].parameters())
        return bool(params) and not any(p.requires_grad for p in params)

    for index, _ in _distinct_shapes(layers, sorted(range(len(layers)), key=frozen)):
        spec = layers[index]
        grid = tokens.get(spec["_component"], ()) if isinstance(tokens, Mapping) else tokens
        grid = sorted({int(t) for t in grid})
        if not grid:
            raise ValueError(f"no token counts to profile component {spec['_component']!r} at")
        # An encoder's or projector's layer runs whole items: a count between them would be measured on fewer
        # tokens than the table records.
        item = spec["_sequence_tokens"]
        split = [t for t in grid if item and t % item]
        if split:
            raise ValueError(f"token count {split[0]} for component {spec['_component']!r} is not a whole number of "
                             f"its {item}-token items")
        grids[index] = grid
    runs: dict[int, dict[int, list[dict[str, float]]]] = {i: {t: [] for t in g} for i, g in grids.items()}
    for _ in range(rounds):
        for index, grid in grids.items():
            for t in grid:
                runs[index][t].append(time_layer(model.layers[index], lambda: model.profile_inputs(index, t),
                                                 warmup=warmup, repeats=repeats, label=f"fulcrum/{index}/{t}",
                                                 profiler=profiler))
        if after_round is not None:
            after_round()
    measured = {i: {t: {p: statistics.median(r[p] for r in rs) for p in rs[0]} for t, rs in by_t.items()}
                for i, by_t in runs.items()}
    return table_from_measurements(model_json, measured, device=device, dtype=dtype)


def write_profile(path: Union[str, os.PathLike], table: Mapping[str, Any]) -> None:
    """Writes a profile table as JSON, atomically."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def read_profile(path: Union[str, os.PathLike]) -> dict:
    """Reads a profile table after the core's own reader has checked it (ValueError naming the file and entry):
    what ``--profile`` accepts, this accepts."""
    from fulcrum._core import check_profile

    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    check_profile(text, path)
    return json.loads(text)
