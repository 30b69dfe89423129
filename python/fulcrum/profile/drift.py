"""A calibration taken across a measurement rather than once before it.

A shared host's speed drifts: one calibration before a run of several minutes can catch it in a faster or a slower
spell than the run, and every prediction made from it then errs the same way. The two figures that carry most of a
step, the whole model's forward and backward against the layer profile's prediction of it, and the optimizer
step, are cheap to measure again between a measurement's rounds; their medians over every sample give the profile
and the cluster file the simulator predicts the measured steps from. The samples are never the runs' own steps.
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

from fulcrum.profile.comm import optimizer_memory_bytes_per_second, slowest_rank_seconds
from fulcrum.profile.layers import write_profile


def size_correction(points: Sequence[Sequence[float]]) -> Callable[[float], float]:
    """The correction at a token count from ``[[tokens, correction], ...]``: linear in log tokens between the
    points, the nearest point's beyond them, 1 with no points. Layers timed one by one need not stand in the
    whole model's ratio between a small and a large token count (caches kept warm between their runs, a host
    whose speed moved between the profile's sizes); the whole model timed at two sizes measures the correction."""
    pts = sorted((float(t), float(c)) for t, c in points)
    for t, c in pts:
        if not (t > 0 and c > 0):
            raise ValueError(f"a size correction needs positive tokens and corrections, got {[t, c]}")

    def at(tokens: float) -> float:
        if not pts:
            return 1.0
        if tokens <= pts[0][0]:
            return pts[0][1]
        if tokens >= pts[-1][0]:
            return pts[-1][1]
        for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
            if tokens <= t1:
                w = math.log(tokens / t0) / math.log(t1 / t0)
                return c0 + w * (c1 - c0)
        return pts[-1][1]

    return at


def scaled_profile(table: dict, factor: float, correction: Sequence[Sequence[float]] = ()) -> dict:
    """A copy of the profile table with every entry's seconds times ``factor`` and, at each token count, the
    ``correction`` there (size_correction's points; none: 1)."""
    if not factor > 0:
        raise ValueError(f"a profile's scale must be positive, got {factor}")
    at = size_correction(correction)
    out = copy.deepcopy(table)
    for entry in out["entries"]:
        entry["seconds"] = [t * factor * at(n) for t, n in zip(entry["seconds"], entry["tokens"], strict=True)]
    return out


def with_optimizer_seconds(cluster: dict, optimizer_seconds: float, parameters: int) -> dict:
    """A copy of a CPU cluster file whose memory bandwidth makes the simulator's Adam step over ``parameters``
    parameters take ``optimizer_seconds`` (as ``cpu_cluster`` sets it from a calibration)."""
    if not optimizer_seconds > 0 or parameters < 1:
        raise ValueError(f"an optimizer step needs positive seconds and parameters, got {optimizer_seconds} s over "
                         f"{parameters}")
    out = copy.deepcopy(cluster)
    out.setdefault("device", {})["memory_bytes_per_second"] = optimizer_memory_bytes_per_second(optimizer_seconds,
                                                                                              parameters)
    return out


def calibration_across_runs(layer_table: dict, cluster: dict, *, whole_model_predicted_seconds: float,
                            whole_model_seconds: Sequence[float], optimizer_seconds: Sequence[float],
                            parameters: int, correction: Sequence[Sequence[float]] = ()) -> tuple[dict, dict, dict]:
    """The profile and cluster file from samples taken before and between a measurement's rounds.

    ``layer_table``: the layers' own profile; ``whole_model_predicted_seconds``: what it predicts for the whole
    model's forward and backward that ``whole_model_seconds`` timed, with its entries times the size
    ``correction`` (size_correction's points); ``optimizer_seconds``: timed Adam steps over ``parameters``
    parameters. Returns the profile corrected and scaled by the median whole-model time over the prediction, the
    cluster file with the median optimizer step, and a record of the figures."""
    if not whole_model_seconds or not optimizer_seconds:
        raise ValueError("a calibration across runs needs whole-model and optimizer samples")
    if not whole_model_predicted_seconds > 0:
        raise ValueError(f"the profile's prediction of the whole model must be positive, got "
                         f"{whole_model_predicted_seconds}")
    measured = statistics.median(whole_model_seconds)
    factor = measured / whole_model_predicted_seconds
    optimizer = statistics.median(optimizer_seconds)
    record = {"whole_model_seconds": measured, "whole_model_samples": len(whole_model_seconds), "factor": factor,
              "optimizer_seconds": optimizer, "optimizer_samples": len(optimizer_seconds)}
    return (scaled_profile(layer_table, factor, correction), with_optimizer_seconds(cluster, optimizer, parameters),
            record)


