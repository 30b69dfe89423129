"""Runs a pipeline rank's program from a Fulcrum schedule, instruction by instruction.

For the orders no public ``torch.distributed.pipelining`` schedule gives (interleaved chunks placed as the plan
says, backward passes split into input and weight gradients, custom programs, the encoders' passes in the LLM's
bubbles), this follows the plan's instructions: ``F``/``B``/``BI``/``W`` compute, ``send``/``recv`` as
``torch.distributed`` point-to-point messages, gradient collectives over the data-parallel group. Activations keep
whatever shape each micro-batch has: every transfer carries a small header with its tensors' shapes, so nothing
is padded that the model does not pad itself. A step's receives are all posted when it starts
(:class:`Arrivals`), so each message travels while the rank computes instead of when the rank reaches its
receive.

The LLM's passes run in the plan's order. The encoders' passes keep their order too, but may run earlier than the
plan puts them: when the rank would wait for a message, it runs the next encoder passes whose inputs are here
instead (``fill_waits``), since a peer running late would otherwise leave it idle beside encoder work it may
already do. An encoder pass run earlier only brings its features forward (EF_i ≤ F_i still holds), and a
backward pass still starts after the LLM's gradients for it arrive (EB_i ≥ B_i), so the training is the same,
operation for operation (for models that draw random numbers, such as dropout, the draws come in another order).
Filling is greedy: a pass started just before the awaited message lands delays the LLM's next pass by up to one
encoder layer pass.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.distributed as dist

from fulcrum.runtime.arrivals import Arrivals
from fulcrum.runtime.device import device_of, refuse_untagged_backend
from fulcrum.runtime.encoder import EncoderStage
from fulcrum.runtime.plan import RuntimePlan
from fulcrum.runtime.split_backward import backward_input, backward_weight
from fulcrum.runtime.stage import StageModule
from fulcrum.runtime.timeline import COLLECTIVE, COMPUTE, P2P, Timeline

_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool,
           torch.uint8, torch.int8, torch.int16]
_HEADER = 64  # int64 slots: tensor count, then dtype, rank and sizes of each tensor
_MAX_TENSORS = 7
_CANNOT_SEND = -1  # a header's tensor count when the sender could not send what it was to: the receiver raises


def _header(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    fields = [len(tensors)]
    for t in tensors:
        if t.dtype not in _DTYPES:
            raise ValueError(f"a {t.dtype} tensor between stages: the runtime carries "
                             f"{', '.join(str(d).removeprefix('torch.') for d in _DTYPES)}")
        fields += [_DTYPES.index(t.dtype), t.dim(), *t.shape]
    if len(fields) > _HEADER or len(tensors) > _MAX_TENSORS:
        raise ValueError(f"{len(tensors)} tensors between stages: at most {_MAX_TENSORS}, of modest rank")
    return torch.tensor(fields + [0] * (_HEADER - len(fields)), dtype=torch.int64, device=device)


def message_parts(messages: Sequence[tuple], send: Callable[[torch.Tensor, int, int, int], None],
                  device: torch.device = torch.device("cpu")) -> list[tuple]:
    """``(micro_batch, peer, tensors)`` messages as ``(micro_batch, peer, [header, *tensors])``, checked together:
    when any message's tensors cannot travel, every receiver is sent a header saying so (``send(tensor, peer,
    micro_batch, part)``, which must not block) and the error raised, so that none of them waits for a message
    that will never come. Headers are made on ``device``, the rank's."""
    try:
        return [(mb, peer, [_header(tensors, device), *[t.contiguous() for t in tensors]])
                for mb, peer, tensors in messages]
    except ValueError:
        told = torch.zeros(_HEADER, dtype=torch.int64, device=device)
        told[0] = _CANNOT_SEND
        for mb, peer, _ in messages:
            send(told, peer, mb, 0)
        raise


def _buffers(header: torch.Tensor) -> list[torch.Tensor]:
    fields = header.tolist()
    if fields[0] == _CANNOT_SEND:
        raise RuntimeError("the sending rank could not send this message (its own error says why)")
    out, at = [], 1
    for _ in range(fields[0]):
        dtype, rank = _DTYPES[fields[at]], fields[at + 1]
        out.append(torch.empty(fields[at + 2: at + 2 + rank], dtype=dtype, device=header.device))
        at += 2 + rank
    return out


