"""Runs fulcrum.runtime's engines on 2 gloo ranks whose models were built apart (another seed on each rank, a
frozen layer, a buffer counting forwards as batch norm's ``num_batches_tracked`` does), and writes what each rank
holds: after the runtime is made, every copy of a layer must hold its first holder's parameters and buffers; after a
rank's buffers drift between steps, the next step must start from the first holder's again.

    torchrun --nproc-per-node 2 replica_state_worker.py --graph tasks.json --schedule waves.json --out result.json

``--graph`` and ``--schedule``: examples/tiny_multitask's task graph and a multitask schedule of it in which every
layer is held by both ranks (its sequential arrangement).
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import fulcrum.runtime as fr
from gradient_worker import Model, loss_sum, micro_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "tiny_multitask"))
from model import TinyMultitask, make_batches  # noqa: E402


def count_forwards(layer, start: float) -> None:
    """A buffer the layer's forward increments, as batch norm's ``num_batches_tracked``."""
    layer.register_buffer("forwards", torch.full((1,), start))

    def count(module, inputs, output):
        module.forwards.add_(1)  # returns nothing: the layer's output stays its own

    layer.register_forward_hook(count)


def state(modules) -> list:
    """Every parameter and buffer of ``modules``, as lists of floats, in order."""
    return [t.detach().double().reshape(-1).tolist() for m in modules for t in (*m.parameters(), *m.buffers())]


def gathered(value):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def drift(layers) -> None:
    """This rank's buffers moved between steps, as a rank's own statistics would."""
    if dist.get_rank() == 1:
        for layer in layers:
            layer.forwards.add_(1000)


def built_apart(frozen):
    """The example's model from each rank's own seed, the parameters ``frozen(vision)`` gives frozen, and each
    vision layer counting its forwards from 100 × rank."""
    rank = dist.get_rank()
    model = TinyMultitask(seed=rank)  # each rank's weights its own, until the runtime makes the copies equal
    vision = model.components["vision"]
    for q in frozen(vision):
        q.requires_grad_(False)
    for layer in vision:
        count_forwards(layer, 100.0 * rank)
    return model, vision


def two_steps_with_a_drift(runtime, batches, layers, counting):
    """Every rank's state of ``layers`` as the runtime was made, and the forward counts of ``counting`` after a
    step, a drift on rank 1 and another step."""
    made = gathered(state(layers))
    runtime.step(batches)
    drift(counting)
    runtime.step(batches)
    return made, gathered([float(layer.forwards) for layer in counting])


def waves_case(graph: dict, schedule: dict) -> dict:
    # A frozen layer: never trained, so only the start can make its copies equal.
    model, vision = built_apart(lambda vision: vision[0].parameters())
    layers = [layer for name in graph["model"]["components"] for layer in model.components[name["name"]]]
    runtime = fr.WaveRuntime(model, graph, schedule)
    batches = make_batches(model.config, 0)
    made, after = two_steps_with_a_drift(runtime, batches, layers, vision)
    # The buffer broadcast off: the drift stays.
    quiet = fr.WaveRuntime(model, graph, schedule, broadcast_buffers=False)
    drift(vision)
    quiet.step(batches)
    kept = gathered([float(layer.forwards) for layer in vision])
    # Closed, a runtime gives its process groups back and runs no more steps.
    before = len(c10d._world.pg_map)
    runtime.close()
    quiet.close()
    try:
        runtime.step(batches)
        refused = ""
    except RuntimeError as e:
        refused = str(e)
    with fr.WaveRuntime(model, graph, schedule) as scoped:
        scoped.step(batches)
        inside = len(c10d._world.pg_map)
    return {"start_equal": made[0] == made[1], "forwards_after_drift": after, "forwards_without_broadcast": kept,
            "groups": {"two_runtimes": before, "closed": len(c10d._world.pg_map), "scoped": inside,
                       "after_scope": len(c10d._world.pg_map)},
            "step_after_close": refused}


def frozen_component_case(graph: dict, schedule: dict) -> dict:
    """The vision component frozen in the task graph ("trainable": false), so no sync group holds its layers:
    its copies must still start equal, and take the first holder's buffers each step."""
    graph = json.loads(json.dumps(graph))
    schedule = json.loads(json.dumps(schedule))
    names = [c["name"] for c in graph["model"]["components"]]
    vision_index = names.index("vision")
    graph["model"]["components"][vision_index]["trainable"] = False
    for group in schedule["tasks"]["sync_groups"]:
        group["layers"] = [layer for layer in group["layers"] if layer[0] != vision_index]
    model, vision = built_apart(lambda vision: vision.parameters())
    with fr.WaveRuntime(model, graph, schedule) as runtime:
        made, after = two_steps_with_a_drift(runtime, make_batches(model.config, 0), vision, vision)
    return {"start_equal": made[0] == made[1], "forwards_after_drift": after}


def runtime_case(engine: str, plan_args) -> dict:
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = Model()
    if rank == 1:  # built apart on rank 1
        with torch.no_grad():
            for q in model.parameters():
                q.add_(1.0)
    for q in model.layers[0].parameters():
        q.requires_grad_(False)
    for layer in model.layers:
        count_forwards(layer, 100.0 * rank)
    plan = None if plan_args is None else fr.RuntimePlan.generate(*plan_args[:3], **plan_args[3])
    runtime = fr.Runtime(model, plan, loss_sum, micro_batches=2, engine=engine)
    made = gathered(state(model.layers))
    batches = [micro_batch(0, 0, j, 1) for j in range(2)]
    runtime.step(batches)
    drift(model.layers)
    runtime.step(batches)
    after = gathered([float(layer.forwards) for layer in model.layers])
    with runtime:
        pass
    try:
        runtime.step(batches)
        refused = ""
    except RuntimeError as e:
        refused = str(e)
    return {"engine": runtime.engine, "start_equal": made[0] == made[1], "forwards_after_drift": after,
            "step_after_close": refused}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--graph", required=True)
    p.add_argument("--schedule", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    graph = json.loads(Path(a.graph).read_text())
    schedule = json.loads(Path(a.schedule).read_text())
    result = {
        "waves": waves_case(graph, schedule),
        "waves-frozen-component": frozen_component_case(graph, schedule),
        "ddp": runtime_case("ddp", None),
        "executor": runtime_case("executor", ("interleaved", 4, 2, {"pp": 1, "vpp": 2, "dp": 2})),
    }
    if dist.get_rank() == 0:
        Path(a.out).write_text(json.dumps(result))
    fr.end_rank()


if __name__ == "__main__":
    main()
