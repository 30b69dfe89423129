"""Runs a Fulcrum plan's training step on PyTorch's own distributed engine.

Pure data parallelism runs through DistributedDataParallel; GPipe and 1F1B pipelines through
``torch.distributed.pipelining``'s public schedules; any other order the plan needs (interleaved chunks, split
backward passes, custom programs) through :class:`ScheduleExecutor`, which follows the plan's instructions with
``torch.distributed`` point-to-point and collective operations. Losses are normalised by the step's global count
of loss tokens, so the gradient is that of the token mean over every rank and micro-batch, whatever the plan.
"""

from __future__ import annotations

import numbers
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn

from fulcrum.runtime.coverage import warn_parameters_outside
from fulcrum.runtime.device import device_of, refuse_untagged_backend
from fulcrum.runtime.encoder import EncoderStage
from fulcrum.runtime.executor import ScheduleExecutor
from fulcrum.runtime.plan import PlanSource, RuntimePlan
from fulcrum.runtime.replicas import broadcast_from, destroy_groups
from fulcrum.runtime.stage import StageModule
from fulcrum.runtime.timeline import COLLECTIVE, COMPUTE, Event, Timeline

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class StepResult:
    loss: float             # the step's loss: mean over its loss tokens on every rank (the same on all ranks)
    step_tokens: int        # loss tokens of the step, every rank and micro-batch
    seconds: float          # this rank's forward, backward and gradient reduction, wall clock
    compute_seconds: float  # of which forward and backward compute
    wait_seconds: float     # the rest: waiting for inputs, gradients and other replicas, communication
    encoder_passes_ahead: int = 0  # encoder layer passes run before their place in the plan, to fill a wait


def _torch_pipeline_order(kind: str, pp: int, rank: int, micro_batches: int) -> list[tuple[str, int]]:
    """The compute order ScheduleGPipe and Schedule1F1B run on pipeline rank ``rank``."""
    if kind == "gpipe":
        return [("F", m) for m in range(micro_batches)] + [("B", m) for m in range(micro_batches)]
    warmup = min(micro_batches, pp - rank)
    order = [("F", m) for m in range(warmup)]
    forward = warmup
    for backward in range(micro_batches):
        order.append(("B", backward))
        if forward < micro_batches:
            order.append(("F", forward))
            forward += 1
    return order


def _program_order(program: Sequence[Sequence[Any]]) -> list[tuple[str, int]]:
    return [(str(i[0]), int(i[2])) for i in program if i[0] in ("F", "B", "BI", "W")]


def refuse_parameters_across_ranks(model: nn.Module, plan: RuntimePlan) -> None:
    """A parameter held by layers of stages on two pipeline ranks (an embedding tied to the LM head of a last
    stage on another rank) would be two copies, each rank stepping its own gradient: they would train apart. Every
    rank holds the whole model, so each finds the same sharing and refuses alike, before any group is used."""
    ranks_of: dict = {}
    names: dict = {}  # each parameter by its first name
    for name, q in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(q), name)
    for r in range(plan.pp):
        ranges = [plan.stages[s] for s in plan.stages_of(r)]
        if plan.encoder is not None:
            # An encoder stage's copies on the ranks of its encoder pipelines are kept equal by its group's
            # all-reduce: counted on its first pipeline's rank alone.
            e = plan.encoder.stage_on(r)
            if plan.encoder.rank_of(0, e) == r:
                ranges.append(plan.encoder.stages[e])
        for first, end in ranges:
            for layer in range(first, end):
                for q in model.layers[layer].parameters():
                    ranks_of.setdefault(id(q), set()).add(r)
    for q_id, ranks in ranks_of.items():
        if len(ranks) > 1:
            raise ValueError(f"{plan.where}: parameter {names.get(q_id, '?')} is used by layers on pipeline ranks "
                             f"{sorted(ranks)}, whose copies would train apart: untie it, or place the layers "
                             "sharing it in stages of one rank")


