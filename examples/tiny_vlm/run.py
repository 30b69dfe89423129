"""Trains tiny_vlm on this machine's CPUs under one of five layouts and measures its speed.

    python examples/tiny_vlm/run.py --mode dp-fulcrum --steps 30 --repeats 3 --out result.json

starts two processes (gloo, one thread each) and trains one epoch of ``--steps`` optimizer steps over
``--steps`` × ``--samples-per-step`` samples, after ``--warmup`` steps on the epoch's first batches (so every
mode measures the same samples), ``--repeats`` times from the same initial weights. Modes:

  dp-random          data parallel over 2 ranks, InternVL's batches: random samples, padded to the longest
  dp-random-packed   the same samples per rank, packed into one row per micro-batch
  dp-fulcrum         Fulcrum's balanced micro-batches (predicted time balanced over ranks), packed
  pp-megatron        a 2-stage 1F1B pipeline laid out as Megatron-LM does: the encoder before the first stage's
                     LLM layers, the LLM's blocks split evenly
  pp-planned         the 2-stage pipeline `fulcrum plan` chooses (stages, schedule, recomputation), the encoder
                     in its stages
  pp-bubbles         the LLM's 2-stage pipeline `fulcrum plan` chooses, the encoder on its own plan over both
                     ranks, its forward and backward passes run in the pipeline's bubbles

Batches come from `fulcrum batch`'s plan of the run's samples (``--samples-per-step`` per step over all ranks,
``--micro-batches`` per rank), balanced with the model's cost: measured layer times with ``--profile``, the
analytic model of ``--cluster`` otherwise. Both pipeline modes train on the same micro-batches, packed to fixed
caps. The step time is the slowest rank's forward, backward, gradient reduction and optimizer step, with the
ranks starting each step together; collating the synthetic samples is outside it, as a DataLoader's workers
would be. The result (``--out``) holds ``mode, steps, step_seconds_median, step_seconds_mean`` (the mean over steps of
each step's median over the repeats), ``step_seconds_cv`` (spread of the repeats' means), ``tokens_per_second``
(real LLM tokens, padding not counted, all ranks, over those step times), ``losses`` and
``per_rank{compute_seconds, wait_seconds}`` (per step), warm-up steps excluded, and ``held_out_losses``:
``[steps trained, loss]`` pairs, the loss per labelled token on ``--held-out`` samples of the same task that no
mode trains on, before training, every ``--eval-every`` steps (warm-up included) and at the end (first repeat,
outside the timed steps), so modes that see the epoch's samples in different orders compare on what they
learned. With ``--speed-checks N``, ``speed_checks{whole_model_seconds, optimizer_seconds}`` (the slowest rank's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

# The whole-model calibration (compare.py, and --speed-checks): micro-batches of CALIBRATION_GROUP samples packed
# (as the dp modes train), drawn with their own seed, so they are not the runs' batches.
CALIBRATION_SAMPLES, CALIBRATION_GROUP, CALIBRATION_SEED = 32, 4, 1000


def calibration_batches(config) -> list:
    from data import SyntheticVlmData, pack, scaled_lengths

    lengths = scaled_lengths(CALIBRATION_SAMPLES, config, seed=CALIBRATION_SEED)
    data = SyntheticVlmData(lengths, config, seed=CALIBRATION_SEED)
    return [pack([data[i] for i in range(first, first + CALIBRATION_GROUP)])
            for first in range(0, CALIBRATION_SAMPLES, CALIBRATION_GROUP)]


def whole_model_pass(model, batches) -> None:
    """Forward and backward of the whole model over ``batches``, one micro-batch at a time."""
    from model import token_loss_sum

    for batch in batches:
        token_loss_sum(model(batch), batch["labels"]).backward()


MODES = {
    # dp, pp, batcher, collate
    "dp-random": (2, 1, "random", "pad"),
    "dp-random-packed": (2, 1, "random-packed", "pack"),
    "dp-fulcrum": (2, 1, "fulcrum", "pack"),
    "pp-megatron": (1, 2, "fulcrum", "caps"),
    "pp-planned": (1, 2, "fulcrum", "caps"),
    "pp-bubbles": (1, 2, "fulcrum", "caps"),
}
DTYPE = "fp32"  # what the CPU trains in
HELD_OUT_FIRST_INDEX = 1 << 30  # held-out items are numbered past any training item


def fulcrum_cli(given: str | None) -> str:
    for candidate in (given, os.environ.get("FULCRUM_CLI"), str(REPO / "build" / "fulcrum"), shutil.which("fulcrum")):
        if candidate and Path(candidate).is_file():
            return candidate
    sys.exit("run.py: the fulcrum command was not found: build it (make) or pass --fulcrum PATH")


def call(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(f"run.py: {' '.join(cmd[:2])} failed with status {done.returncode}")
    return done.stdout


def cost_args(a, workdir: Path) -> list[str]:
    args = ["--model", str(workdir / "tiny.json"), "--cluster", a.cluster, "--dtype", DTYPE]
    return args + (["--profile", a.profile] if a.profile else [])


def prepare(a) -> dict:
    """Writes the run's inputs into the work folder: the samples' lengths, the model, the batch plan and, for a
    pipeline, its schedule. Returns what the workers need."""
    from data import scaled_lengths, write_lengths
    from model import TinyVlm, TinyVlmConfig

    dp, pp, batcher, _ = MODES[a.mode]
    config = TinyVlmConfig()
    samples = a.steps * a.samples_per_step
    lengths = scaled_lengths(samples, config, seed=a.seed)
    write_lengths(a.workdir / "lengths.json", lengths)
    model_json = TinyVlm(config).fulcrum_model()
    (a.workdir / "tiny.json").write_text(json.dumps(model_json))
    cli = a.fulcrum
    per_micro_batch = a.samples_per_step // (dp * a.micro_batches)
    batches = a.workdir / "batches.json"
    call([cli, "batch", "--data", str(a.workdir / "lengths.json"), "--dp", str(dp), "--algo", batcher,
          "--samples-per-step", str(a.samples_per_step), "--microbatches", str(a.micro_batches),
          "--oversize", "own-group", "--seed", str(a.seed), "--quiet", "--out", str(batches),
          *cost_args(a, a.workdir)])
    schedule = None
    if a.mode == "pp-megatron":
        schedule = a.workdir / "schedule.json"
        call([cli, "simulate", "--gbs", str(a.samples_per_step), "--mbs", str(per_micro_batch), "--pp", str(pp),
              "--recompute", "none", "--encoder-placement", "first-stage", "--schedule", "1f1b",
              "--save-schedule", str(schedule), "--quiet", "--json", *cost_args(a, a.workdir)])
    elif a.mode in ("pp-planned", "pp-bubbles"):
        schedule = a.workdir / "schedule.json"
        call([cli, "plan", "--gbs", str(a.samples_per_step), "--data", str(a.workdir / "lengths.json"),
              "--config", f"{dp},1,{pp},1,{per_micro_batch}", "--no-baselines", "--seed", str(a.seed),
              "--encoders", "stages" if a.mode == "pp-planned" else "bubbles",
              "--quiet", "--json", "--out", str(schedule), *cost_args(a, a.workdir)])
    return {"batches": str(batches), "schedule": str(schedule) if schedule else None, "dp": dp, "pp": pp,
            "samples": samples}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(script: Path, args: list[str], world_size: int = 2) -> None:
    """Runs ``script args`` as ``world_size`` gloo ranks on this machine, one thread each, and waits for them."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"{script.name}: a rank failed (exit statuses {codes})")


