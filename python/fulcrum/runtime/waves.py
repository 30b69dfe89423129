"""Runs a multi-task schedule (``fulcrum multitask --save-schedule``): waves of task slices on device groups.

Each rank is one device of the schedule and follows its program: the forward of each of its slices (a range of a
component's layers for one task, on the rows of the task's batch that its data-parallel position owns), the
activations sent to the slices that take them on other devices and received from those that made them, the backward
waves in reverse with the gradients flowing back the same way, and each sync group's all-reduce of the shared
layers' gradients over the devices that hold them. Parameters are shared between the tasks that run a component:
every device keeps a replica of the layers its slices run, and the sync groups keep the replicas equal. The wave
boundaries order a rank's work but are not barriers: every dependency across one is a transfer of its own.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence, Union

import torch
import torch.distributed as dist
from torch import nn

from fulcrum import _core
from fulcrum.runtime.coverage import warn_parameters_outside
from fulcrum.runtime.device import device_of, refuse_untagged_backend
from fulcrum.runtime.executor import _HEADER, _buffers, message_parts
from fulcrum.runtime.plan import parse_document, read_schedule
from fulcrum.runtime.replicas import broadcast_from, destroy_groups
from fulcrum.runtime.timeline import COLLECTIVE, COMPUTE, P2P, Timeline


@dataclass(frozen=True)
class WaveSlice:
    """Layers ``[first_layer, first_layer + layers)`` of component ``component`` for task ``task``, on
    ``devices`` (``dp`` copies, each taking its share of the ``sequences`` of every micro-batch).
    ``input_gradient``: whether it has a backward (it trains, or something trained is upstream of it); without
    one it takes no gradient and passes none back."""

    task: int
    component: int
    first_layer: int
    layers: int
    sequences: int
    tokens: int
    micro_batches: int
    dp: int
    tp: int
    wave: int
    devices: tuple
    input_gradient: bool = True


@dataclass(frozen=True)
class SyncGroup:
    devices: tuple
    layers: tuple  # (component, layer) pairs


@dataclass(frozen=True)
class WavePlan:
    """A multitask schedule as the runtime runs it: one program per device."""

    devices: int
    waves: int
    slices: tuple
    sync_groups: tuple
    programs: tuple = field(repr=False)
    where: str = field(default="schedule", compare=False)  # what errors about it name: its file, where it has one

    @cached_property
    def most_micro_batches(self) -> int:
        """The most micro-batches any slice runs (message tags count micro-batches against it)."""
        return max(s.micro_batches for s in self.slices)

    @classmethod
    def from_json(cls, document: Union[str, Mapping[str, Any]], where: str = "schedule") -> "WavePlan":
        """From a schedule's text or parsed JSON; validated by the core first (ValueError naming ``where``)."""
        doc = parse_document(document, where)
        if doc.get("kind") != "schedule" or "tasks" not in doc:
            raise ValueError(f"{where}: not a multitask schedule (fulcrum multitask --save-schedule)")
        _core.check_schedule(json.dumps(doc), where)
        t = doc["tasks"]
        slices = tuple(WaveSlice(*(int(x) for x in s[:10]), tuple(int(d) for d in s[10]),
                                 bool(int(s[11])) if len(s) > 11 else True) for s in t["slices"])
        for i, s in enumerate(slices):
            if s.tp != 1:
                raise ValueError(f"{where}: tasks.slices[{i}] has TP {s.tp}; the runtime runs TP 1 slices")
        groups = tuple(SyncGroup(tuple(int(d) for d in g["devices"]), tuple((int(c), int(l)) for c, l in g["layers"]))
                       for g in t["sync_groups"])
        return cls(devices=int(doc["layout"]["pp"]), waves=int(t["waves"]), slices=slices, sync_groups=groups,
                   programs=tuple(tuple(tuple(i) for i in p) for p in doc["programs"]), where=where)

    @classmethod
    def load(cls, source: Union[str, os.PathLike, Mapping[str, Any], "WavePlan"]) -> "WavePlan":
        return source if isinstance(source, WavePlan) else read_schedule(source, cls.from_json)


@dataclass(frozen=True)
class WaveStepResult:
    loss: float            # the sum of the tasks' losses (the same on every rank)
    task_losses: tuple     # each task's: its summed loss over its batch divided by its samples
    seconds: float         # this rank's step, wall clock
    compute_seconds: float
    wait_seconds: float