def measurement_order(modes: Sequence[str], repeats: int) -> list[list[str]]:
    """The modes each of ``repeats`` rounds of a measurement runs, in order: every mode once a round, odd rounds
    in reverse, so that neither a slow spell of the host nor a place in the round (first after the checks
    between rounds, last before them) falls on one mode alone."""
    if repeats < 0:
        raise ValueError(f"a measurement's rounds cannot be negative, got {repeats}")
    return [list(modes) if r % 2 == 0 else list(modes)[::-1] for r in range(repeats)]


def alternating_blocks(modes: Sequence[str], steps: int, block: int) -> list[tuple[str, int, int]]:
    """Steps ``0 .. steps-1`` of every mode, ``block`` steps at a time, as ``(mode, first, end)`` in the order one
    process runs them: the modes in turn for each block, their order reversed every other block (a b b a a b ...),
    so that a drift of the host's speed within the measurement falls on every mode alike (exactly so for a linear
    drift over an even number of blocks), and no mode always runs right after another."""
    if block < 1 or steps < 0:
        raise ValueError(f"{steps} steps in blocks of {block}: a block must be at least 1 step, the steps at least 0")
    if len(set(modes)) != len(modes):
        raise ValueError(f"modes {list(modes)}: each may run only once a block")
    order = []
    for b, first in enumerate(range(0, steps, block)):
        for m in (list(modes) if b % 2 == 0 else list(modes)[::-1]):
            order.append((m, first, min(first + block, steps)))
    return order


def run_alternating(modes: Sequence[str], warmup: int, steps: int, block: int,
                    train: Callable[[str, int], None]) -> list[list]:
    """Several modes' steps in one process: ``train(mode, k)`` for each mode's warm-up steps ``k < warmup`` (the
    last mode first, so that the first measured block follows its own mode's warm-up), then for its measured steps
    ``k = warmup + s`` in alternating_blocks. Returns the blocks as run, ``[mode, first, end]`` each."""
    for m in reversed(list(modes)):
        for k in range(warmup):
            train(m, k)
    ran = []
    for m, first, end in alternating_blocks(modes, steps, block):
        for s in range(first, end):
            train(m, warmup + s)
        ran.append([m, first, end])
    return ran


def together_record(results: Mapping[str, dict], block: int, order: Sequence, speed_checks: Optional[dict]) -> dict:
    """The record of several modes run together: each mode's own record under ``modes``, the settings they share
    (``steps, warmup_steps, repeats, command``) once, the ``block``, the blocks as run (``order``) and every speed
    check, if any were taken."""
    first = next(iter(results.values()))
    return {"modes": dict(results), **{k: first[k] for k in ("steps", "warmup_steps", "repeats") if k in first},
            "block": block, "order": list(order), **({"speed_checks": speed_checks} if speed_checks is not None else {}),
            **({"command": first["command"]} if "command" in first else {})}


def write_check(path: Union[str, os.PathLike], whole_model_seconds: Sequence[float],
                optimizer_seconds: Sequence[float]) -> None:
    """One check taken between rounds: the whole model's times and the optimizer step's, as JSON."""
    Path(path).write_text(json.dumps({"whole_model_seconds": list(whole_model_seconds),
                                      "optimizer_seconds": list(optimizer_seconds)}) + "\n")