class ScheduleExecutor:
    """Executes ``plan.programs[pipeline_rank]`` over this rank's ``stages``. ``peers`` maps a pipeline rank to
    the global rank of the same data-parallel replica; ``reduce_gradients(stage)`` reduces a stage's gradients
    over the data-parallel group (the plan's gradient collective). With an encoder section, ``encoder`` is this
    rank's encoder stage and ``reduce_encoder_gradients()`` reduces its gradients over the encoder's replicas.
    ``fill_waits=False`` runs every encoder pass exactly where the plan puts it."""

    def __init__(self, plan: RuntimePlan, stages: Mapping[int, StageModule], pipeline_rank: int,
                 peers: Mapping[int, int], scaled_loss: Callable[[Any, torch.Tensor], torch.Tensor],
                 labels_key: str, timeline: Timeline, reduce_gradients: Callable[[int], None],
                 encoder: Optional[EncoderStage] = None, reduce_encoder_gradients: Optional[Callable[[], None]] = None,
                 fill_waits: bool = True):
        self.plan, self.stages, self.pipeline_rank = plan, stages, pipeline_rank
        self.program = plan.programs[pipeline_rank]
        self.peers, self.scaled_loss, self.labels_key = peers, scaled_loss, labels_key
        self.timeline, self.reduce_gradients = timeline, reduce_gradients
        self.last_stage = len(plan.stages) - 1
        self.encoder, self.reduce_encoder_gradients = encoder, reduce_encoder_gradients
        self.device = device_of([*stages.values(), *([encoder] if encoder is not None else [])])
        refuse_untagged_backend("ScheduleExecutor", self.device)
        layout = plan.encoder
        # With an encoder section the LLM's first stage takes the encoders' features, and sends their gradients
        # back when the encoders train.
        self.first_stage_receives = layout is not None
        self.first_stage_sends_back = layout is not None and any(
            i[0] == "encoder" and i[5] != "forward" for program in plan.programs for i in program)
        # A layer pass the schedule cut into kernel ranges runs whole at its last range.
        last = {}
        for at, i in enumerate(self.program):
            if i[0] == "encoder":
                last[tuple(i[1:6])] = at
        self.encoder_passes = sorted(last.values())
        self.encoder_pass_at = set(self.encoder_passes)
        if last and encoder is None:
            raise ValueError(f"pipeline rank {pipeline_rank}'s program runs encoder passes but it holds no encoder "
                             "stage")
        self.fill_waits = fill_waits and bool(self.encoder_passes)
        self._plan_transfers()

    # Messages are tagged by what they carry and the stage that receives them, so a send and its receive agree.
    def _tag(self, kind: str, receiving_stage: int, micro_batch: int, part: int) -> int:
        key = (receiving_stage * 2 + (kind == "gradient")) * self.plan.micro_batches + micro_batch
        return key * (_MAX_TENSORS + 1) + part

    def run(self, micro_batches: Sequence[Mapping[str, torch.Tensor]]) -> float:
        """Runs the program once; returns the sum of this rank's scaled micro-batch losses (0 off the last
        stage)."""
        self.batches = micro_batches
        self.loss = 0.0
        self.inbox: dict = {}
        self.outbox: dict = {}
        self.saved: dict = {}
        self.pending: list = []
        self.split: dict = {}  # (stage, micro-batch) -> what the BI pass kept for the W pass
        self.done: set = set()  # positions run ahead of their place in the program
        self.next_encoder_pass = 0  # index into encoder_passes
        self.passes_ahead = 0
        for at, source, tags in self.receive_posts:
            self.arrivals.post(at, source, tags)
        for at, instruction in enumerate(self.program):
            if at in self.done:
                continue
            op = instruction[0]
            if op == "F":
                self._forward(int(instruction[1]), int(instruction[2]))
            elif op in ("B", "BI", "W"):
                self._backward(op, int(instruction[1]), int(instruction[2]))
            elif op == "encoder":
                if at in self.encoder_pass_at:
                    self._run_encoder_pass(at)
            elif op == "send":
                self._send(at)
            elif op == "recv":
                self._recv(at)
            elif op == "collective" and len(instruction) > 4:  # over the encoder stage's replicas
                if instruction[2] == "gradients":
                    with self.timeline.span(f"{instruction[1]} encoder s{instruction[3]}", "collective",
                                            COLLECTIVE):
                        self.reduce_encoder_gradients()
            elif op == "collective":
                if instruction[2] == "gradients":
                    with self.timeline.span(f"{instruction[1]} s{instruction[3]}", "collective", COLLECTIVE,
                                            int(instruction[3])):
                        self.reduce_gradients(int(instruction[3]))
                # Parameter gathers: the runtime keeps whole parameters on every replica, nothing to gather.
            # "wave", "allocate" and "free" order or account memory; PyTorch's allocator does the rest.
        with self.timeline.span("wait sends", "send", P2P):
            for work, _ in self.pending:  # the tensor beside each work stays alive until its send completes
                work.wait()
        left = list(self.saved) + list(self.inbox) + list(self.outbox)
        if self.encoder is not None:
            left += [("encoder", *key) for key in self.encoder.pending()]
        left += [self.program[at] for at in self.arrivals.pending()]
        if left:
            raise RuntimeError("the schedule left work undone: " + ", ".join(map(str, left)))
        return self.loss

    def _take(self, key: tuple, local_key: tuple) -> tuple:
        """A stage's input or output gradient: received, or made by the neighbouring stage on this rank, which a
        schedule of one pipeline rank (interleaved over pp 1) passes on without a transfer."""
        if key not in self.inbox and local_key in self.outbox:
            return self.outbox.pop(local_key)
        return self.inbox.pop(key)

    def _forward(self, s: int, mb: int) -> None:
        batch = self.batches[mb]
        received = (self._take(("activation", s, mb), ("activation", s - 1, mb))
                    if s > 0 or self.first_stage_receives else ())
        received = tuple(t.requires_grad_() if t.is_floating_point() else t for t in received)
        with self.timeline.span(f"F s{s} mb{mb}", "forward", COMPUTE, s, mb):
            out = self.stages[s](*received, **batch)
            if s == self.last_stage:
                loss = self.scaled_loss(out, batch[self.labels_key])
                self.loss += float(loss.detach())
                self.saved[(s, mb)] = (received, (loss,), None)
            else:
                outs = out if isinstance(out, tuple) else (out,)
                self.saved[(s, mb)] = (received, outs, "pending")
                self.outbox[("activation", s, mb)] = tuple(o.detach() for o in outs)

    def _roots(self, s: int, mb: int):
        received, outs, grads = self.saved[(s, mb)]
        if s == self.last_stage:
            return received, [o for o in outs if o.requires_grad], None  # no root when all is frozen
        if grads == "pending":
            grads = self._take(("gradient", s, mb), ("gradient", s + 1, mb))
            self.saved[(s, mb)] = (received, outs, grads)
        pairs = [(o, g) for o, g in zip([o for o in outs if o.is_floating_point()], grads) if o.requires_grad]
        return received, [o for o, _ in pairs], [g for _, g in pairs]

    def _backward(self, op: str, s: int, mb: int) -> None:
        name = {"B": "backward", "BI": "backward_input", "W": "backward_weight"}[op]
        with self.timeline.span(f"{op} s{s} mb{mb}", name, COMPUTE, s, mb):
            received, roots, grads = self._roots(s, mb)
            inputs = [t for t in received if t.is_floating_point()]
            # A stage whose layers are all frozen has no weight gradients: its BI pass is its whole backward and
            # its W pass has nothing to do; a frozen first stage's outputs take no gradient at all (no roots).
            params = [q for q in self.stages[s].parameters() if q.requires_grad]
            if op == "B":
                if roots:
                    torch.autograd.backward(roots, grads)
                self.saved.pop((s, mb))
                input_grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in inputs]
            elif op == "BI":
                wanted = [t for t in inputs if t.requires_grad]
                if wanted and roots and params:
                    found, self.split[(s, mb)] = backward_input(roots, grads, wanted, params)
                elif wanted and roots:
                    found = torch.autograd.grad(roots, wanted, grads, allow_unused=True)
                else:  # the first stage: nothing to send back, the W pass does the whole backward
                    found = [None] * len(wanted)
                input_grads = [g if g is not None else torch.zeros_like(t) for t, g in zip(wanted, found)]
            else:  # W: the weight gradients the BI pass left for later
                pending = self.split.pop((s, mb), None)
                if pending is not None:
                    backward_weight(params, pending)
                elif roots and params:
                    torch.autograd.backward(roots, grads, inputs=params)
                self.saved.pop((s, mb))
                return
        if s > 0 or self.first_stage_sends_back:
            self.outbox[("gradient", s, mb)] = tuple(g.detach() for g in input_grads)

    # -- the encoder section ---------------------------------------------------------------------------------
    def _run_encoder_pass(self, at: int) -> None:
        # Passes run in program order: either here, or ahead of their place by _fill.
        assert self.encoder_passes[self.next_encoder_pass] == at, "encoder passes out of order"
        self.next_encoder_pass += 1
        i = self.program[at]
        self._encoder_pass(*(int(x) for x in i[1:5]), i[5])

    def _encoder_input(self, at: int) -> Optional[tuple]:
        """The mailbox key of what the encoder pass at ``at`` takes from another stage, if anything."""
        pipeline, stage, k, layer, pass_name = self.program[at][1:6]
        pipeline, stage, k, layer = int(pipeline), int(stage), int(k), int(layer)
        if pass_name == "forward":
            return ("encoder", "activation", pipeline, stage, k) if layer == self.encoder.first and stage > 0 else None
        return ("encoder", "gradient", pipeline, stage, k) if layer == self.encoder.end - 1 else None

    def _plan_transfers(self) -> None:
        """What the program's transfers are: each one's route, the remote receives (posted when a step starts)
        and, for filling waits, which instruction delivers each mailbox key, the encoders' sends, and where each
        stretch of encoder passes must stop (an encoder pass never runs ahead of a collective)."""
        self.arrivals = Arrivals(_HEADER, _buffers, self.device)
        self.routes = {at: self._route(i) for at, i in enumerate(self.program) if i[0] in ("send", "recv")}
        self.receive_posts, self.delivered_by, self.encoder_sends = [], {}, []
        me = self.peers[self.pipeline_rank]
        for at, (key, peer, peer_key, tag_stage, mb) in self.routes.items():
            i = self.program[at]
            if i[0] == "recv" and peer != me:
                tags = [self._tag(i[1], tag_stage, mb, part) for part in range(_MAX_TENSORS + 1)]
                self.receive_posts.append((at, peer, tags))
                self.delivered_by[key] = at
            elif i[0] == "send" and peer == me:
                self.delivered_by[peer_key] = at  # a local send puts the tensors in this rank's inbox
            if i[0] == "send" and key[0] == "encoder":
                self.encoder_sends.append(at)
        self.barrier_after = [len(self.program)] * len(self.program)
        for at in range(len(self.program) - 1, 0, -1):
            i = self.program[at]
            self.barrier_after[at - 1] = at if i[0] == "collective" else self.barrier_after[at]

    def _available(self, key) -> bool:
        """Whether ``key`` is in the inbox, or can be put there now without waiting."""
        if key in self.inbox:
            return True
        at = self.delivered_by.get(key)
        if at is None or at in self.done:
            return False
        i = self.program[at]
        if i[0] == "recv":
            if not self.arrivals.ready(at):
                return False
            self.done.add(at)
            self._recv(at)
        else:  # a local send: ready once the pass that feeds it has run
            if self.routes[at][0] not in self.outbox:
                return False
            self.done.add(at)
            self._send(at)
        return True

    def _fill(self, waiting_at: int, arrived: Callable[[], bool]) -> None:
        """Until ``arrived()``, runs the next encoder passes whose inputs are here, then sends what they made."""
        stop = self.barrier_after[waiting_at]
        while not arrived() and self.next_encoder_pass < len(self.encoder_passes):
            at = self.encoder_passes[self.next_encoder_pass]
            if at > stop:
                return
            key = self._encoder_input(at)
            # A pass that needs the awaited message waits with the rank.
            if key is not None and (self.delivered_by.get(key) == waiting_at or not self._available(key)):
                return
            self.done.add(at)
            self.passes_ahead += 1
            self._run_encoder_pass(at)
            for send in self.encoder_sends:
                if waiting_at < send < stop and send not in self.done and self.routes[send][0] in self.outbox:
                    self.done.add(send)
                    self._send(send)

    def _encoder_pass(self, pipeline: int, stage: int, k: int, layer: int, pass_name: str) -> None:
        layout = self.plan.encoder
        i = layout.llm_micro_batch[pipeline][k]  # whose images encoder micro-batch k carries
        enc = self.encoder
        if pass_name == "forward":
            received = self.inbox.pop(("encoder", "activation", pipeline, stage, k)) if (
                layer == enc.first and stage > 0) else None
            with self.timeline.span(f"encoder F s{stage} mb{i} L{layer}", "forward", COMPUTE, -1, i):
                out = enc.forward_layer(layer, k, self.batches[i], received)
            if out is not None:
                self.outbox[("encoder", "activation", pipeline, stage, k)] = out
        elif pass_name == "recompute":
            # The layer is checkpointed (its recompute mode): autograd runs its forward again inside the backward
            # that follows, so the schedule's recomputation is that backward's first part.
            return
        else:
            grads = self.inbox.pop(("encoder", "gradient", pipeline, stage, k)) if layer == enc.end - 1 else None
            with self.timeline.span(f"encoder B s{stage} mb{i} L{layer}", "backward", COMPUTE, -1, i):
                out = enc.backward_layer(layer, k, grads)
            if out is not None and stage > 0:
                self.outbox[("encoder", "gradient", pipeline, stage, k)] = out

    # -- transfers ----------------------------------------------------------------------------------------------
    def _route(self, instruction) -> tuple:
        """A send's or receive's (this side's mailbox key, the peer's global rank, the receiving side's mailbox
        key, the tag's stage and micro-batch). Encoder stages take tag stages after the LLM's, and every tag
        names the LLM micro-batch, which both sides know."""
        kind, s, mb, peer_stage = instruction[1], int(instruction[2]), int(instruction[3]), int(instruction[4])
        own_pipe = int(instruction[5]) if len(instruction) > 5 else -1
        peer_pipe = int(instruction[6]) if len(instruction) > 6 else -1
        layout = self.plan.encoder
        llm_stages = len(self.plan.stages)
        if own_pipe >= 0:
            key, llm_mb = ("encoder", kind, own_pipe, s, mb), layout.llm_micro_batch[own_pipe][mb]
        else:
            key, llm_mb = (kind, s, mb), mb
        sending = instruction[0] == "send"
        if peer_pipe >= 0:
            peer = self.peers[layout.rank_of(peer_pipe, peer_stage)]
            peer_key = ("encoder", kind, peer_pipe, peer_stage, layout.micro_batch_of(peer_pipe, llm_mb))
        else:
            peer = self.peers[peer_stage % self.plan.pp]
            peer_key = (kind, peer_stage, llm_mb)
        receiving_key, receiving_pipe = (peer_key, peer_pipe) if sending else (key, own_pipe)
        receiving_stage = receiving_key[3] if receiving_pipe >= 0 else receiving_key[1]
        tag_stage = llm_stages + receiving_stage if receiving_pipe >= 0 else receiving_stage
        return key, peer, receiving_key, tag_stage, llm_mb

    def _send(self, at: int) -> None:
        instruction = self.program[at]
        key, dst, peer_key, tag_stage, mb = self.routes[at]
        kind = instruction[1]
        tensors = self.outbox.pop(key)
        if dst == self.peers[self.pipeline_rank]:  # the receiving stage lives on this rank
            self.inbox[peer_key] = tuple(t.clone() for t in tensors)
            return
        with self.timeline.span(f"send s{instruction[2]} mb{mb}", "send", P2P, int(instruction[2]), mb):
            def isend(t: torch.Tensor, peer: int, micro_batch: int, part: int) -> None:
                self.pending.append((dist.isend(t, peer, tag=self._tag(kind, tag_stage, micro_batch, part)), t))

            ((_, _, parts),) = message_parts([(mb, dst, tensors)], isend, self.device)
            for i, t in enumerate(parts):
                if t.numel():  # the header tells the receiver of empty tensors
                    self.pending.append((dist.isend(t, dst, tag=self._tag(kind, tag_stage, mb, i)), t))

    def _recv(self, at: int) -> None:
        instruction = self.program[at]
        key, src, _, _, mb = self.routes[at]
        if src == self.peers[self.pipeline_rank]:
            return  # delivered by the local send
        if self.fill_waits and not self.arrivals.ready(at):
            self._fill(at, lambda: self.arrivals.ready(at))
        with self.timeline.span(f"recv s{instruction[2]} mb{mb}", "recv", P2P, int(instruction[2]), mb):
            self.inbox[key] = self.arrivals.take(at)
