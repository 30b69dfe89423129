"""Communication measurements: collectives timed over gloo (or any process group), nccl-tests output, and the
CPU cluster they calibrate.

A collective of S bytes is fitted as ``t = latency + S / bandwidth`` by least squares over the measured sizes,
which is the alpha-beta form the simulator's ring collectives take (fulcrum/cost/collective_cost.h).
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

# The simulator's link model for the cpu kind: a group within a node gets half the quoted two-way rate, times
# the kind's link efficiency (fulcrum/cost/analytic_cost.cc).
CPU_LINK_EFFICIENCY = 0.5
# And its optimizer step: Adam's bytes per parameter over the memory bandwidth times the kind's memory
# efficiency (fulcrum/sim/simulator.cc, fulcrum/cost/analytic_cost.cc).
OPTIMIZER_BYTES_PER_PARAMETER = 30
CPU_MEMORY_EFFICIENCY = 0.6


@dataclass(frozen=True)
class CollectiveFit:
    op: str
    ranks: int
    sizes_bytes: tuple
    seconds: tuple
    latency_seconds: float
    bytes_per_second: float  # S / (t − latency): the algorithm bandwidth of the fit

    def bus_bytes_per_second(self) -> float:
        """nccl-tests' bus bandwidth: the algorithm bandwidth × 2(n − 1)/n for an all-reduce."""
        factor = 2 * (self.ranks - 1) / self.ranks if self.op == "all_reduce" else (self.ranks - 1) / self.ranks
        return self.bytes_per_second * factor


def fit_alpha_beta(op: str, ranks: int, sizes_bytes: Sequence[float], seconds: Sequence[float]) -> CollectiveFit:
    """Least-squares ``t = a + S / B`` over (size, time) points, in relative error (each point weighted by
    1 / t²), so the small messages that fix the latency count as much as the large ones that fix the bandwidth;
    at least two distinct sizes."""
    if ranks < 2:
        raise ValueError(f"a collective over {ranks} rank(s) moves nothing: fit one of two or more ranks")
    if len(sizes_bytes) != len(seconds) or len(set(sizes_bytes)) < 2:
        raise ValueError("fitting a collective needs times at two or more sizes")
    if any(t <= 0 for t in seconds):
        raise ValueError("collective times must be positive")
    w = [1.0 / (t * t) for t in seconds]
    total = sum(w)
    mean_s = sum(wi * s for wi, s in zip(w, sizes_bytes)) / total
    mean_t = sum(wi * t for wi, t in zip(w, seconds)) / total
    var = sum(wi * (s - mean_s) ** 2 for wi, s in zip(w, sizes_bytes))
    slope = sum(wi * (s - mean_s) * (t - mean_t) for wi, s, t in zip(w, sizes_bytes, seconds)) / var
    if slope <= 0:
        raise ValueError("collective times do not grow with size; measure larger messages")
    latency = max(0.0, mean_t - slope * mean_s)
    return CollectiveFit(op, ranks, tuple(sizes_bytes), tuple(seconds), latency, 1.0 / slope)