@dataclass
class _Node:
    name: str
    component: int
    inputs: list      # node indices of the same task
    terminal: bool    # no node of the task takes its output: its output gives the task's loss


def check_copies_synchronised(plan: WavePlan, model_doc: Mapping[str, Any], components: Mapping[str, Sequence]) -> None:
    """Raises ValueError unless every trainable layer with parameters that several devices hold (slices of several
    tasks, or data parallelism) is in a sync group over all of them: without one its copies train apart and
    nothing fails. ``components`` maps each component's name to its layers (modules), as the model's
    ``components`` does; whether a layer has parameters is read from its module."""
    holders: dict[tuple, set] = {}
    for i, s in enumerate(plan.slices):
        name = model_doc["components"][s.component]["name"]
        if s.first_layer + s.layers > len(components[name]):
            raise ValueError(f"{plan.where}: slice {i} runs layers [{s.first_layer}, {s.first_layer + s.layers}) "
                             f"of component {name!r}, which has {len(components[name])}")
        for layer in range(s.first_layer, s.first_layer + s.layers):
            holders.setdefault((s.component, layer), set()).update(s.devices)
    for (c, layer), devices in sorted(holders.items()):
        doc = model_doc["components"][c]
        if len(devices) < 2 or not doc.get("trainable", True):
            continue
        if next(iter(components[doc["name"]][layer].parameters()), None) is None:
            continue
        if not any((c, layer) in g.layers and devices <= set(g.devices) for g in plan.sync_groups):
            raise ValueError(f"{plan.where}: layer {layer} of component {doc['name']!r} is held by devices "
                             f"{','.join(map(str, sorted(devices)))} and no sync group over all of them keeps its "
                             "copies equal")


def check_layers_share_no_parameter(components: Mapping[str, Sequence]) -> None:
    """Raises ValueError when one parameter belongs to two layers (a module two components use, a tied weight):
    the waves hold, step and synchronise each layer's parameters apart, so its copies would train apart."""
    seen: dict[int, str] = {}
    for name, layers in components.items():
        for layer, module in enumerate(layers):
            for q in dict.fromkeys(module.parameters()):
                where = f"layer {layer} of component {name!r}"
                first = seen.setdefault(id(q), where)
                if first != where:
                    raise ValueError(f"a parameter of {where} is also one of {first}: the waves keep each layer's "
                                     "parameters apart, so its copies would train apart; untie it")


def check_tasks_run(plan: WavePlan, task_graph: Mapping[str, Any], components: Mapping[str, Sequence]) -> None:
    """Raises ValueError unless the schedule's slices run every node of every task whole, each layer once, and
    nothing else: a task no slice runs would train nothing and report a loss of 0. ``components`` as for
    check_copies_synchronised."""
    names = [c["name"] for c in task_graph["model"]["components"]]
    tasks = task_graph["tasks"]
    covered: dict[tuple, list] = {}  # (task, component) -> the [first, end) layer ranges its slices run
    for i, s in enumerate(plan.slices):
        if not 0 <= s.task < len(tasks):
            raise ValueError(f"{plan.where}: slice {i} runs task {s.task}, but the task graph has {len(tasks)}")
        if all(n["component"] != names[s.component] for n in tasks[s.task]["nodes"]):
            raise ValueError(f"{plan.where}: slice {i} runs component {names[s.component]!r}, which task "
                             f"{tasks[s.task]['name']!r} does not")
        covered.setdefault((s.task, s.component), []).append((s.first_layer, s.first_layer + s.layers))
    for t, task in enumerate(tasks):
        for node in task["nodes"]:
            c = names.index(node["component"])
            at = 0
            for first, end in sorted(covered.get((t, c), [])):
                at = end if first == at else -1
            if at != len(components[node["component"]]):
                raise ValueError(f"{plan.where}: task {task['name']!r}: the slices do not run the "
                                 f"{len(components[node['component']])} layers of its node {node['name']!r} once each")


