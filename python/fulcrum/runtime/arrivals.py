"""A step's receives posted ahead, so the executor can ask whether a message is here without waiting for it.

A gloo receive tells that it has completed only when waited on, so a rank blocked on one message cannot look at
another. Here each message's small header is posted as soon as the step starts and a background thread waits on
it (the wait releases the interpreter's lock), posts the receives of the tensors the header announces at once,
so they travel while the rank computes, and waits for them too. :meth:`Arrivals.ready` then answers at once and
:meth:`Arrivals.take` hands the tensors over. Header and tensors travel as the executor's sends put them: the
header first, then each non-empty tensor under its own tag.

A step that raises leaves its receives posted, and their tags come back every step: as after a failed
collective, the process must end.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Hashable, Sequence

import torch
import torch.distributed as dist


class _Watchers:
    """The process's watcher threads, shared by every :class:`Arrivals`: at least one per message in flight, so
    a message that is late never holds up another."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._in_flight = 0

    def submit(self, job: tuple) -> None:
        with self._lock:
            self._in_flight += 1
            if self._in_flight > self._threads:
                threading.Thread(target=self._serve, daemon=True, name="fulcrum-arrivals").start()
                self._threads += 1
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            _receive(*self._jobs.get())  # the job's references go with the call: nothing stays pinned
            with self._lock:
                self._in_flight -= 1


def _receive(work, source: int, tags: Sequence[int], header: torch.Tensor, buffers: Callable, tensors: list,
             event: threading.Event, errors: list) -> None:
    try:
        work.wait()
        tensors += buffers(header)
        works = [dist.irecv(t, source, tag=tags[i + 1]) for i, t in enumerate(tensors)
                 if t.numel()]  # the header tells the receiver of empty tensors
        for w in works:
            w.wait()
    except BaseException as error:  # handed to the rank's own thread by take()
        errors.append(error)
    event.set()


_WATCHERS = _Watchers()


class Arrivals:
    """``header_slots`` int64 values per header, received on ``device``; ``buffers(header)`` allocates the tensors a
    header announces."""

    def __init__(self, header_slots: int, buffers: Callable[[torch.Tensor], list],
                 device: torch.device = torch.device("cpu")):
        self._header_slots, self._buffers, self._device = header_slots, buffers, device
        self._posted: dict = {}  # key -> (its tensors once here, the event that says so, errors)

    def post(self, key: Hashable, source: int, tags: Sequence[int]) -> None:
        """Posts the receive of the message ``key`` from global rank ``source``; ``tags[i]`` is its part ``i``'s
        tag (part 0 the header), for as many parts as a header may announce."""
        if key in self._posted:
            raise ValueError(f"message {key} is already posted")
        header = torch.empty(self._header_slots, dtype=torch.int64, device=self._device)
        work = dist.irecv(header, source, tag=tags[0])
        tensors: list = []
        event, errors = threading.Event(), []
        self._posted[key] = (tensors, event, errors)
        _WATCHERS.submit((work, source, tuple(tags), header, self._buffers, tensors, event, errors))

    def ready(self, key: Hashable) -> bool:
        """Whether message ``key`` has arrived, header and tensors."""
        return self._posted[key][1].is_set()

    def take(self, key: Hashable) -> tuple:
        """Waits for message ``key`` and returns its tensors."""
        tensors, event, errors = self._posted.pop(key)
        event.wait()
        if errors:
            raise errors[0]
        return tuple(tensors)

    def pending(self) -> list:
        """The keys of messages posted and not yet taken."""
        return list(self._posted)
