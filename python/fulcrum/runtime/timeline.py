"""A rank's measured timeline, written in the simulator's Chrome trace format so the two open side by side."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Union

# The simulator's streams (fulcrum/sim/chrome_trace.cc): thread ids and names per rank.
COMPUTE, P2P, COLLECTIVE = 0, 1, 2
STREAM_NAMES = {COMPUTE: "compute", P2P: "pipeline p2p", COLLECTIVE: "data-parallel collectives"}


@dataclass(frozen=True)
class Event:
    name: str          # "F s0 mb1", "B s1 mb0", "recv s1 mb0", "all_reduce", "optimizer", ...
    category: str      # forward, backward, backward_input, backward_weight, send, recv, collective, optimizer
    stream: int        # COMPUTE, P2P or COLLECTIVE
    start_seconds: float
    end_seconds: float
    stage: int = -1
    micro_batch: int = -1


class Timeline:
    """Events of one rank, in seconds since the start of the current step (``begin_step``). The current step's
    events are always kept (the runtime sums its compute from them); every step's with ``keep=True``."""

    def __init__(self, keep: bool = False):
        self.keep = keep
        self.steps: list[list[Event]] = []
        self.current: list[Event] = []
        self.origin = time.perf_counter()

    def begin_step(self) -> None:
        self.origin = time.perf_counter()
        self.current = []
        if self.keep:
            self.steps.append(self.current)

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def add(self, event: Event) -> None:
        self.current.append(event)

    @contextmanager
    def span(self, name: str, category: str, stream: int = COMPUTE, stage: int = -1,
             micro_batch: int = -1) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.add(Event(name, category, stream, start, self.now(), stage, micro_batch))

    def busy_seconds(self, stream: int = COMPUTE) -> float:
        """Time the current step spent in events of ``stream`` (compute by default)."""
        return sum(e.end_seconds - e.start_seconds for e in self.current if e.stream == stream)


def chrome_trace(per_rank: Iterable[tuple[int, Iterable[Event]]], title: str,
                 iteration_seconds: float = 0.0) -> dict:
    """A Chrome trace (Perfetto, chrome://tracing) of ranks' events: a process per rank, the simulator's three
    streams as its threads, times in microseconds."""
    events: list[dict] = []
    for rank, rank_events in per_rank:
        events.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}})
        for tid, name in STREAM_NAMES.items():
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}})
        for e in rank_events:
            events.append({"name": e.name, "cat": e.category, "ph": "X", "pid": rank, "tid": e.stream,
                           "ts": e.start_seconds * 1e6, "dur": (e.end_seconds - e.start_seconds) * 1e6,
                           "args": {"stage": e.stage, "micro_batch": e.micro_batch}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"title": title, "iteration_seconds": iteration_seconds, "measured": True}}


def write_chrome_trace(path: Union[str, os.PathLike], per_rank: Iterable[tuple[int, Iterable[Event]]], title: str,
                       iteration_seconds: float = 0.0) -> None:
    """Writes the trace of ``per_rank``, ``(rank, events)`` pairs (a Timeline's ``current`` or ``steps[k]`` as
    the events), atomically: a temporary file renamed into place, removed when the trace cannot be made."""
    path = os.fspath(path)
    per_rank = list(per_rank)
    for item in per_rank:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int)):
            raise TypeError(f"write_chrome_trace takes (rank, events) pairs, e.g. [(rank, timeline.current)]; got "
                            f"{type(item).__name__}")
        if isinstance(item[1], Timeline):
            raise TypeError("write_chrome_trace takes each rank's events, not its Timeline: pass "
                            "(rank, timeline.current), or timeline.steps[k] for step k")
    trace = chrome_trace(per_rank, title, iteration_seconds)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(trace, f)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def event_from_dict(d: dict) -> Event:
    return Event(d["name"], d["category"], int(d["stream"]), float(d["start_seconds"]), float(d["end_seconds"]),
                 int(d.get("stage", -1)), int(d.get("micro_batch", -1)))