def recalibrate_folder(folder: Union[str, os.PathLike], checks: Sequence[Union[str, os.PathLike]]) -> dict:
    """calibration_across_runs over a calibration folder as the examples' compare.py lay it out: the layers' own
    profile in profile_layers.json, calibrate_cpu's record in calibration.json (with ``whole_model
    {predicted_seconds, size_correction}``, the layer profile's prediction of the whole model with its entries
    times the size correction, if any), the whole model's samples in
    whole_model.json (``samples``) and the cluster file in cluster.json; ``checks`` are write_check's files.
    Writes profile.json and cluster.json, adds the record to calibration.json as ``across_runs`` and returns it."""
    folder = Path(folder)
    calibration = json.loads((folder / "calibration.json").read_text())
    taken = [json.loads(Path(c).read_text()) for c in checks]
    profile, cluster, record = calibration_across_runs(
        json.loads((folder / "profile_layers.json").read_text()), json.loads((folder / "cluster.json").read_text()),
        whole_model_predicted_seconds=calibration["whole_model"]["predicted_seconds"],
        whole_model_seconds=json.loads((folder / "whole_model.json").read_text())["samples"] +
        [t for c in taken for t in c["whole_model_seconds"]],
        optimizer_seconds=calibration["optimizer_step_seconds"] + [t for c in taken for t in c["optimizer_seconds"]],
        parameters=calibration["parameters"], correction=calibration["whole_model"].get("size_correction", ()))
    write_profile(folder / "profile.json", profile)
    (folder / "cluster.json").write_text(json.dumps(cluster, indent=1) + "\n")
    record["checks"] = len(taken)
    calibration["across_runs"] = record
    (folder / "calibration.json").write_text(json.dumps(calibration, indent=1) + "\n")
    return record


class SpeedCheck:
    """The host's speed beside a measurement's steps rather than between its rounds: called after a step, outside
    the step's time, it times ``forward_backward()`` (a fixed piece of work on a model of its own, never the one
    being measured) and then an AdamW step over ``parameters`` with the gradients that left, each on every rank
    of the default process group at once (a barrier before each), and keeps the slowest rank's time of each
    (slowest_rank_seconds). It times every ``every``-th call, so a long
    check can sample a run sparsely. ``whole_model_seconds`` and ``optimizer_seconds`` are write_check's two
    lists: a shared host's speed moves by a third or more within minutes, and samples beside the steps move with
    it."""

    def __init__(self, forward_backward: Callable[[], None], parameters: Iterable, *, every: int = 1):
        import torch

        if every < 1:
            raise ValueError(f"a speed check every {every} steps: it must be at least 1")
        self.forward_backward = forward_backward
        self.every = every
        self.optimizer = torch.optim.AdamW(list(parameters), lr=1e-3)
        self.calls = 0
        self.whole_model_seconds: list[float] = []
        self.optimizer_seconds: list[float] = []
        self.labelled: dict[str, list[int]] = {}  # label: the indices of its samples

    def __call__(self, label: Optional[str] = None) -> bool:
        """Takes a sample if this call is one of every ``every``-th; returns whether it did. A ``label`` (the mode
        whose step it follows, when several run together) files the sample under it too (``samples(label)``)."""
        self.calls += 1
        if (self.calls - 1) % self.every:
            return False
        self._barrier()
        start = time.perf_counter()
        self.forward_backward()
        self.whole_model_seconds.append(slowest_rank_seconds(time.perf_counter() - start))
        self._barrier()
        start = time.perf_counter()
        self.optimizer.step()
        self.optimizer_seconds.append(slowest_rank_seconds(time.perf_counter() - start))
        self.optimizer.zero_grad(set_to_none=True)
        if label is not None:
            self.labelled.setdefault(label, []).append(len(self.whole_model_seconds) - 1)
        return True

    def samples(self, label: Optional[str] = None) -> dict:
        """The samples so far (those taken with ``label``, if given) as JSON, with write_check's argument names
        (``write_check(path, **samples)``)."""
        taken = range(len(self.whole_model_seconds)) if label is None else self.labelled.get(label, [])
        return {"whole_model_seconds": [self.whole_model_seconds[i] for i in taken],
                "optimizer_seconds": [self.optimizer_seconds[i] for i in taken]}

    @staticmethod
    def _barrier() -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