class WaveRuntime:
    """A training step of a multi-task ``model`` as the multitask schedule ``plan`` lays it out.

    ``task_graph`` is the task graph document ``fulcrum multitask --tasks`` read (its ``model`` the Fulcrum
    model, components in order; each task's ``batch``, ``micro_batches`` and ``nodes``). ``model`` provides:

    - ``components``: a mapping from component name to its layers, each ``layer(state, batch) -> state`` with
      ``state`` a tuple of floating-point tensors whose first dimension is the rows (sequences) of ``batch``;
    - ``task_loss(task, state, batch)``: the summed loss of the rows of a task's terminal node output;
    - ``join(task, node, inputs, batch)`` (needed only for nodes with inputs): the state entering the node's
      first layer from ``{input node name: its output state}``; without it a node's single input passes as is.

    ``step`` takes every task's whole batch (tensors whose first dimension is the task's samples, the same on
    every rank); each rank computes the rows its slices own. A task's loss is its summed loss over its batch
    divided by its samples, and the step minimises the sum of the tasks' losses. ``parameters()`` are the
    layers this rank's slices run, which its optimizer updates.

    As DistributedDataParallel does for its module, every copy of a layer starts from its first holder's
    parameters (trained or frozen) and buffers, and with ``broadcast_buffers`` (the default) takes that holder's
    buffers again at the start of every step, so statistics a layer keeps (batch norm's running means) agree.
    """

    def __init__(self, model: nn.Module, task_graph: Mapping[str, Any], plan, *, timeline: bool = False,
                 broadcast_buffers: bool = True):
        refuse_untagged_backend("WaveRuntime", device_of([model]))
        self.plan = p = WavePlan.load(plan)
        self.model = model
        self.timeline = Timeline(timeline)
        model_doc = task_graph["model"]
        if not isinstance(model_doc, Mapping):
            raise ValueError("the task graph's model must be a model document (the runtime needs its components)")
        self.component_names = [c["name"] for c in model_doc["components"]]
        for name in self.component_names:
            if name not in model.components:
                raise ValueError(f"the model has no component {name!r}, which the task graph names")
        warn_parameters_outside(model, (layer for n in self.component_names for layer in model.components[n]),
                                "the components the task graph names")
        check_layers_share_no_parameter(model.components)
        check_copies_synchronised(p, model_doc, model.components)
        check_tasks_run(p, task_graph, model.components)
        initialized = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if initialized else 1
        self.rank = dist.get_rank() if initialized else 0
        if p.devices != self.world_size:
            raise ValueError(f"{p.where}: the schedule runs on {p.devices} devices, but {self.world_size} ranks are "
                             "running")
        self.task_names, self.tasks, self.batch_sizes = [], [], []
        for t in task_graph["tasks"]:
            names = [n["name"] for n in t["nodes"]]
            nodes = []
            for n in t["nodes"]:
                if int(n.get("items_per_sample", 1)) != 1:
                    raise ValueError(f"task {t['name']!r} node {n['name']!r}: the runtime runs one item per sample")
                nodes.append(_Node(n["name"], self.component_names.index(n["component"]),
                                   [names.index(i) for i in n.get("inputs", [])], True))
            for node in nodes:
                for i in node.inputs:
                    nodes[i].terminal = False
            if len({n.component for n in nodes}) != len(nodes):
                raise ValueError(f"task {t['name']!r} runs one component in two nodes; the runtime cannot tell "
                                 "their slices apart")
            self.task_names.append(t["name"])
            self.tasks.append(nodes)
            self.batch_sizes.append(int(t["batch"]))
        self._wire()
        # The gradients this rank sends, (slice, producer). A producer without a backward takes none, but a
        # schedule may still send it one (zeros), as schedules saved before that rule did.
        self._gradient_sends = {(int(i[2]), int(i[4])) for i in self.plan.programs[self.rank]
                                if i[0] == "send" and i[1] == "gradient"}
        # Every tensor the runtime makes sits beside the model's (NCCL on GPUs takes only those).
        self.device = device_of([model])
        self.groups = []
        self._own_groups: list = []  # the process groups this runtime made, which close() destroys
        self._closed = False
        for g in p.sync_groups:  # every rank creates every group, in the same order, as new_group requires
            pg = dist.new_group(list(g.devices)) if self.world_size > 1 else None
            self._own_groups.append(pg)
            self.groups.append(pg if self.rank in g.devices else None)
        self._hooked: dict = {}  # id of each parameter whose gradient hook notes its use -> the hook's handle
        self._used: set = set()  # ids of the bucketed parameters backward gave a gradient this step
        self.buckets = [self._bucket(i) if self.rank in g.devices else None for i, g in enumerate(p.sync_groups)]
        # Every copy of a layer starts from its first holder's state, as DDP makes its replicas: frozen weights too
        # (ranks that built or loaded them apart would otherwise compute apart; a frozen component has no sync
        # group), and buffers, which with broadcast_buffers it takes again at each step.
        self.broadcast_buffers = broadcast_buffers
        self._copies = self._make_copy_groups(
            {tuple(sorted(g.devices)): pg for g, pg in zip(p.sync_groups, self._own_groups)})
        for group, first, tensors, _ in self._copies:
            broadcast_from(tensors, first, group)

    def _make_copy_groups(self, sync_groups: dict) -> list:
        """For each set of devices that holds layers in common, on the ranks in it: (process group, first
        holder, the layers' parameters and buffers, their buffers), the buffers listed once here as DDP lists its
        module's. A set of devices that is a sync group's takes its process group; every rank makes the others
        in the same order."""
        holders: dict = {}
        for s in self.plan.slices:
            for layer in range(s.first_layer, s.first_layer + s.layers):
                holders.setdefault((s.component, layer), set()).update(s.devices)
        shared: dict = {}
        for key, devices in sorted(holders.items()):
            if len(devices) > 1:
                shared.setdefault(tuple(sorted(devices)), []).append(key)
        copies = []
        for devices, layers in sorted(shared.items()):
            group = sync_groups.get(devices)
            if group is None:
                group = dist.new_group(list(devices))
                self._own_groups.append(group)
            if self.rank not in devices:
                continue
            modules = [self.model.components[self.component_names[c]][l] for c, l in layers]
            buffers = [b for m in modules for b in m.buffers()]
            copies.append((group, devices[0], [*(q for m in modules for q in m.parameters()), *buffers], buffers))
        return copies

    def _sync_buffers(self) -> None:
        """Every copy's buffers from its first holder's, as DDP's ``broadcast_buffers`` before a forward."""
        for group, first, _, buffers in self._copies:
            if buffers:
                broadcast_from(buffers, first, group)

    def _trained(self, g: int) -> list:
        """Sync group ``g``'s parameters that take gradients now."""
        return [q for c, l in self.plan.sync_groups[g].layers
                for q in self.model.components[self.component_names[c]][l].parameters() if q.requires_grad]

    def _bucket(self, g: int) -> tuple:
        """One flat buffer per dtype for the gradients of sync group ``g``'s parameters on this rank. Each step
        makes the parameters' ``.grad`` views into it (as DDP's ``gradient_as_bucket_view``), so backward
        accumulates straight into what the all-reduce sends: no copy into a flat tensor and back."""
        params = self._trained(g)
        buckets = []
        for dtype in sorted({q.dtype for q in params}, key=str):
            members = [q for q in params if q.dtype == dtype]
            flat = torch.zeros(sum(q.numel() for q in members), dtype=dtype, device=members[0].device)
            views, at = [], 0
            for q in members:
                views.append(flat[at:at + q.numel()].view_as(q))
                at += q.numel()
                if id(q) not in self._hooked:  # notes that backward wrote q's gradient this step
                    # The hook holds the set alone, not the runtime, and close() removes it.
                    self._hooked[id(q)] = q.register_post_accumulate_grad_hook(
                        lambda q, used=self._used: used.add(id(q)))
            # How many devices of the group gave each member a gradient this step, all-reduced beside it: a
            # parameter no device used keeps no gradient, as in one process (an optimizer then skips it).
            used = torch.zeros(len(members), dtype=torch.float32, device=members[0].device)
            buckets.append((flat, members, views, used))
        return tuple(buckets)

    def _bind_gradients(self) -> None:
        """Points every synchronised parameter's ``.grad`` at its view in its bucket, keeping what it holds (an
        optimizer's ``zero_grad`` may have set it to None or to a tensor of its own). A group whose parameters
        were frozen, unfrozen, cast or moved since its bucket was made gets a new bucket, so every parameter that
        takes gradients is synchronised."""
        for g, bucket in enumerate(self.buckets):
            if bucket is None:
                continue
            now = {(id(q), q.dtype, q.device) for q in self._trained(g)}
            if now != {(id(q), q.dtype, q.device) for _, members, _, _ in bucket for q in members}:
                bucket = self.buckets[g] = self._bucket(g)
            for flat, members, views, _ in bucket:
                for q, v in zip(members, views):
                    if q.grad is None:
                        self._gradless.add(id(q))
                        v.zero_()
                    elif q.grad.data_ptr() != v.data_ptr():
                        v.copy_(q.grad)
                    q.grad = v
                # Gradients kept from an earlier step (accumulated, not zeroed) are already summed over the
                # devices: they sit out this step's all-reduce, which would add them once per device, and are
                # added back when it is done.
                if bool(flat.any()):
                    self._earlier.append((flat, flat.clone()))
                    flat.zero_()

    # -- the plan's data flow -----------------------------------------------------------------------------------
    def _node_of(self, s: WaveSlice) -> int:
        return next(i for i, n in enumerate(self.tasks[s.task]) if n.component == s.component)

    def _wire(self) -> None:
        """Each slice's producers (the slices whose output it takes, in the order its node's inputs name them)
        and whether its output is its task's loss."""
        p = self.plan
        layers = [len(self.model.components[n]) for n in self.component_names]
        end_of = {}  # (task, component, end layer) -> slice
        for i, s in enumerate(p.slices):
            end_of[(s.task, s.component, s.first_layer + s.layers)] = i
            if s.sequences * s.micro_batches != self.batch_sizes[s.task]:
                raise ValueError(f"slice {i} runs {s.sequences} × {s.micro_batches} sequences, but task "
                                 f"{self.task_names[s.task]!r} has {self.batch_sizes[s.task]} samples")
        self.producers, self.loss_slice = [], []
        for i, s in enumerate(p.slices):
            node = self.tasks[s.task][self._node_of(s)]
            if s.first_layer > 0:
                self.producers.append([end_of[(s.task, s.component, s.first_layer)]])
            else:
                self.producers.append([end_of[(s.task, self.tasks[s.task][j].component,
                                               layers[self.tasks[s.task][j].component])] for j in node.inputs])
            self.loss_slice.append(node.terminal and s.first_layer + s.layers == layers[s.component])
            # Rows move between slices micro-batch by micro-batch: a producer cut into other micro-batches would
            # leave some of this slice's rows unmatched.
            for j in self.producers[-1]:
                if p.slices[j].micro_batches != s.micro_batches:
                    raise ValueError(f"{p.where}: slice {i} runs {s.micro_batches} micro-batches, but slice {j}, "
                                     f"whose output it takes, runs {p.slices[j].micro_batches}")

    def _rows(self, s: int, device: int, mb: int) -> tuple[int, int]:
        """The rows of its task's batch that ``device`` computes in slice ``s``, micro-batch ``mb``."""
        sl = self.plan.slices[s]
        share = sl.sequences // sl.dp
        start = mb * sl.sequences + sl.devices.index(device) * share
        return start, start + share

    def _overlaps(self, s: int, mb: int, peer: int):
        """(peer device, [first, end) rows) for each device of slice ``peer`` whose rows of micro-batch ``mb``
        overlap this rank's in slice ``s``, in row order."""
        a, b = self._rows(s, self.rank, mb)
        out = []
        for d in self.plan.slices[peer].devices:
            c, e = self._rows(peer, d, mb)
            if max(a, c) < min(b, e):
                out.append((d, max(a, c), min(b, e)))
        return sorted(out, key=lambda x: x[1])

    def _tag(self, kind: str, sender: int, receiver: int, mb: int, part: int) -> int:
        """A tag no other message between two devices has: the micro-batch counted against the most any slice runs,
        so routes of slices with other micro-batch counts never share one."""
        n = len(self.plan.slices)
        key = ((kind == "gradient") * n + sender) * n + receiver
        return (key * self.plan.most_micro_batches + mb) * 8 + part

    # -- a step -------------------------------------------------------------------------------------------------
    def held_layers(self) -> list[tuple[int, int]]:
        """(component, layer) of every layer this rank's slices run, in model order."""
        held = set()
        for s in self.plan.slices:
            if self.rank in s.devices:
                held.update((s.component, l) for l in range(s.first_layer, s.first_layer + s.layers))
        return sorted(held)

    def parameters(self):
        for c, l in self.held_layers():
            yield from self.model.components[self.component_names[c]][l].parameters()

    def close(self) -> None:
        """Destroys the sync groups' process groups this runtime made, after which it runs no more steps. Call it
        on every rank, as new_group was; a runtime used as a context manager closes itself."""
        if self._closed:
            return
        self._closed = True
        for handle in self._hooked.values():
            handle.remove()
        self._hooked = {}
        destroy_groups(self._own_groups)
        # Nothing keeps a destroyed group alive: its communicator goes once the last reference does.
        self._own_groups, self.groups, self._copies = [], [None] * len(self.groups), []

    def __enter__(self) -> "WaveRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def step(self, batches: Sequence[Mapping[str, torch.Tensor]]) -> WaveStepResult:
        """Forward and backward of one optimizer step over every task's batch (``batches[t]`` for task ``t``, the
        same on every rank), leaving the gradients of ``parameters()`` summed over the tasks and the devices."""
        if self._closed:
            raise RuntimeError("the runtime is closed: make a new one to run more steps")
        if len(batches) != len(self.tasks):
            raise ValueError(f"the task graph has {len(self.tasks)} tasks, got {len(batches)} batches")
        for t, b in enumerate(batches):
            for k, v in b.items():
                if v.shape[0] != self.batch_sizes[t]:
                    raise ValueError(f"task {self.task_names[t]!r}: {k!r} has {v.shape[0]} rows, the task "
                                     f"{self.batch_sizes[t]} samples")
        self.batches = batches
        self.outputs: dict = {}   # (slice, mb) -> this rank's rows of the slice's output, detached
        self.saved: dict = {}     # (slice, mb) -> ({producer: leaf inputs}, outputs or (loss,))
        self.inbox: dict = {}     # (payload, receiving slice, sending slice, mb, device) -> tensors
        self.outbox: dict = {}    # (sending slice, receiving slice, mb, device) -> gradient tensors
        self.grads: dict = {}     # (slice, mb) -> gradient of this rank's rows of its output
        self.pending: list = []
        self.reducing: list = []  # the all-reduce of each sync group's buckets in flight
        self.task_loss = [0.0] * len(self.tasks)
        self._earlier: list = []  # (bucket, what it held before this step)
        self._used.clear()
        self._gradless: set = set()  # ids of the bucketed parameters that held no gradient before it
        self._bind_gradients()
        try:
            self.timeline.begin_step()
            start = time.perf_counter()
            if self.broadcast_buffers:
                self._sync_buffers()
            for instruction in self.plan.programs[self.rank]:
                op = instruction[0]
                if op == "F":
                    self._forward(int(instruction[1]))
                elif op == "B":
                    self._backward(int(instruction[1]))
                elif op == "send":
                    self._send(instruction[1], int(instruction[2]), int(instruction[4]))
                elif op == "recv":
                    self._recv(instruction[1], int(instruction[2]), int(instruction[4]))
                elif op == "wave":
                    # Every dependency across a boundary is a transfer of its own, so no rank needs the others to
                    # reach it: a barrier would only add its latency and make each rank wait for the slowest.
                    pass
                elif op == "collective":
                    with self.timeline.span(f"start all_reduce group {instruction[3]}", "collective", COLLECTIVE):
                        self._all_reduce_group(int(instruction[3]))
                else:
                    raise ValueError(f"instruction {list(instruction)}: not one a multitask schedule holds")
            with self.timeline.span("wait sends", "send", P2P):
                for work, _ in self.pending:
                    work.wait()
            with self.timeline.span("wait gradient sync", "collective", COLLECTIVE):
                for work in self.reducing:
                    work.wait()
        except BaseException:
            if not self.reducing:  # no all-reduce writes into the buckets: they go back to what they held
                for flat, earlier in self._earlier:
                    flat.copy_(earlier)
            self._earlier = []
            raise
        for flat, earlier in self._earlier:
            flat.add_(earlier)
        self._earlier = []
        for bucket in self.buckets:
            for _, members, _, used in bucket or ():
                for q, count in zip(members, used.tolist()):
                    if count == 0 and id(q) in self._gradless:
                        q.grad = None  # no device used it, and it held none before the step
        if self.saved or self.inbox or self.outbox or self.grads:
            raise RuntimeError("the schedule left work undone: " +
                               ", ".join(map(str, [*self.saved, *self.inbox, *self.outbox, *self.grads])))
        seconds = time.perf_counter() - start
        losses = torch.tensor(self.task_loss, dtype=torch.float64, device=self.device)
        if self.world_size > 1:
            dist.all_reduce(losses)
        compute = self.timeline.busy_seconds(COMPUTE)
        return WaveStepResult(loss=float(losses.sum()), task_losses=tuple(float(x) for x in losses),
                              seconds=seconds, compute_seconds=compute, wait_seconds=max(0.0, seconds - compute))

    def _batch_rows(self, task: int, first: int, end: int) -> dict:
        return {k: v[first:end] for k, v in self.batches[task].items()}

    def _input_from(self, s: int, producer: int, mb: int) -> tuple:
        """This rank's rows of ``producer``'s output, gathered from the devices that made them."""
        pieces = []
        for d, a, b in self._overlaps(s, mb, producer):
            if d == self.rank:
                c, _ = self._rows(producer, d, mb)
                pieces.append(tuple(t[a - c:b - c] for t in self.outputs[(producer, mb)]))
            else:
                pieces.append(self.inbox.pop(("activation", s, producer, mb, d)))
        joined = tuple(torch.cat(parts) if len(parts) > 1 else parts[0] for parts in zip(*pieces))
        # A gradient of the input only where this slice has a backward and the producer takes it.
        wanted = self.plan.slices[s].input_gradient and self.plan.slices[producer].input_gradient
        return tuple(t.detach().requires_grad_(wanted) for t in joined)

    def _forward(self, s: int) -> None:
        sl = self.plan.slices[s]
        layers = self.model.components[self.component_names[sl.component]]
        node = self.tasks[sl.task][self._node_of(sl)]
        for mb in range(sl.micro_batches):
            a, b = self._rows(s, self.rank, mb)
            batch = self._batch_rows(sl.task, a, b)
            inputs = {q: self._input_from(s, q, mb) for q in self.producers[s]}
            with self.timeline.span(f"F slice {s} mb{mb}", "forward", COMPUTE, s, mb):
                if sl.first_layer > 0 or not node.inputs:
                    state = next(iter(inputs.values())) if inputs else ()
                elif len(node.inputs) == 1 and not hasattr(self.model, "join"):
                    state = inputs[self.producers[s][0]]
                else:
                    named = {self.tasks[sl.task][j].name: inputs[q] for j, q in zip(node.inputs, self.producers[s])}
                    state = tuple(self.model.join(self.task_names[sl.task], node.name, named, batch))
                for layer in layers[sl.first_layer:sl.first_layer + sl.layers]:
                    state = tuple(layer(state, batch))
                if self.loss_slice[s]:
                    loss = self.model.task_loss(self.task_names[sl.task], state, batch) / self.batch_sizes[sl.task]
                    self.task_loss[sl.task] += float(loss.detach())
                    self.saved[(s, mb)] = (inputs, (loss,))
                else:
                    if not all(t.is_floating_point() for t in state):
                        raise ValueError(f"component {self.component_names[sl.component]!r}: the runtime moves "
                                         "floating-point states between layers only")
                    self.saved[(s, mb)] = (inputs, state)
                    self.outputs[(s, mb)] = tuple(t.detach() for t in state)

    def _backward(self, s: int) -> None:
        sl = self.plan.slices[s]
        for mb in range(sl.micro_batches):
            inputs, roots = self.saved.pop((s, mb))
            # A slice without a backward gets no gradient (or, from a schedule saved before that rule, zeros).
            grads = None if self.loss_slice[s] else self.grads.pop((s, mb), None)
            self.outputs.pop((s, mb), None)
            if sl.input_gradient:
                # Outputs of frozen work (a frozen first component) take no gradient: only the rest are roots.
                pairs = [(r, None if grads is None else g) for r, g in zip(roots, grads or [None] * len(roots))
                         if r.requires_grad]
                if pairs and grads is None and not self.loss_slice[s]:
                    raise RuntimeError(f"{self.plan.where}: slice {s} micro-batch {mb} has a backward, but no "
                                       "gradient of its output reached it")
                with self.timeline.span(f"B slice {s} mb{mb}", "backward", COMPUTE, s, mb):
                    if pairs:
                        torch.autograd.backward([r for r, _ in pairs],
                                                None if grads is None else [g for _, g in pairs])
            elif any(r.requires_grad for r in roots):
                raise RuntimeError(f"{self.plan.where}: slice {s} has no backward (its component is frozen in the task "
                                   "graph), but its output requires a gradient: a parameter of "
                                   f"{self.component_names[sl.component]!r} still has requires_grad set")
            for q, leaves in inputs.items():
                # A producer with a backward takes its share here or from the send that must follow (a schedule
                # without it leaves the share unsent, which the step's end reports); one without takes nothing
                # unless the schedule sends it anyway.
                takes = self.plan.slices[q].input_gradient
                if not takes and (s, q) not in self._gradient_sends:
                    continue
                input_grads = tuple(t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves)
                a, _ = self._rows(s, self.rank, mb)
                for d, c, e in self._overlaps(s, mb, q):
                    piece = tuple(g[c - a:e - a] for g in input_grads)
                    if d == self.rank:
                        if takes:
                            self._add_gradient(q, mb, c, piece)
                    else:
                        self.outbox[(s, q, mb, d)] = piece

    def _add_gradient(self, s: int, mb: int, first_row: int, piece: tuple) -> None:
        """Adds the gradient of rows [first_row, ...) of slice ``s``'s output (a consumer's share)."""
        if (s, mb) not in self.grads:
            self.grads[(s, mb)] = [torch.zeros_like(t) for t in self.outputs[(s, mb)]]
        a, _ = self._rows(s, self.rank, mb)
        for acc, g in zip(self.grads[(s, mb)], piece):
            acc[first_row - a:first_row - a + g.shape[0]] += g

    def _send(self, payload: str, s: int, peer: int) -> None:
        sl = self.plan.slices[s]
        with self.timeline.span(f"send {payload} {s}->{peer}", "send", P2P, s):
            messages = []  # (micro-batch, device, tensors)
            for mb in range(sl.micro_batches):
                if payload == "activation":
                    # The rows of this rank's output each other device of the consumer takes.
                    own, _ = self._rows(s, self.rank, mb)
                    messages += [(mb, d, tuple(t[c - own:e - own] for t in self.outputs[(s, mb)]))
                                 for d, c, e in self._overlaps(s, mb, peer) if d != self.rank]
                else:
                    messages += [(mb, d, self.outbox.pop((s, peer, mb, d))) for d in self.plan.slices[peer].devices
                                 if (s, peer, mb, d) in self.outbox]

            def isend(t: torch.Tensor, d: int, mb: int, part: int) -> None:
                self.pending.append((dist.isend(t, d, tag=self._tag(payload, s, peer, mb, part)), t))

            for mb, d, parts in message_parts(messages, isend, self.device):
                for i, t in enumerate(parts):
                    isend(t, d, mb, i)

    def _recv(self, payload: str, s: int, peer: int) -> None:
        sl = self.plan.slices[s]
        with self.timeline.span(f"recv {payload} {peer}->{s}", "recv", P2P, s):
            for mb in range(sl.micro_batches):
                for d, a, _ in self._overlaps(s, mb, peer):
                    if d == self.rank:
                        continue
                    header = torch.empty(_HEADER, dtype=torch.int64, device=self.device)
                    dist.recv(header, d, tag=self._tag(payload, peer, s, mb, 0))
                    tensors = _buffers(header)
                    for i, t in enumerate(tensors):
                        dist.recv(t, d, tag=self._tag(payload, peer, s, mb, i + 1))
                    if payload == "activation":
                        self.inbox[("activation", s, peer, mb, d)] = tuple(tensors)
                    else:
                        self._add_gradient(s, mb, a, tuple(tensors))

    def _all_reduce_group(self, g: int) -> None:
        """Starts the group's all-reduce: it runs while the later backward waves compute, as the simulator and
        DeepSpeed overlap it; the step waits for it at its end."""
        for flat, members, _, used in self.buckets[g]:
            used.copy_(torch.tensor([float(id(q) in self._used) for q in members]))
            self.reducing.append(dist.all_reduce(flat, group=self.groups[g], async_op=True))
            self.reducing.append(dist.all_reduce(used, group=self.groups[g], async_op=True))