def launch(a, setup: dict) -> list[dict]:
    """Runs the two ranks and returns each one's record."""
    out = a.workdir / "rank.json"
    start_ranks(Path(__file__).resolve(), [
        "--worker", json.dumps(setup), "--mode", a.mode, "--steps", str(a.steps), "--warmup", str(a.warmup),
        "--repeats", str(a.repeats), "--samples-per-step", str(a.samples_per_step), "--micro-batches",
        str(a.micro_batches), "--seed", str(a.seed), "--lr", str(a.lr), "--held-out", str(a.held_out),
        "--eval-every", str(a.eval_every), "--speed-checks", str(a.speed_checks), "--out", str(out),
        *(["--trace", str(Path(a.trace).resolve())] if a.trace else [])])
    return [json.loads(out.with_suffix(f".{r}.json").read_text()) for r in range(2)]


def simulate_command(a, workdir: Path) -> list[str]:
    """The `fulcrum simulate` call that predicts the measured steps of the run prepared in ``workdir``: the
    same samples, batches, schedule and costs."""
    dp, pp, batcher, _ = MODES[a.mode]
    cmd = [a.fulcrum, "simulate", "--gbs", str(a.samples_per_step),
           "--mbs", str(a.samples_per_step // (dp * a.micro_batches)), "--data", str(workdir / "lengths.json"),
           "--batcher", batcher, "--seed", str(a.seed), "--step", "0", "--steps", str(a.steps),
           "--json", "--quiet", *cost_args(a, workdir)]
    if pp > 1:
        return cmd + ["--load-schedule", str(workdir / "schedule.json")]
    return cmd + ["--dp", str(dp), "--recompute", "none"]


def timing(step_seconds_by_repeat: list[list[float]], real_tokens: list[int]) -> dict:
    """Statistics of repeated runs of the same steps. Every repeat trains the same steps on the same batches from
    the same weights, so a step's median over the repeats is its time with the machine's slow spells (another
    tenant's work on a shared host) filtered out; the mean over steps of those medians is what the simulator
    predicts. ``step_seconds_cv`` is the spread of the repeats' means."""
    means = [statistics.fmean(r) for r in step_seconds_by_repeat]
    per_step = [statistics.median(r[s] for r in step_seconds_by_repeat) for s in range(len(real_tokens))]
    all_steps = [t for r in step_seconds_by_repeat for t in r]
    return {
        "step_seconds_mean": statistics.fmean(per_step),
        "step_seconds_median": statistics.median(all_steps),
        "step_seconds_cv": statistics.pstdev(means) / statistics.fmean(means) if len(means) > 1 else 0.0,
        "step_seconds_step_cv": statistics.pstdev(per_step) / statistics.fmean(per_step),
        "tokens_per_second": sum(real_tokens) / sum(per_step),
        "tokens_per_second_by_repeat": [sum(real_tokens) / sum(r) for r in step_seconds_by_repeat],
        "step_seconds_by_step": per_step,
    }


def summarize(a, setup: dict, ranks: list[dict]) -> dict:
    """The slowest rank's time of each step, and its statistics over the measured steps and repeats."""
    by_repeat = [[max(rank["repeats"][r]["step_seconds"][s] for rank in ranks) for s in range(a.steps)]
                 for r in range(a.repeats)]
    tokens = ranks[0]["repeats"][0]["real_tokens"]
    return {
        "mode": a.mode, "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
        "samples_per_step": a.samples_per_step, "micro_batches_per_rank": a.micro_batches, "dp": setup["dp"],
        "pp": setup["pp"], "batcher": MODES[a.mode][2], "engine": ranks[0]["engine"],
        "stages": ranks[0]["stages"], "schedule": ranks[0]["pipeline"], "encoder": ranks[0]["encoder"],
        **timing(by_repeat, tokens),
        "real_tokens_per_step": tokens,
        "losses": ranks[0]["repeats"][0]["losses"],
        "held_out_losses": ranks[0]["held_out_losses"],
        "per_rank": [{"rank": i,
                      "compute_seconds": statistics.fmean(
                          c for rep in rank["repeats"] for c in rep["compute_seconds"]),
                      "wait_seconds": statistics.fmean(w for rep in rank["repeats"] for w in rep["wait_seconds"])}
                     for i, rank in enumerate(ranks)],
        "step_seconds_by_repeat": by_repeat,
        **({"speed_checks": ranks[0]["speed_checks"]} if "speed_checks" in ranks[0] else {}),
        "command": "python examples/tiny_vlm/run.py " + " ".join(sys.argv[1:]),
    }


# -- a rank ------------------------------------------------------------------------------------------------------
def held_out_loss(model, owners: list[int], batches: list[dict], labelled_tokens: int) -> float | None:
    """The loss per labelled token of the whole model on the held-out ``batches``, on global rank 0 (None on the
    others): every layer's weights first come from the rank that trains them (``owners``)."""
    import torch
    import torch.distributed as dist

    from model import token_loss_sum

    with torch.no_grad():
        for layer, owner in zip(model.layers, owners):
            for p in layer.parameters():
                dist.broadcast(p.data, src=owner)
        if dist.get_rank() != 0:
            return None
        total = sum(float(token_loss_sum(model(b), b["labels"])) for b in batches)
    return total / labelled_tokens


def worker(a, setup: dict) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    import fulcrum.runtime as fr
    from fulcrum.runtime.timeline import COMPUTE
    from data import SyntheticVlmData, caps_for, loss_tokens, pack, pad, scaled_lengths
    from model import TinyVlm, TinyVlmConfig, token_loss_sum

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dp, pp, _, collate = MODES[a.mode]
    dp_rank = rank % dp
    config = TinyVlmConfig()
    lengths = scaled_lengths(setup["samples"], config, seed=a.seed)
    data = SyntheticVlmData(lengths, config, seed=a.seed)
    plan = json.loads(Path(setup["batches"]).read_text())
    if len(plan["steps"]) != a.steps:
        raise SystemExit(f"the batch plan has {len(plan['steps'])} steps, {a.steps} were planned")
    # Warm-up steps rerun the epoch's first batches, so the measured steps are the whole epoch in every mode.
    order = [s % a.steps for s in range(a.warmup)] + list(range(a.steps))
    steps = plan["steps"]
    per_loss = loss_tokens(lengths)
    caps = caps_for(lengths, [g for step in steps for g in step[dp_rank]]) if collate == "caps" else None

    def collated(ids):
        samples = [data[i] for i in ids]
        if collate == "pad":
            return pad(samples)
        return pack(samples, *caps) if caps else pack(samples)

    # Every micro-batch this rank trains on, collated before the clock starts.
    batches = [[collated(g) for g in step[dp_rank]] for step in steps]
    held_lengths = scaled_lengths(a.held_out, config, seed=a.seed + 1)
    held_data = SyntheticVlmData(held_lengths, config, seed=a.seed, first_index=HELD_OUT_FIRST_INDEX)
    held_batches = [pack([held_data[i]]) for i in range(a.held_out)]
    held_tokens = int(loss_tokens(held_lengths).sum())
    step_loss_tokens = [int(sum(per_loss[i] for rank_mbs in step for g in rank_mbs for i in g)) for step in steps]
    step_real_tokens = [int(sum(lengths.tokens[i] for rank_mbs in step for g in rank_mbs for i in g))
                        for step in steps]

    record = {"repeats": [], "held_out_losses": []}
    check = None
    if a.speed_checks:
        # The host's speed beside the steps: the whole model on a copy of its own over the calibration batches.
        import fulcrum.profile as fp

        copy, calibration = TinyVlm(config, seed=a.seed), calibration_batches(config)
        check = fp.SpeedCheck(lambda: whole_model_pass(copy, calibration), copy.parameters(), every=a.speed_checks)
    for _ in range(a.repeats):
        model = TinyVlm(config, seed=a.seed)
        runtime = fr.Runtime(model, setup["schedule"], token_loss_sum, micro_batches=a.micro_batches)
        optimizer = torch.optim.AdamW(list(runtime.parameters()), lr=a.lr)
        p = runtime.plan
        record.update(engine=runtime.engine, stages=[list(s) for s in p.stages], pipeline=p.pipeline,
                      encoder=None if p.encoder is None else {
                          "dp": p.encoder.dp, "pp": p.encoder.pp, "stages": [list(s) for s in p.encoder.stages],
                          "llm_micro_batch": [list(m) for m in p.encoder.llm_micro_batch]})
        owners = p.layer_ranks()  # the global rank training each layer, in data-parallel replica 0
        evaluate = not record["repeats"] and a.held_out > 0
        held_out = []

        def note_held_out(done: int) -> None:
            loss = held_out_loss(model, owners, held_batches, held_tokens)
            if loss is not None:
                held_out.append([done, loss])

        rep = {"step_seconds": [], "compute_seconds": [], "wait_seconds": [], "losses": [], "real_tokens": []}
        for k, s in enumerate(order):
            if evaluate and k == 0:
                note_held_out(0)
            dist.barrier()
            start = time.perf_counter()
            result = runtime.step(batches[s], step_tokens=step_loss_tokens[s])
            optimizer_start = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            end = time.perf_counter()
            origin = runtime.timeline.origin
            runtime.timeline.add(fr.Event("optimizer", "optimizer", COMPUTE, optimizer_start - origin, end - origin))
            rep["losses"].append(result.loss)
            if k >= a.warmup:
                rep["step_seconds"].append(end - start)
                rep["compute_seconds"].append(result.compute_seconds + end - optimizer_start)
                rep["wait_seconds"].append(result.wait_seconds)
                rep["real_tokens"].append(step_real_tokens[s])
            if check and k >= a.warmup:
                check()
            if evaluate and ((k + 1) % a.eval_every == 0 or k + 1 == len(order)):
                note_held_out(k + 1)
        if evaluate:
            record["held_out_losses"] = held_out
        record["repeats"].append(rep)
        if not np.isfinite(rep["losses"]).all():
            raise SystemExit(f"rank {rank}: the loss diverged: {rep['losses']}")
    if check:
        record["speed_checks"] = check.samples()
    Path(a.out).with_suffix(f".{rank}.json").write_text(json.dumps(record))
    if a.trace:
        # The last step of the last repeat, every rank's events on one clock (the step starts together).
        events = [None] * dist.get_world_size()
        dist.all_gather_object(events, list(runtime.timeline.current))
        if rank == 0:
            fr.write_chrome_trace(a.trace, list(enumerate(events)), f"tiny_vlm {a.mode}")
    fr.end_rank()


def argument_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, choices=list(MODES))
    p.add_argument("--steps", type=int, default=30, help="measured optimizer steps (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="steps run first and not measured (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="runs of the steps from the same start (default 3)")
    p.add_argument("--samples-per-step", type=int, default=8, help="samples per step over all ranks (default 8)")
    p.add_argument("--micro-batches", type=int, help="micro-batches per rank per step (default 1 dp, 4 pp)")
    p.add_argument("--profile", help="profile table of the model's layers (fulcrum.profile) the batches and "
                                     "pipeline plan are balanced with")
    p.add_argument("--cluster", default="cpu:2", help="cluster preset or file for the cost model (default cpu:2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--held-out", type=int, default=32, help="held-out samples the loss is evaluated on (default "
                                                             "32; 0: none)")
    p.add_argument("--eval-every", type=int, default=10, help="measured steps between held-out losses (default 10)")
    p.add_argument("--workdir", help="folder for the run's inputs (default: a temporary one)")
    p.add_argument("--fulcrum", help="the fulcrum command (default: build/fulcrum, then PATH)")
    p.add_argument("--trace", help="write the last step's timeline of both ranks as Chrome trace JSON")
    p.add_argument("--speed-checks", type=int, default=0, metavar="N",
                   help="after every N-th measured step, outside its time, time the whole model over the calibration "
                        "batches and an optimizer step on a copy of the model (``speed_checks`` in the result; "
                        "compare.py calibrates with them; default 0: none)")
    p.add_argument("--out", required=True)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def fill_defaults(a) -> None:
    if a.micro_batches is None:
        a.micro_batches = 1 if MODES[a.mode][1] == 1 else 4
    if not a.worker:
        a.fulcrum = fulcrum_cli(a.fulcrum)


def main(argv=None) -> None:
    p = argument_parser()
    a = p.parse_args(argv)
    fill_defaults(a)
    if a.worker:
        worker(a, json.loads(a.worker))
        return
    dp = MODES[a.mode][0]
    if (a.steps < 1 or a.warmup < 0 or a.repeats < 1 or a.micro_batches < 1 or a.held_out < 0 or a.eval_every < 1
            or a.speed_checks < 0):
        p.error("--steps, --repeats and --eval-every must be at least 1, --warmup, --held-out and --speed-checks at "
                "least 0")
    if a.samples_per_step % (dp * a.micro_batches):
        p.error(f"--samples-per-step {a.samples_per_step} must divide into {dp} ranks × {a.micro_batches} "
                "micro-batches")
    with tempfile.TemporaryDirectory(prefix="tiny_vlm_") as scratch:
        a.workdir = Path(a.workdir or scratch)
        a.workdir.mkdir(parents=True, exist_ok=True)
        setup = prepare(a)
        result = summarize(a, setup, launch(a, setup))
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(out)
    print(f"{a.mode}: {result['step_seconds_mean'] * 1e3:.1f} ms per step (median "
          f"{result['step_seconds_median'] * 1e3:.1f}, CV {result['step_seconds_cv']:.1%} over {a.repeats} repeats), "
          f"{result['tokens_per_second']:.0f} real tokens/s, loss {result['losses'][0]:.3f} -> "
          f"{result['losses'][-1]:.3f}" + (f", held-out {result['held_out_losses'][0][1]:.3f} -> "
                                           f"{result['held_out_losses'][-1][1]:.3f}"
                                           if result["held_out_losses"] else ""))


if __name__ == "__main__":
    main()