class Runtime:
    """A training step of ``model`` as ``plan`` lays it out over the ranks of the default process group.

    ``model.layers`` is the layer chain the plan's stage ranges index (the flattened layers of the Fulcrum model,
    components in order); each layer is ``layer(state, batch) -> state`` (see :class:`StageModule`).
    ``loss_fn(output, labels)`` returns the *summed* loss of a micro-batch, ``labels`` being ``batch[labels_key]``.
    Without a plan, the model is replicated on every rank (pure data parallelism).

    Ranks: pipeline rank ``rank // dp``, data-parallel rank ``rank % dp`` (pipeline rank slowest, as in
    Megatron-LM). Each rank holds only its stages' layers; ``parameters()`` are what its optimizer updates.
    A plan with an encoder section (``fulcrum plan --encoders bubbles``) also gives each rank one stage of the
    encoders' own plan, whose passes the executor runs in the LLM pipeline's bubbles: where the plan puts them, or
    earlier when the rank would otherwise wait for a message (``fill_waits``, see :class:`ScheduleExecutor`).
    ``find_unused_parameters`` is passed to DistributedDataParallel (pure data parallelism): True, the default,
    lets a micro-batch leave parameters unused; False saves DDP a walk over the autograd graph each step where
    every micro-batch uses every parameter. ``broadcast_buffers`` (True, the default, as in DistributedDataParallel)
    gives every replica of a stage its first replica's buffers at the start of each step, whichever engine runs.
    """

    def __init__(self, model: nn.Module, plan: Optional[PlanSource] = None, loss_fn: Optional[LossFn] = None, *,
                 micro_batches: Optional[int] = None, labels_key: str = "labels", ignore_index: int = -100,
                 engine: str = "auto", timeline: bool = False, fill_waits: bool = True,
                 find_unused_parameters: bool = True, broadcast_buffers: bool = True):
        if loss_fn is None:
            raise ValueError("loss_fn is required: it returns a micro-batch's summed loss")
        initialized = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if initialized else 1
        self.rank = dist.get_rank() if initialized else 0
        layers = len(model.layers)
        if plan is None:
            self.plan = RuntimePlan.data_parallel(layers, micro_batches or 1, self.world_size)
        else:
            self.plan = RuntimePlan.load(plan)
        p = self.plan
        if p.layers != layers:
            raise ValueError(f"{p.where}: the plan covers {p.layers} layers but the model has {layers}")
        if p.world_size != self.world_size:
            raise ValueError(f"{p.where}: the plan needs DP {p.dp} × PP {p.pp} = {p.world_size} ranks, "
                             f"but {self.world_size} are running")
        if micro_batches is not None and micro_batches != p.micro_batches:
            raise ValueError(f"micro_batches {micro_batches} differs from the plan's {p.micro_batches} ({p.where})")
        warn_parameters_outside(model, model.layers, "model.layers")
        self.engine = self._choose_engine(engine)
        if self.engine == "executor":
            refuse_untagged_backend(f"{p.where}: Fulcrum's executor, which runs this plan,", device_of([model]))
        self.pipeline_rank, self.dp_rank = divmod(self.rank, p.dp)
        self.loss_fn, self.labels_key, self.ignore_index = loss_fn, labels_key, ignore_index
        self.timeline = Timeline(timeline)
        self.fill_waits = fill_waits
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self._own_groups: list = []  # the process groups this runtime made, which close() destroys
        self._replica_buffers: list = []  # (buffers, first replica's rank, group) that _sync_buffers broadcasts
        self._closed = False
        self._dp_group, self._pp_group = self._make_groups() if initialized else (None, None)
        self._encoder_group = self._make_encoder_group() if initialized and p.encoder is not None else None

        refuse_parameters_across_ranks(model, p)
        self.stage_ids = p.stages_of(self.pipeline_rank)
        last = len(p.stages) - 1
        self.stages = {s: StageModule(model, *p.stages[s], p.recompute, pad_output=s != last) for s in self.stage_ids}
        self.encoder = None
        if p.encoder is not None:
            program = p.programs[self.pipeline_rank]
            trains = any(i[0] == "encoder" and i[5] != "forward" for i in program)
            self.encoder = EncoderStage(model, *p.encoder.stages[p.encoder.stage_on(self.pipeline_rank)],
                                        p.recompute, trains)
        # Every tensor the runtime makes sits beside this rank's layers (NCCL on GPUs takes only those).
        self.device = device_of([*self.stages.values(), *([self.encoder] if self.encoder is not None else [])])
        self._build_engine()
        if initialized:
            self._start_replicas_equal()

    # -- set-up -------------------------------------------------------------------------------------------------
    def _make_groups(self):
        p = self.plan
        dp_group = pp_group = None
        if p.dp > 1 and p.pp > 1:
            # Every rank creates every group, in the same order, as new_group requires.
            for q in range(p.pp):
                g = dist.new_group([q * p.dp + d for d in range(p.dp)])
                self._own_groups.append(g)
                if q == self.pipeline_rank:
                    dp_group = g
            for d in range(p.dp):
                g = dist.new_group([q * p.dp + d for q in range(p.pp)])
                self._own_groups.append(g)
                if d == self.dp_rank:
                    pp_group = g
        else:
            dp_group = dist.group.WORLD if p.dp > 1 else None
            pp_group = dist.group.WORLD if p.pp > 1 else None
        return dp_group, pp_group

    def _make_encoder_group(self):
        """The replicas of this rank's encoder stage: every encoder pipeline's, in every data-parallel replica."""
        p, layout = self.plan, self.plan.encoder
        mine = None
        self._encoder_source = self.rank
        for e in range(layout.pp):
            ranks = sorted(layout.rank_of(j, e) * p.dp + d for j in range(layout.pipelines) for d in range(p.dp))
            if len(ranks) == 1:
                group = None
            elif len(ranks) == self.world_size:
                group = dist.group.WORLD
            else:
                group = dist.new_group(ranks)  # every rank creates every group, in the same order
                self._own_groups.append(group)
            if self.rank in ranks:
                mine, self._encoder_source = group, ranks[0]
        return mine

    def _start_replicas_equal(self) -> None:
        """Every replica of a stage (and of an encoder stage) starts from its first replica's weights, as DDP makes
        its replicas: a model built with another seed on some rank would otherwise train apart without a word."""
        p = self.plan
        if p.dp > 1 and self.engine != "ddp":  # DistributedDataParallel broadcasts its module itself
            buffers = [t for s in self.stage_ids for t in self.stages[s].buffers()]
            tensors = [t for s in self.stage_ids for t in self.stages[s].parameters()] + buffers
            broadcast_from(tensors, self.pipeline_rank * p.dp, self._dp_group)
            if buffers:
                self._replica_buffers.append((buffers, self.pipeline_rank * p.dp, self._dp_group))
        if self._encoder_group is not None:
            buffers = list(self.encoder.buffers())
            broadcast_from([*self.encoder.parameters(), *buffers], self._encoder_source, self._encoder_group)
            if buffers:
                self._replica_buffers.append((buffers, self._encoder_source, self._encoder_group))

    def _sync_buffers(self) -> None:
        """Every replica's buffers from its first replica's, as DDP's ``broadcast_buffers`` before a forward (DDP
        does it itself). The buffers are the ones the runtime was made with, as DDP lists its module's once."""
        for buffers, source, group in self._replica_buffers:
            broadcast_from(buffers, source, group)

    def _choose_engine(self, requested: str) -> str:
        p = self.plan
        if requested not in ("auto", "ddp", "torch", "executor"):
            raise ValueError(f"engine must be auto, ddp, torch or executor, got {requested!r}")
        if p.encoder is not None:
            natural = "executor"  # only Fulcrum's executor runs the encoders' passes in the LLM's bubbles
        elif p.pp == 1 and p.vpp == 1:
            natural = "ddp"
        elif (p.vpp == 1 and p.pipeline in ("gpipe", "1f1b") and all(
                _program_order(p.programs[r]) == _torch_pipeline_order(p.pipeline, p.pp, r, p.micro_batches)
                for r in range(p.pp))):
            natural = "torch"
        else:
            natural = "executor"
        if requested == "auto":
            return natural
        if requested == "ddp" and natural != "ddp":
            raise ValueError("engine 'ddp' runs plans without a pipeline")
        if requested == "torch" and natural != "torch":
            if natural == "ddp":
                raise ValueError("engine 'torch' runs pipelines; this plan has none: run it on 'ddp' (or 'executor')")
            if p.encoder is not None:
                raise ValueError("engine 'torch' cannot run the encoders in the LLM's bubbles: run it on 'executor'")
            raise ValueError(f"no public torch.distributed.pipelining schedule runs this plan's {p.pipeline} order")
        return requested

    def _build_engine(self):
        p = self.plan
        if self.engine == "ddp":
            self._wrap_ddp()
        elif self.engine == "torch":
            # Made at the first step, from its micro-batches' shapes, which PipelineStage keeps.
            self._torch_shapes = None
            self._pipe_stage = self._schedule = None
        else:
            peers = {q: q * p.dp + self.dp_rank for q in range(p.pp)}
            self._reduced_at = self._gradient_owners()
            self._executor = ScheduleExecutor(self.plan, self.stages, self.pipeline_rank, peers, self._scaled_loss,
                                              self.labels_key, self.timeline, self._reduce_stage_gradients,
                                              self.encoder, self._reduce_encoder_gradients, self.fill_waits)

    def _wrap_ddp(self) -> None:
        """The data-parallel engine's module: the stage itself, or under DDP over the replicas. DDP reduces only
        the parameters that required a gradient when it was made, so it is made again when that set changes
        (layers unfrozen or frozen between steps, on every replica alike)."""
        (stage,) = self.stages.values()
        self._module = stage
        self._compute_end = None
        self._ddp_trains = tuple(q.requires_grad for q in stage.parameters())
        if self.plan.dp > 1:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
            from torch.nn.parallel import DistributedDataParallel

            # A micro-batch may leave parameters unused (text-only samples skip the image encoder): DDP must
            # look for them, or its reduction waits for gradients that never come.
            self._module = DistributedDataParallel(stage, process_group=self._dp_group,
                                                   find_unused_parameters=self.find_unused_parameters,
                                                   broadcast_buffers=self.broadcast_buffers)

            def hook(state, bucket):
                # A bucket is ready when its gradients are computed: the last one marks the end of this
                # rank's backward compute; what follows is reduction and waiting for other replicas.
                self._compute_end = time.perf_counter()
                return allreduce_hook(state, bucket)

            self._module.register_comm_hook(self._dp_group, hook)

    def _build_torch_pipeline(self, micro_batch) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        p = self.plan
        (s,) = self.stage_ids
        inputs, outputs = self._stage_example_args(micro_batch)
        self._pipe_stage = PipelineStage(self.stages[s], s, p.pp, self.device, input_args=inputs, output_args=outputs,
                                         group=self._pp_group)
        cls = ScheduleGPipe if p.pipeline == "gpipe" else Schedule1F1B
        self._schedule = cls(self._pipe_stage, p.micro_batches, loss_fn=self._scaled_loss, scale_grads=False)
        self._instrument_pipeline_stage(s)

    def _stage_example_args(self, micro_batch):
        """This rank's stage's example inputs and outputs for PipelineStage, from a forward of ``micro_batch``
        through the pipeline in turn: its inputs received from the stage before, its outputs sent to the next.
        Without them PipelineStage infers them itself, running every stage after the first on uninitialised
        inputs (token ids out of an embedding's range) and counting that forward in BatchNorm's statistics and
        the random number generators. Here the stage's buffers and the generators are put back as they were."""
        p = self.plan
        (s,) = self.stage_ids
        stage = self.stages[s]

        def peer(q: int) -> int:  # the global rank of pipeline rank q of this replica
            return q * p.dp + self.dp_rank

        received = ()
        if s > 0:
            metas = [None]
            dist.recv_object_list(metas, src=peer(s - 1), group=self._pp_group, device=self.device)
            tensors = []
            for shape, dtype, requires_grad in metas[0]:
                t = torch.empty(shape, dtype=dtype, device=self.device)
                dist.recv(t, src=peer(s - 1), group=self._pp_group)
                tensors.append(t.requires_grad_(requires_grad))
            received = tuple(tensors)
        buffers = [(b, b.detach().clone()) for b in stage.buffers()]
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        try:
            out = stage(*received, **micro_batch)
        finally:
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)
        outputs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if s < p.pp - 1:
            dist.send_object_list([[(tuple(t.shape), t.dtype, t.requires_grad) for t in outputs]], dst=peer(s + 1),
                                  group=self._pp_group, device=self.device)
            for t in outputs:
                dist.send(t.detach().contiguous(), dst=peer(s + 1), group=self._pp_group)
        return received, outputs

    def _instrument_pipeline_stage(self, s: int):
        stage, timeline = self._pipe_stage, self.timeline
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

        def timed_forward(chunk, *args, **kwargs):
            with timeline.span(f"F s{s} mb{chunk}", "forward", COMPUTE, s, chunk):
                return forward(chunk, *args, **kwargs)

        def timed_backward(chunk, *args, **kwargs):
            with timeline.span(f"B s{s} mb{chunk}", "backward", COMPUTE, s, chunk):
                return backward(chunk, *args, **kwargs)

        stage.forward_one_chunk, stage.backward_one_chunk = timed_forward, timed_backward

    # -- the end ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroys the process groups this runtime made (the default group stays), after which it runs no more
        steps. Call it on every rank, as new_group was: a job that makes a runtime per phase or per trial would
        otherwise hold every earlier one's communicators (sockets with gloo, GPU memory with NCCL) until it ends.
        A runtime used as a context manager closes itself."""
        if self._closed:
            return
        self._closed = True
        destroy_groups(self._own_groups)
        # Nothing keeps a destroyed group alive: its communicator goes once the last reference does (DDP, the
        # pipelining stage and schedule, the executor each hold one).
        self._own_groups, self._replica_buffers = [], []
        self._dp_group = self._pp_group = self._encoder_group = None
        self._module = self._pipe_stage = self._schedule = self._executor = None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- a step -------------------------------------------------------------------------------------------------
    def parameters(self):
        """This rank's parameters, each once (a parameter shared by two of its stages is one)."""
        chained = list(self.encoder.parameters()) if self.encoder is not None else []
        for s in self.stage_ids:
            chained.extend(self.stages[s].parameters())
        yield from dict.fromkeys(chained)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> float:
        """Scales this rank's gradients so that the whole model's gradient norm is at most ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_`` does on one process, and returns that norm (before clipping): the same on
        every rank. Megatron-LM clips by the norm over all pipeline stages; each stage clipping by its own norm would
        scale the stages differently. Call it after ``step`` (the gradients are then reduced over the replicas),
        before the optimizer's step. Each parameter counts once: an encoder stage replicated over encoder pipelines
        counts on its first pipeline's rank."""
        p = self.plan
        counted = [q for s in self.stage_ids for q in self.stages[s].parameters()]
        if self.encoder is not None and p.encoder.rank_of(0, p.encoder.stage_on(self.pipeline_rank)) == \
                self.pipeline_rank:
            counted.extend(self.encoder.parameters())
        grads = [q.grad.detach() for q in dict.fromkeys(counted) if q.grad is not None]
        norm_type = float(norm_type)
        infinite = norm_type == float("inf")
        if grads:
            norms = torch.stack([torch.linalg.vector_norm(g, norm_type).to(torch.float64) for g in grads])
            local = norms.max() if infinite else (norms ** norm_type).sum()
        else:
            local = torch.zeros((), dtype=torch.float64)
        local = local.to(self.device)
        if self._pp_group is not None:
            dist.all_reduce(local, op=dist.ReduceOp.MAX if infinite else dist.ReduceOp.SUM, group=self._pp_group)
        total = float(local) if infinite else float(local) ** (1.0 / norm_type)
        scale = max_norm / (total + 1e-6)
        if scale < 1:
            for q in self.parameters():
                if q.grad is not None:
                    q.grad.detach().mul_(scale)
        return total

    def modules(self) -> Mapping[int, StageModule]:
        """This rank's stages by virtual stage index."""
        return dict(self.stages)

    def _scaled_loss(self, output, labels):
        # Pipeline schedules may call this outside the step's micro-batches (shape inference on the first
        # step), so the step's loss is summed from what each engine reports, not here.
        return self.loss_fn(output, labels) * self._loss_scale

    def _count_step_tokens(self, micro_batches) -> int:
        local = sum(int((mb[self.labels_key] != self.ignore_index).sum()) for mb in micro_batches)
        if self._dp_group is None:
            return local
        t = torch.tensor([local], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, group=self._dp_group)
        return int(t.item())

    def step(self, micro_batches: Sequence[Mapping[str, torch.Tensor]], step_tokens: Optional[int] = None) -> StepResult:
        """Forward and backward of one optimizer step over this rank's ``micro_batches`` (the plan's number of
        them; every pipeline rank of a replica passes the same ones), leaving the gradients of
        ``parameters()`` reduced over data-parallel replicas. ``step_tokens``: the step's loss tokens over every
        rank (a sampler's ``info.step_tokens``); counted from the labels with one all-reduce when omitted."""
        p = self.plan
        if self._closed:
            raise RuntimeError("the runtime is closed: make a new one to run more steps")
        if len(micro_batches) != p.micro_batches:
            raise ValueError(f"the plan runs {p.micro_batches} micro-batches per step, got {len(micro_batches)}")
        if step_tokens is None:
            step_tokens = self._count_step_tokens(micro_batches)
        if isinstance(step_tokens, bool) or not isinstance(step_tokens, numbers.Integral):
            raise TypeError(f"step_tokens must be a whole count of loss tokens, got {step_tokens!r}")
        step_tokens = int(step_tokens)
        if step_tokens <= 0:
            raise ValueError("the step has no loss tokens")
        self.timeline.begin_step()
        self._local_loss = 0.0
        # DDP averages gradients over replicas; the other engines sum them.
        replicas = p.dp if self.engine == "ddp" else 1
        self._loss_scale = replicas / step_tokens
        start = time.perf_counter()
        if self.broadcast_buffers:
            self._sync_buffers()
        if self.engine == "ddp":
            compute = self._step_ddp(micro_batches)
        else:
            # Set aside even where nothing is reduced over replicas, so that a step that fails can put them back.
            earlier = self._set_aside_earlier_gradients()
            try:
                if self.engine == "torch":
                    self._step_torch(micro_batches)
                else:
                    self._local_loss = self._executor.run(micro_batches)
                compute = self.timeline.busy_seconds(COMPUTE)
                if self.engine == "torch" and p.dp > 1:
                    with self.timeline.span("all_reduce gradients", "collective", COLLECTIVE):
                        self._all_reduce_gradients(self.parameters())
            except BaseException:
                # A step that fails leaves the gradients as they were, not half of its own: none where there were
                # none.
                for q in self.parameters():
                    q.grad = None
                for q, grad in earlier:
                    q.grad = grad
                raise
            for q, grad in earlier:
                if q.grad is not None:
                    grad.add_(q.grad)
                q.grad = grad
        seconds = time.perf_counter() - start
        loss = torch.tensor([self._local_loss / replicas], dtype=torch.float64, device=self.device)
        if self.world_size > 1:
            dist.all_reduce(loss)
        ahead = self._executor.passes_ahead if self.engine == "executor" else 0
        return StepResult(loss=float(loss.item()), step_tokens=int(step_tokens), seconds=seconds,
                          compute_seconds=compute, wait_seconds=max(0.0, seconds - compute),
                          encoder_passes_ahead=ahead)

    def _set_aside_earlier_gradients(self) -> list:
        """Takes out the gradients this rank's parameters hold from earlier steps (accumulated, not zeroed), to be
        added back once this step's are reduced: they are already reduced, and the sum over replicas would add
        them once per replica. (DistributedDataParallel averages, which leaves them as they are.)"""
        earlier = []
        for q in self.parameters():
            if q.grad is not None:
                earlier.append((q, q.grad))
                q.grad = None
        return earlier

    def _step_ddp(self, micro_batches) -> float:
        (stage,) = self.stages.values()
        if tuple(q.requires_grad for q in stage.parameters()) != self._ddp_trains:
            self._wrap_ddp()
        module, timeline = self._module, self.timeline
        self._compute_end = None
        compute = 0.0
        last = len(micro_batches) - 1
        for j, mb in enumerate(micro_batches):
            sync = nullcontext() if (j == last or not hasattr(module, "no_sync")) else module.no_sync()
            with sync:
                t0 = timeline.now()
                loss = self._scaled_loss(module(**mb), mb[self.labels_key])
                self._local_loss += float(loss.detach())
                t1 = timeline.now()
                loss.backward()
                t2 = timeline.now()
            if j == last and self._compute_end is not None:
                # The last backward also waited for its gradients' reduction: compute ends with the last bucket.
                reduced = t2
                t2 = min(t2, self._compute_end - timeline.origin)
                timeline.add(Event("all_reduce gradients", "collective", COLLECTIVE, t2, reduced))
            timeline.add(Event(f"F s0 mb{j}", "forward", COMPUTE, t0, t1, 0, j))
            timeline.add(Event(f"B s0 mb{j}", "backward", COMPUTE, t1, t2, 0, j))
            compute += t2 - t0
        return compute

    def _step_torch(self, micro_batches):
        batch = {}
        for k in micro_batches[0]:
            # torch.distributed.pipelining splits the step's batch back into micro-batches along the first
            # dimension of every entry.
            for mb in micro_batches:
                v = mb[k]
                if not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[0] == 0:
                    what = (f"a {type(v).__name__}" if not isinstance(v, torch.Tensor)
                            else "a 0-dimensional tensor" if v.dim() == 0 else f"a tensor of no rows, {tuple(v.shape)}")
                    raise ValueError(f"engine 'torch' splits every batch entry along its first dimension, but {k!r} "
                                     f"is {what}: give it rows, or use engine='executor', which passes entries as "
                                     "they are")
            shapes = {tuple(mb[k].shape) for mb in micro_batches}
            if len(shapes) != 1:
                raise ValueError(f"pipeline micro-batches need equal shapes, but {k!r} has {sorted(shapes)}: pack "
                                 "them to fixed caps")
            batch[k] = torch.cat([mb[k] for mb in micro_batches])
        # PipelineStage takes its buffers' shapes from the first step: another shape later would be received into
        # the wrong size (a gloo abort) or fail in backward. Every rank of the pipeline sees the same shapes.
        shapes = {k: tuple(v.shape) for k, v in micro_batches[0].items()}
        if self._torch_shapes is None:
            self._torch_shapes = shapes
        elif shapes != self._torch_shapes:
            changed = next(k for k in sorted(set(shapes) | set(self._torch_shapes))
                           if shapes.get(k) != self._torch_shapes.get(k))
            raise ValueError(f"engine 'torch' fixed the micro-batches' shapes at its first step, but {changed!r} was "
                             f"{self._torch_shapes.get(changed)} and is now {shapes.get(changed)}: keep the caps for "
                             "the whole run, or use engine='executor', which takes each step's shapes")
        if self._pipe_stage is None:
            self._build_torch_pipeline(micro_batches[0])
        if self._pipe_stage.is_last:
            losses = []
            self._schedule.step(target=batch[self.labels_key], losses=losses, return_outputs=False, **batch)
            self._local_loss = float(sum(float(x.detach()) for x in losses))
        else:
            self._schedule.step(return_outputs=False, **batch)

    def _reduce_stage_gradients(self, stage: int) -> None:
        if self.plan.dp > 1:
            self._all_reduce_gradients(q for q in self.stages[stage].parameters()
                                       if self._reduced_at.get(id(q), stage) == stage)

    def _gradient_owners(self) -> dict:
        """Parameter id → the stage whose gradient collective reduces it: of the stages on this rank that hold it,
        the last whose collective the program runs, so a parameter two stages share (a tied embedding) is
        reduced once, after both have added to its gradient."""
        order = [int(i[3]) for i in self.plan.programs[self.pipeline_rank]
                 if i[0] == "collective" and len(i) <= 4 and i[2] == "gradients"]
        owners = {}
        for s in order:
            for q in self.stages[s].parameters():
                owners[id(q)] = s
        return owners

    def _reduce_encoder_gradients(self) -> None:
        if self._encoder_group is not None:
            self._all_reduce_gradients(self.encoder.parameters(), self._encoder_group)

    def _all_reduce_gradients(self, parameters, group=None) -> None:
        # Every trained parameter, in the same order on every replica: one left without a gradient on this replica
        # (a branch its batches did not take) contributes zeros, so the flat tensors line up across replicas, and
        # a count of the replicas that had one keeps a parameter no replica used without a gradient, as in one
        # process (an optimizer skips it).
        params = [q for q in dict.fromkeys(parameters) if q.requires_grad]  # a parameter shared by stages once
        if not params:
            return
        grads = [(q.grad if q.grad is not None else torch.zeros_like(q)).reshape(-1) for q in params]
        had = torch.tensor([float(q.grad is not None) for q in params], dtype=grads[0].dtype,
                           device=grads[0].device)
        flat = torch.cat([*grads, had])
        dist.all_reduce(flat, group=self._dp_group if group is None else group)
        at = 0
        for k, q in enumerate(params):
            reduced = flat[at:at + q.numel()].view_as(q)
            at += q.numel()
            if q.grad is not None:
                q.grad.copy_(reduced)
            elif flat[-len(params) + k] > 0:
                q.grad = reduced.to(q.dtype, copy=True)  # the flat tensor has the widest of the dtypes
