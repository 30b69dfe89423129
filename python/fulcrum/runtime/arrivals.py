"""A step's receives posted ahead, so the executor can ask whether a message is here without waiting for it.

A gloo receive tells that it has completed only when waited on, so a rank blocked on one message cannot look at
another. Here each message's small header is posted as soon as the step starts and a background thread waits on
it (the wait releases the interpreter's lock), posts the receives of the tensors the header announces at once,
so they travel while the rank computes, and waits for them too. :meth:`Arrivals.ready` then answers at once and
:meth:`Arrivals.take` hands the tensors over. Header and tensors travel as the executor's sends put them: the
header first, then each non-empty tensor under its own tag.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Hashable

import torch
import torch.distributed as dist


class Arrivals:
    """``header_slots`` int64 values per header; ``buffers(header)`` allocates the tensors a header announces."""

    def __init__(self, header_slots: int, buffers: Callable[[torch.Tensor], list]):
        self._header_slots, self._buffers = header_slots, buffers
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._watchers = 0
        self._posted: dict = {}  # key -> (its tensors once here, the event that says so, errors)

    def post(self, key: Hashable, source: int, tag: Callable[[int], int]) -> None:
        """Posts the receive of the message ``key`` from global rank ``source``; ``tag(i)`` is its part ``i``'s
        tag (part 0 the header)."""
        if key in self._posted:
            raise ValueError(f"message {key} is already posted")
        header = torch.empty(self._header_slots, dtype=torch.int64)
        work = dist.irecv(header, source, tag=tag(0))
        event, errors = threading.Event(), []
        tensors: list = []
        self._posted[key] = (tensors, event, errors)
        # One watcher per message that can be outstanding at once: a watcher blocked on a late message must not
        # hold up the others.
        if self._watchers < len(self._posted):
            threading.Thread(target=self._watch, daemon=True, name="fulcrum-arrivals").start()
            self._watchers += 1
        self._jobs.put((work, source, tag, header, tensors, event, errors))

    def _watch(self) -> None:
        while True:
            work, source, tag, header, tensors, event, errors = self._jobs.get()
            try:
                work.wait()
                tensors += self._buffers(header)
                works = [dist.irecv(t, source, tag=tag(i + 1)) for i, t in enumerate(tensors)
                         if t.numel()]  # the header tells the receiver of empty tensors
                for w in works:
                    w.wait()
            except BaseException as error:  # handed to the rank's own thread by take()
                errors.append(error)
            event.set()

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
        return list(self._posted)