def benchmark_all_reduce(sizes_bytes: Iterable[int] = (1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24), *,
                         repeats: int = 40, warmup: int = 3, group=None) -> CollectiveFit:
    """Times float32 all-reduces of each size on the default (or given) process group, with a barrier before
    each so every rank starts together, and fits the mean time of each size after ``warmup``. Every repeat runs
    each size once, in turn, so a slow spell of the host falls on all sizes alike. The mean, not the median: a
    training step pays for every collective it runs, so the simulator needs their expected time, and on a shared
    host that time is bimodal (a rank's communication thread woken at once or milliseconds late), where the
    median lands on either mode by chance. Call on every rank."""
    import torch
    import torch.distributed as dist

    buffers = [torch.ones(max(1, int(size) // 4), dtype=torch.float32) for size in sizes_bytes]
    runs: list[list[float]] = [[] for _ in buffers]
    for i in range(warmup + repeats):
        for buffer, times in zip(buffers, runs):
            dist.barrier(group=group)
            start = time.perf_counter()
            dist.all_reduce(buffer, group=group)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return fit_alpha_beta("all_reduce", dist.get_world_size(group), [b.numel() * 4 for b in buffers],
                          [statistics.fmean(times) for times in runs])


def measure_compute_slowdown(compute, *, size_bytes: int = 1 << 24, repeats: int = 9, group=None) -> float:
    """How much a collective in flight slows compute on this rank's cores: (time of ``compute()`` while an
    all-reduce of ``size_bytes`` runs beside it − its time alone) / the all-reduce's time alone. Each run beside
    the all-reduce follows a run alone, so a slow spell of the machine falls on both of a pair; the median of the
    ``repeats`` pairs' differences is taken. ``compute`` should outlast the all-reduce, and not by much: the
    difference is a small part of its time. Call on every rank; the ranks' mean is returned."""
    import torch
    import torch.distributed as dist

    buffer = torch.ones(max(1, size_bytes // 4), dtype=torch.float32)

    def timed(fn):
        dist.barrier(group=group)
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    compute()  # warm
    timed(lambda: dist.all_reduce(buffer, group=group))
    comm = statistics.median(timed(lambda: dist.all_reduce(buffer, group=group)) for _ in range(repeats))
    differences = []
    for _ in range(repeats):
        alone = timed(compute)
        dist.barrier(group=group)
        work = dist.all_reduce(buffer, group=group, async_op=True)
        start = time.perf_counter()
        compute()
        differences.append(time.perf_counter() - start - alone)
        work.wait()
    local = torch.tensor([max(0.0, statistics.median(differences) / comm)], dtype=torch.float64)
    dist.all_reduce(local, group=group)
    return float(local.item()) / dist.get_world_size(group)


def measure_collective_compute_seconds(chunk, *, chunks: int = 24, collectives: int = 9, size_bytes: int = 1 << 12,
                                       repeats: int = 40, group=None) -> float:
    """The compute a small collective costs when it is started between compute, as a training step starts its
    gradient all-reduces as the backward reaches them: a loop of ``chunks`` calls of ``chunk()`` with an
    all-reduce of ``size_bytes`` started (not waited for) after each of ``collectives`` chunks from its middle on,
    all waited for at the loop's end, against the same loop without them. The ranks start each loop together
    but not each all-reduce, which waits for its peer on threads that share the cores. Each loop with the
    all-reduces follows one without (a slow spell of the host falls on both of a pair), each timed at its
    slowest rank; returns the mean over the ``repeats`` pairs of the difference, per all-reduce (the mean: on a
    shared host the cost is bimodal, and a step pays for every one). Call on every rank."""
    import torch
    import torch.distributed as dist

    if not 0 < collectives <= chunks:
        raise ValueError(f"{collectives} collectives cannot start between {chunks} chunks, one after each")
    buffers = [torch.zeros(max(1, size_bytes // 4), dtype=torch.float32) for _ in range(collectives)]
    first = (chunks - collectives) // 2

    def loop(started: bool) -> float:
        dist.barrier(group=group)
        start, works = time.perf_counter(), []
        for k in range(chunks):
            chunk()
            if started and first <= k < first + collectives:
                works.append(dist.all_reduce(buffers[k - first], group=group, async_op=True))
        for work in works:
            work.wait()
        return slowest_rank_seconds(time.perf_counter() - start, group=group)

    loop(False), loop(True)  # warm
    differences = []
    for _ in range(repeats):
        alone = loop(False)
        differences.append(loop(True) - alone)
    return max(0.0, statistics.fmean(differences) / collectives)


def collective_start_seconds(in_place_seconds: float, compute_slowdown: float, all_reduce: CollectiveFit,
                             size_bytes: int) -> float:
    """What a collective of ``size_bytes`` started between compute costs (``in_place_seconds``, measured by
    measure_collective_compute_seconds) beyond what the simulator already charges it on shared cores: the
    slowdown × its time, which for a two-rank ring is the fit's latency + size / bandwidth."""
    fitted = all_reduce.latency_seconds + size_bytes / all_reduce.bytes_per_second
    return max(0.0, in_place_seconds - compute_slowdown * fitted)


_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+|none)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
_NCCL_OP = re.compile(r"(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv)_perf")
_NCCL_RANKS = re.compile(r"^#\s+Rank\s+\d+", re.M)


def parse_nccl_tests(text: str, where: str = "nccl-tests output", op: Optional[str] = None) -> CollectiveFit:
    """A fit from nccl-tests' table (``all_reduce_perf -b 8 -e 128M -f 2``): size in bytes and the out-of-place
    time in microseconds of each row. The operation comes from the command line it echoes, or ``op``."""
    if op is None:
        m = _NCCL_OP.search(text)
        op = m.group(1) if m else "all_reduce"
    ranks = len(_NCCL_RANKS.findall(text)) or 2
    sizes, times = [], []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m:
            sizes.append(float(m.group(1)))
            times.append(float(m.group(6)) * 1e-6)
    if len(sizes) < 2:
        raise ValueError(f"{where}: no nccl-tests result rows (size count type redop root time algbw busbw ...)")
    return fit_alpha_beta(op, ranks, sizes, times)


def cpu_cluster(devices: int, all_reduce: CollectiveFit, *, fp32_flops_per_second: Optional[float] = None,
                compute_slowdown: Optional[float] = None, optimizer_seconds: Optional[float] = None,
                optimizer_parameters: int = 0, collective_compute_seconds: Optional[float] = None) -> dict:
    """A cluster JSON for the simulator (``fulcrum simulate --cluster file.json``): ``devices`` of the cpu kind
    whose link rate reproduces the measured all-reduce bandwidth under the simulator's link model; optionally a
    measured fp32 matmul rate (the simulator runs fp32 at half the device's bf16 rate, so twice it is written)
    and ``compute_slowdown``: the compute time communication costs on shared cores, per second of
    communication ((compute time beside a collective − compute time alone) / the collective's time alone);
    optionally the measured time of an Adam step over ``optimizer_parameters`` parameters, which sets the memory
    bandwidth the simulator's optimizer model (30 bytes per parameter) needs to reproduce it; optionally
    ``collective_compute_seconds``: the compute each collective costs on top of the slowdown × its time."""
    # A two-rank ring all-reduce moves S/B per rank: B = the fit's algorithm bandwidth × 2(n − 1)/n.
    per_direction = all_reduce.bus_bytes_per_second()
    device = {"intra_node_bytes_per_second": 2 * per_direction / CPU_LINK_EFFICIENCY}
    if all_reduce.latency_seconds > 0:
        # A two-rank ring all-reduce takes two latency-bound steps (reduce-scatter, all-gather).
        device["collective_latency_seconds"] = all_reduce.latency_seconds / (2 * (all_reduce.ranks - 1))
    if fp32_flops_per_second:
        device["bf16_flops_per_second"] = 2 * fp32_flops_per_second
    if compute_slowdown is not None:
        device["communication_compute_slowdown"] = compute_slowdown
    if collective_compute_seconds is not None:
        device["collective_compute_seconds"] = collective_compute_seconds
    if optimizer_seconds and optimizer_parameters:
        device["memory_bytes_per_second"] = optimizer_memory_bytes_per_second(optimizer_seconds, optimizer_parameters)
    return {"fulcrum": 1, "preset": f"cpu:{devices}", "device": device}


def optimizer_memory_bytes_per_second(optimizer_seconds: float, parameters: int) -> float:
    """The memory bandwidth under which the simulator's Adam step over ``parameters`` takes ``optimizer_seconds``."""
    return OPTIMIZER_BYTES_PER_PARAMETER * parameters / optimizer_seconds / CPU_MEMORY_EFFICIENCY


@dataclass(frozen=True)
class CpuCalibration:
    """What a CPU cluster file is made from, measured on every rank of the process group at once."""

    all_reduce: CollectiveFit
    compute_slowdown: float
    optimizer_seconds: float  # an AdamW step over `parameters` parameters, median
    parameters: int
    devices: int
    optimizer_step_seconds: tuple[float, ...] = ()  # every measured step, of which optimizer_seconds is the median
    # A small all-reduce started between compute: what it cost the compute in place, and what of that the
    # slowdown × its fitted time leaves over (the cluster's collective_compute_seconds).
    collective_in_place_seconds: Optional[float] = None
    collective_compute_seconds: Optional[float] = None

    def cluster(self) -> dict:
        """The cluster JSON (``cpu_cluster``) these measurements give."""
        return cpu_cluster(self.devices, self.all_reduce, compute_slowdown=self.compute_slowdown,
                           optimizer_seconds=self.optimizer_seconds, optimizer_parameters=self.parameters,
                           collective_compute_seconds=self.collective_compute_seconds)

    def record(self) -> dict:
        """The measurements as JSON."""
        fit = self.all_reduce
        return {"all_reduce": {"latency_seconds": fit.latency_seconds, "bytes_per_second": fit.bytes_per_second,
                               "sizes_bytes": fit.sizes_bytes, "seconds": fit.seconds},
                "communication_compute_slowdown": self.compute_slowdown,
                "collective_in_place_seconds": self.collective_in_place_seconds,
                "collective_compute_seconds": self.collective_compute_seconds,
                "optimizer_seconds": self.optimizer_seconds, "optimizer_step_seconds": list(self.optimizer_step_seconds),
                "parameters": self.parameters}


def calibrate_cpu(parameters) -> CpuCalibration:
    """Measures, on every rank of the default process group at once (its cores as busy as in training), an
    all-reduce from a few KB (the latency) to 16 MB, how much one in flight slows a matmul loop, what a 4 KB one
    started between a loop's chunks costs it beyond that, and an AdamW step over ``parameters`` (their gradients
    are set to random values and the step changes them)."""
    import torch
    import torch.distributed as dist

    fit = benchmark_all_reduce((1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24))
    a = torch.randn(256, 256)

    def compute():  # about twice an 8 MB all-reduce on two CPU ranks
        for _ in range(40):
            torch.mm(a, a)

    slowdown = measure_compute_slowdown(compute, size_bytes=1 << 23, repeats=15)

    def chunk():  # about a layer's pass of a small model: a few ms
        for _ in range(10):
            torch.mm(a, a)

    small = 1 << 12
    in_place = measure_collective_compute_seconds(chunk, size_bytes=small)
    start_cost = collective_start_seconds(in_place, slowdown, fit, small)
    params = list(parameters)
    steps = time_optimizer_step(params)
    return CpuCalibration(all_reduce=fit, compute_slowdown=slowdown, optimizer_seconds=statistics.median(steps),
                          parameters=sum(q.numel() for q in params), devices=dist.get_world_size(),
                          optimizer_step_seconds=tuple(steps), collective_in_place_seconds=in_place,
                          collective_compute_seconds=start_cost)


def slowest_rank_seconds(seconds: float, group=None) -> float:
    """The largest of ``seconds`` over the ranks of the default (or given) process group; ``seconds`` itself
    outside one. A synchronous step goes at its slowest rank's pace, and on a shared host the slowest of two
    ranks doing the same work runs several per cent behind their mean, a different rank from one step to the
    next; the same piece of work timed on every rank at once and taken at its slowest carries that wait. Call on
    every rank."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return seconds
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return float(value.item())


def time_optimizer_step(parameters, *, warmup: int = 3, repeats: int = 9) -> list[float]:
    """Seconds of each of ``repeats`` AdamW steps over ``parameters``, on every rank of the default process group
    at once (a barrier before each), each the slowest rank's (slowest_rank_seconds). Their gradients are set to
    random values and the steps change them."""
    import torch
    import torch.distributed as dist

    if warmup < 0 or repeats < 1:
        raise ValueError(f"timing needs warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    params = list(parameters)
    for q in params:
        q.grad = torch.randn_like(q)
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    grouped = dist.is_available() and dist.is_initialized()
    times = []
    for i in range(warmup + repeats):
        if grouped:
            dist.barrier()
        start = time.perf_counter()
        optimizer.step()
        elapsed = slowest_rank_seconds(time.perf_counter() - start)
        if i >= warmup:
            times.append(elapsed)
    return times
