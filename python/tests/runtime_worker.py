"""Trains a small tiny_vlm for a few steps under one runtime layout; writes its step losses and parameter sums.

Plain SGD keeps the parameters comparable: Adam would magnify rounding noise in near-zero gradients.

    torchrun --nproc-per-node 2 runtime_worker.py --layout 1f1b --out result.json
    python runtime_worker.py --layout reference --out reference.json      # one process, no runtime

Every layout sees the same micro-batches: step k holds REPLICAS × MICRO_BATCHES groups of consecutive samples,
replica d taking the d-th run of them. The reference trains the whole model on all of a step's groups in one
process with the summed loss over the step's token count, which is what every distributed layout must equal.
"""

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "tiny_vlm"))

from data import SyntheticVlmData, caps_for, pack, scaled_lengths  # noqa: E402
from model import TinyVlm, TinyVlmConfig, token_loss_sum  # noqa: E402

CONFIG = TinyVlmConfig(vision_hidden=32, vision_ffn=64, vision_heads=2, vision_blocks=2, hidden=32, ffn=64, heads=2,
                       blocks=3, vocab=64)
GROUP = 3  # samples per micro-batch

# layout: (dp, pp, vpp, pipeline, micro-batches per replica)
LAYOUTS = {
    "ddp": (2, 1, 1, None, 2),
    "gpipe": (1, 2, 1, "gpipe", 4),
    "1f1b": (1, 2, 1, "1f1b", 4),
    "interleaved": (1, 2, 2, "interleaved", 4),
    "interleaved-dp": (2, 1, 2, "interleaved", 2),  # one pipeline rank, 2 chunks, 2 replicas
    "zb-h1": (1, 2, 1, "zb-h1", 4),
    # The encoders on their own plan in the LLM pipeline's bubbles: `fulcrum plan --encoders bubbles`, with the
    # encoder's stages pinned through --encoder-pp: two encoder replicas (one per rank, features sent from rank 1
    # to the LLM's first stage) or one encoder pipeline over both ranks.
    "bubbles-dp": (1, 2, 1, "bubbles", 4),
    "bubbles-pp": (1, 2, 1, "bubbles", 4),
    "bubbles-dp2": (2, 2, 1, "bubbles", 2),  # 4 ranks: two LLM pipelines, each encoder stage's replicas across both
    # One encoder pipeline over both ranks, its layers recomputed before each backward (--encoder-recompute full).
    "bubbles-recompute": (1, 2, 1, "bubbles", 4),
}


def bubble_plan(layout, model, micro_batches, out):
    """Writes the planner's schedule for ``layout`` (a bubbles-* layout) of ``model`` to ``out``."""
    import subprocess

    cli = os.environ.get("FULCRUM_CLI") or str(REPO / "build" / "fulcrum")
    model_file = Path(out).with_suffix(".model.json")
    model_file.write_text(json.dumps(model.fulcrum_model()))
    dp = LAYOUTS[layout][0]
    encoder_pp = "2" if layout in ("bubbles-pp", "bubbles-recompute") else "1"
    recompute = ["--encoder-recompute", "full"] if layout == "bubbles-recompute" else []
    done = subprocess.run([cli, "plan", "--model", str(model_file), "--cluster", f"cpu:{2 * dp}", "--dtype", "fp32",
                           "--gbs", str(dp * micro_batches * GROUP), "--seq", "96", "--images-per-sample", "1",
                           "--config", f"{dp},1,2,1,{GROUP}", "--encoders", "bubbles", "--encoder-pp", encoder_pp,
                           "--no-baselines", "--quiet", "--out", out, *recompute],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)


