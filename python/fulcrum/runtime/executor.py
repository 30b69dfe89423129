"""Runs a pipeline rank's program from a Fulcrum schedule, instruction by instruction.

For the orders no public ``torch.distributed.pipelining`` schedule gives (interleaved chunks placed as the plan
says, backward passes split into input and weight gradients, custom programs, the encoders' passes in the LLM's
bubbles), this follows the plan exactly:
``F``/``B``/``BI``/``W`` compute, ``send``/``recv`` as ``torch.distributed`` point-to-point messages, gradient
collectives over the data-parallel group. Activations keep whatever shape each micro-batch has: every transfer
carries a small header with its tensors' shapes, so nothing is padded that the model does not pad itself.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.distributed as dist

from fulcrum.runtime.encoder import EncoderStage
from fulcrum.runtime.plan import RuntimePlan
from fulcrum.runtime.split_backward import backward_input, backward_weight
from fulcrum.runtime.stage import StageModule
from fulcrum.runtime.timeline import COLLECTIVE, COMPUTE, P2P, Timeline

_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool]
_HEADER = 64  # int64 slots: tensor count, then dtype, rank and sizes of each tensor
_MAX_TENSORS = 7


def _header(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    fields = [len(tensors)]
    for t in tensors:
        fields += [_DTYPES.index(t.dtype), t.dim(), *t.shape]
    if len(fields) > _HEADER or len(tensors) > _MAX_TENSORS:
        raise ValueError("activations between stages: at most 7 tensors of modest rank")
    return torch.tensor(fields + [0] * (_HEADER - len(fields)), dtype=torch.int64)


def _buffers(header: torch.Tensor) -> list[torch.Tensor]:
    fields = header.tolist()
    out, at = [], 1
    for _ in range(fields[0]):
        dtype, rank = _DTYPES[fields[at]], fields[at + 1]
        out.append(torch.empty(fields[at + 2: at + 2 + rank], dtype=dtype))
        at += 2 + rank
    return out


class ScheduleExecutor:
    """Executes ``plan.programs[pipeline_rank]`` over this rank's ``stages``. ``peers`` maps a pipeline rank to
    the global rank of the same data-parallel replica; ``reduce_gradients(stage)`` reduces a stage's gradients
    over the data-parallel group (the plan's gradient collective). With an encoder section, ``encoder`` is this
    rank's encoder stage and ``reduce_encoder_gradients()`` reduces its gradients over the encoder's replicas."""

    def __init__(self, plan: RuntimePlan, stages: Mapping[int, StageModule], pipeline_rank: int,
                 peers: Mapping[int, int], scaled_loss: Callable[[Any, torch.Tensor], torch.Tensor],
                 labels_key: str, timeline: Timeline, reduce_gradients: Callable[[int], None],
                 encoder: Optional[EncoderStage] = None, reduce_encoder_gradients: Optional[Callable[[], None]] = None):
        self.plan, self.stages, self.pipeline_rank = plan, stages, pipeline_rank
        self.program = plan.programs[pipeline_rank]
        self.peers, self.scaled_loss, self.labels_key = peers, scaled_loss, labels_key
        self.timeline, self.reduce_gradients = timeline, reduce_gradients
        self.last_stage = len(plan.stages) - 1
        self.encoder, self.reduce_encoder_gradients = encoder, reduce_encoder_gradients
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
        self.encoder_pass_at = set(last.values())
        if last and encoder is None:
            raise ValueError(f"pipeline rank {pipeline_rank}'s program runs encoder passes but it holds no encoder "
                             "stage")

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
        for at, instruction in enumerate(self.program):
            op = instruction[0]
            if op == "F":
                self._forward(int(instruction[1]), int(instruction[2]))
            elif op in ("B", "BI", "W"):
                self._backward(op, int(instruction[1]), int(instruction[2]))
            elif op == "encoder":
                if at in self.encoder_pass_at:
                    self._encoder_pass(*(int(x) for x in instruction[1:5]), instruction[5])
            elif op == "send":
                self._send(instruction)
            elif op == "recv":
                self._recv(instruction)
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
        if left:
            raise RuntimeError("the schedule left work undone: " + ", ".join(map(str, left)))
        return self.loss

    def _forward(self, s: int, mb: int) -> None:
        batch = self.batches[mb]
        received = self.inbox.pop(("activation", s, mb)) if s > 0 or self.first_stage_receives else ()
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
            return received, list(outs), None
        if grads == "pending":
            grads = self.inbox.pop(("gradient", s, mb))
            self.saved[(s, mb)] = (received, outs, grads)
        pairs = [(o, g) for o, g in zip([o for o in outs if o.is_floating_point()], grads) if o.requires_grad]
        return received, [o for o, _ in pairs], [g for _, g in pairs]

    def _backward(self, op: str, s: int, mb: int) -> None:
        name = {"B": "backward", "BI": "backward_input", "W": "backward_weight"}[op]
        with self.timeline.span(f"{op} s{s} mb{mb}", name, COMPUTE, s, mb):
            received, roots, grads = self._roots(s, mb)
            inputs = [t for t in received if t.is_floating_point()]
            if op == "B":
                torch.autograd.backward(roots, grads)
                self.saved.pop((s, mb))
                input_grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in inputs]
            elif op == "BI":
                wanted = [t for t in inputs if t.requires_grad]
                params = [q for q in self.stages[s].parameters() if q.requires_grad]
                if wanted:
                    found, self.split[(s, mb)] = backward_input(roots, grads, wanted, params)
                else:  # the first stage: nothing to send back, the W pass does the whole backward
                    found = ()
                input_grads = [g if g is not None else torch.zeros_like(t) for t, g in zip(wanted, found)]
            else:  # W: the weight gradients the BI pass left for later
                params = [q for q in self.stages[s].parameters() if q.requires_grad]
                pending = self.split.pop((s, mb), None)
                if pending is not None:
                    backward_weight(params, pending)
                else:
                    torch.autograd.backward(roots, grads, inputs=params)
                self.saved.pop((s, mb))
                return
        if s > 0 or self.first_stage_sends_back:
            self.outbox[("gradient", s, mb)] = tuple(g.detach() for g in input_grads)

    # -- the encoder section ---------------------------------------------------------------------------------
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

    def _send(self, instruction) -> None:
        key, dst, peer_key, tag_stage, mb = self._route(instruction)
        kind = instruction[1]
        tensors = self.outbox.pop(key)
        if dst == self.peers[self.pipeline_rank]:  # the receiving stage lives on this rank
            self.inbox[peer_key] = tuple(t.clone() for t in tensors)
            return
        with self.timeline.span(f"send s{instruction[2]} mb{mb}", "send", P2P, int(instruction[2]), mb):
            parts = [_header(tensors), *[t.contiguous() for t in tensors]]
            for i, t in enumerate(parts):
                if t.numel():  # the header tells the receiver of empty tensors
                    self.pending.append((dist.isend(t, dst, tag=self._tag(kind, tag_stage, mb, i)), t))

    def _recv(self, instruction) -> None:
        key, src, _, tag_stage, mb = self._route(instruction)
        kind = instruction[1]
        if src == self.peers[self.pipeline_rank]:
            return  # delivered by the local send
        with self.timeline.span(f"recv s{instruction[2]} mb{mb}", "recv", P2P, int(instruction[2]), mb):
            header = torch.empty(_HEADER, dtype=torch.int64)
            dist.recv(header, src, tag=self._tag(kind, tag_stage, mb, 0))
            tensors = _buffers(header)
            for i, t in enumerate(tensors):
                if t.numel():
                    dist.recv(t, src, tag=self._tag(kind, tag_stage, mb, i + 1))
        self.inbox[key] = tuple(tensors)