def step_groups(step, replicas, micro_batches):
    first = step * replicas * micro_batches * GROUP
    groups = [list(range(first + g * GROUP, first + (g + 1) * GROUP)) for g in range(replicas * micro_batches)]
    return [groups[d * micro_batches:(d + 1) * micro_batches] for d in range(replicas)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layout", required=True, choices=[*LAYOUTS, "reference"])
    p.add_argument("--reference-of", default="1f1b", choices=list(LAYOUTS))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--engine", default="auto")
    p.add_argument("--out", required=True)
    p.add_argument("--no-fill", action="store_true", help="run every encoder pass where the plan puts it")
    p.add_argument("--late-rank", type=int, default=-1, help="this rank starts each step --late-seconds late")
    p.add_argument("--late-seconds", type=float, default=0.05)
    p.add_argument("--seed-by-replica", action="store_true",
                   help="build the model with another seed on every data-parallel replica but the first")
    a = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dp, pp, vpp, pipeline, micro_batches = LAYOUTS[a.reference_of if a.layout == "reference" else a.layout]
    samples = a.steps * dp * micro_batches * GROUP
    lengths = scaled_lengths(samples, CONFIG, seed=1)
    data = SyntheticVlmData(lengths, CONFIG)
    all_groups = [g for s in range(a.steps) for r in step_groups(s, dp, micro_batches) for g in r]
    caps = caps_for(lengths, all_groups)
    model = TinyVlm(CONFIG, seed=0)
    layers = len(model.layers)

    if a.layout == "reference":
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=0.5)
        losses = []
        for s in range(a.steps):
            groups = [g for r in step_groups(s, dp, micro_batches) for g in r]
            batches = [pack([data[i] for i in g]) for g in groups]
            tokens = sum(int((b["labels"] != -100).sum()) for b in batches)
            total = 0.0
            for b in batches:
                loss = token_loss_sum(model(b), b["labels"]) / tokens
                loss.backward()
                total += float(loss.detach())
            optimizer.step()
            optimizer.zero_grad()
            losses.append(total)
        Path(a.out).write_text(json.dumps({"losses": losses, "parameters": [float(q.double().sum()) for q in params]}))
        return

    import fulcrum.runtime as fr

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if a.seed_by_replica and rank % dp:
        model = TinyVlm(CONFIG, seed=100 + rank)  # the runtime must start it from the first replica's weights
    if pp == 1 and vpp == 1:
        plan = None
    elif pipeline == "bubbles":
        plan = a.out + ".plan.json"
        if rank == 0:  # one rank writes the plan, every rank reads it
            bubble_plan(a.layout, model, micro_batches, plan)
        dist.barrier()
    else:
        # Uneven stages, full recomputation of some blocks and selective of others: the plan decides both.
        recompute = ["none"] * layers
        recompute[2], recompute[layers - 3] = "full", "selective"
        plan = fr.RuntimePlan.generate(pipeline, layers, micro_batches, pp=pp, vpp=vpp, dp=dp, recompute=recompute)
    runtime = fr.Runtime(model, plan, token_loss_sum, micro_batches=micro_batches, engine=a.engine, timeline=True,
                         fill_waits=not a.no_fill)
    optimizer = torch.optim.SGD(list(runtime.parameters()), lr=0.5)
    dp_rank = runtime.dp_rank
    losses, ahead = [], 0
    for s in range(a.steps):
        groups = step_groups(s, dp, micro_batches)[dp_rank]
        batches = [pack([data[i] for i in g], *caps) if pp * vpp > 1 else pack([data[i] for i in g]) for g in groups]
        if rank == a.late_rank:
            time.sleep(a.late_seconds)
        result = runtime.step(batches)
        ahead += result.encoder_passes_ahead
        optimizer.step()
        optimizer.zero_grad()
        losses.append(result.loss)
    # Parameters by their index in the whole model, from the rank that holds them.
    names = {id(q): i for i, q in enumerate(model.parameters())}
    held = {names[id(q)]: float(q.double().sum()) for q in runtime.parameters()}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, held)
    passes_ahead = [None] * dist.get_world_size()
    dist.all_gather_object(passes_ahead, ahead)
    if rank == 0:
        merged = {}
        for h in gathered:
            merged.update(h)
        fr.write_chrome_trace(a.out + ".trace.json", [(rank, runtime.timeline.steps[-1])], "runtime test")
        Path(a.out).write_text(json.dumps({
            "engine": runtime.engine, "losses": losses, "encoder_passes_ahead": passes_ahead,
            "parameters": [merged[i] for i in sorted(merged)], "layers": layers,
            "compute_seconds": result.compute_seconds, "seconds": result.seconds}))
    fr.end_rank()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
