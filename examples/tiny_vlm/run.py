"""Trains tiny_vlm on this machine's CPUs under one of six layouts and measures its speed.

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
                     ranks, its forward and backward passes run in the pipeline's bubbles: where the plan puts
                     them, or earlier when a rank would wait for the other (``--no-fill``: only where planned)

Batches come from `fulcrum batch`'s plan of the run's samples (``--samples-per-step`` per step over all ranks,
``--micro-batches`` per rank), balanced with the model's cost: measured layer times with ``--profile``, the
analytic model of ``--cluster`` otherwise. Both pipeline modes train on the same micro-batches, packed to fixed
caps. The step time is the slowest rank's forward, backward, gradient reduction and optimizer step, with the
ranks starting each step together; collating the synthetic samples is outside it, as a DataLoader's workers
would be. The result (``--out``) holds ``mode, steps, step_seconds_median, step_seconds_mean`` (the mean over steps of
each step's median over the repeats), ``step_seconds_cv`` (spread of the repeats' means), ``tokens_per_second``
(real LLM tokens, padding not counted, all ranks, over those step times), ``losses`` (warm-up steps included),
``per_rank{compute_seconds, wait_seconds, encoder_passes_ahead}`` (per step, warm-up steps excluded; the last:
encoder layer passes run before their planned place to fill a wait) and ``held_out_losses``:
``[steps trained, loss]`` pairs, the loss per labelled token on ``--held-out`` samples of the same task that no
mode trains on, before training, every ``--eval-every`` steps (warm-up included) and at the end (first repeat,
outside the timed steps), so modes that see the epoch's samples in different orders compare on what they
learned. With ``--speed-checks N``, ``speed_checks{whole_model_seconds, optimizer_seconds}`` (the slowest rank's).

``--mode pp-planned,pp-bubbles`` (modes of one layout: the same data-parallel and pipeline degrees) runs them in the
same two processes, each with a model, runtime and optimizer of its own and the batches and schedule its own run
would have (planned in the work folder's ``<mode>/``): the warm-up steps of each (the last mode's first), then the
measured steps in alternating blocks of ``--block`` steps (fulcrum.profile.alternating_blocks), so that a drift of
the host's speed during the measurement falls on every mode alike. The result is then ``modes{<mode>{...}}``, each
mode's record as above with the speed checks taken after its own steps (every ``N``-th of them), ``order`` (the
blocks as the ranks ran them) and ``speed_checks`` (all of them).
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


def prepare(a, mode: str, workdir: Path) -> dict:
    """Writes ``mode``'s inputs into ``workdir``: the samples' lengths, the model, the batch plan and, for a
    pipeline, its schedule. Returns what the workers need."""
    from data import scaled_lengths, write_lengths
    from model import TinyVlm, TinyVlmConfig

    workdir.mkdir(parents=True, exist_ok=True)
    dp, pp, batcher, _ = MODES[mode]
    config = TinyVlmConfig()
    samples = a.steps * a.samples_per_step
    lengths = scaled_lengths(samples, config, seed=a.seed)
    write_lengths(workdir / "lengths.json", lengths)
    model_json = TinyVlm(config).fulcrum_model()
    (workdir / "tiny.json").write_text(json.dumps(model_json))
    cli = a.fulcrum
    per_micro_batch = a.samples_per_step // (dp * a.micro_batches)
    batches = workdir / "batches.json"
    call([cli, "batch", "--data", str(workdir / "lengths.json"), "--dp", str(dp), "--algo", batcher,
          "--samples-per-step", str(a.samples_per_step), "--microbatches", str(a.micro_batches),
          "--oversize", "own-group", "--seed", str(a.seed), "--quiet", "--out", str(batches),
          *cost_args(a, workdir)])
    schedule = None
    if mode == "pp-megatron":
        schedule = workdir / "schedule.json"
        call([cli, "simulate", "--gbs", str(a.samples_per_step), "--mbs", str(per_micro_batch), "--pp", str(pp),
              "--recompute", "none", "--encoder-placement", "first-stage", "--schedule", "1f1b",
              "--save-schedule", str(schedule), "--quiet", "--json", *cost_args(a, workdir)])
    elif mode in ("pp-planned", "pp-bubbles"):
        schedule = workdir / "schedule.json"
        call([cli, "plan", "--gbs", str(a.samples_per_step), "--data", str(workdir / "lengths.json"),
              "--config", f"{dp},1,{pp},1,{per_micro_batch}", "--no-baselines", "--seed", str(a.seed),
              "--encoders", "stages" if mode == "pp-planned" else "bubbles",
              "--quiet", "--json", "--out", str(schedule), *cost_args(a, workdir)])
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


def launch(a, setups: dict) -> list[dict]:
    """Runs the two ranks and returns each one's record."""
    out = a.workdir / "rank.json"
    start_ranks(Path(__file__).resolve(), [
        "--worker", json.dumps(setups), "--mode", ",".join(a.mode), "--block", str(a.block), "--steps",
        str(a.steps), "--warmup", str(a.warmup), "--repeats", str(a.repeats), "--samples-per-step",
        str(a.samples_per_step), "--micro-batches",
        str(a.micro_batches), "--seed", str(a.seed), "--lr", str(a.lr), "--held-out", str(a.held_out),
        "--eval-every", str(a.eval_every), "--speed-checks", str(a.speed_checks), "--out", str(out),
        *(["--trace", str(Path(a.trace).resolve())] if a.trace else []), *(["--no-fill"] if a.no_fill else [])])
    return [json.loads(out.with_suffix(f".{r}.json").read_text()) for r in range(2)]


def simulate_command(a, mode: str, workdir: Path) -> list[str]:
    """The `fulcrum simulate` call that predicts the measured steps of ``mode``'s run prepared in ``workdir``:
    the same samples, batches, schedule and costs."""
    dp, pp, batcher, _ = MODES[mode]
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


def summarize(a, mode: str, setup: dict, ranks: list[dict]) -> dict:
    """``mode``'s slowest-rank time of each step, and its statistics over the measured steps and repeats."""
    checks = ranks[0]["modes"][mode].get("speed_checks")
    ranks = [rank["modes"][mode] for rank in ranks]
    by_repeat = [[max(rank["repeats"][r]["step_seconds"][s] for rank in ranks) for s in range(a.steps)]
                 for r in range(a.repeats)]
    tokens = ranks[0]["repeats"][0]["real_tokens"]
    return {
        "mode": mode, "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
        "samples_per_step": a.samples_per_step, "micro_batches_per_rank": a.micro_batches, "dp": setup["dp"],
        "pp": setup["pp"], "batcher": MODES[mode][2], "engine": ranks[0]["engine"],
        "stages": ranks[0]["stages"], "schedule": ranks[0]["pipeline"], "encoder": ranks[0]["encoder"],
        **timing(by_repeat, tokens),
        "real_tokens_per_step": tokens,
        "losses": ranks[0]["repeats"][0]["losses"],
        "held_out_losses": ranks[0]["held_out_losses"],
        "per_rank": [{"rank": i,
                      "compute_seconds": statistics.fmean(
                          c for rep in rank["repeats"] for c in rep["compute_seconds"]),
                      "wait_seconds": statistics.fmean(w for rep in rank["repeats"] for w in rep["wait_seconds"]),
                      "encoder_passes_ahead": statistics.fmean(
                          n for rep in rank["repeats"] for n in rep["encoder_passes_ahead"])}
                     for i, rank in enumerate(ranks)],
        "step_seconds_by_repeat": by_repeat,
        **({"speed_checks": checks} if checks is not None else {}),
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


def worker(a, setups: dict) -> None:
    """Every mode of ``setups`` (mode: prepare's record) on this rank: the warm-up steps of each in turn, then the
    measured steps in alternating blocks (the module's docstring), every repeat from new models."""
    import numpy as np
    import torch
    import torch.distributed as dist

    import fulcrum.profile as fp
    import fulcrum.runtime as fr
    from fulcrum.runtime.timeline import COMPUTE
    from data import SyntheticVlmData, caps_for, loss_tokens, pack, pad, scaled_lengths
    from model import TinyVlm, TinyVlmConfig, token_loss_sum

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    modes = list(setups)
    dp, pp, _, _ = MODES[modes[0]]  # every mode of one run has the same layout (main checks)
    dp_rank = rank % dp
    config = TinyVlmConfig()
    samples = setups[modes[0]]["samples"]
    lengths = scaled_lengths(samples, config, seed=a.seed)
    data = SyntheticVlmData(lengths, config, seed=a.seed)
    # Warm-up steps rerun the epoch's first batches, so the measured steps are the whole epoch in every mode.
    order = [s % a.steps for s in range(a.warmup)] + list(range(a.steps))
    per_loss = loss_tokens(lengths)

    def mode_batches(mode: str) -> dict:
        """The micro-batches this rank trains on in ``mode``, collated before the clock starts, and each step's
        loss-bearing and real token counts over all ranks."""
        collate = MODES[mode][3]
        steps = json.loads(Path(setups[mode]["batches"]).read_text())["steps"]
        if len(steps) != a.steps:
            raise SystemExit(f"the batch plan has {len(steps)} steps, {a.steps} were planned")
        caps = caps_for(lengths, [g for step in steps for g in step[dp_rank]]) if collate == "caps" else None

        def collated(ids):
            samples = [data[i] for i in ids]
            if collate == "pad":
                return pad(samples)
            return pack(samples, *caps) if caps else pack(samples)

        return {"batches": [[collated(g) for g in step[dp_rank]] for step in steps],
                "loss_tokens": [int(sum(per_loss[i] for rank_mbs in step for g in rank_mbs for i in g))
                                for step in steps],
                "real_tokens": [int(sum(lengths.tokens[i] for rank_mbs in step for g in rank_mbs for i in g))
                                for step in steps]}

    inputs = {m: mode_batches(m) for m in modes}
    held_lengths = scaled_lengths(a.held_out, config, seed=a.seed + 1)
    held_data = SyntheticVlmData(held_lengths, config, seed=a.seed, first_index=HELD_OUT_FIRST_INDEX)
    held_batches = [pack([held_data[i]]) for i in range(a.held_out)]
    held_tokens = int(loss_tokens(held_lengths).sum())

    record = {"modes": {m: {"repeats": [], "held_out_losses": []} for m in modes}}
    check = None
    if a.speed_checks:
        # The host's speed beside the steps: the whole model on a copy of its own over the calibration batches.
        copy, calibration = TinyVlm(config, seed=a.seed), calibration_batches(config)
        check = fp.SpeedCheck(lambda: whole_model_pass(copy, calibration), copy.parameters())
    for repeat in range(a.repeats):
        runs = {}
        for m in modes:
            model = TinyVlm(config, seed=a.seed)
            runtime = fr.Runtime(model, setups[m]["schedule"], token_loss_sum, micro_batches=a.micro_batches,
                                 fill_waits=not a.no_fill)
            optimizer = torch.optim.AdamW(list(runtime.parameters()), lr=a.lr)
            p = runtime.plan
            record["modes"][m].update(
                engine=runtime.engine, stages=[list(s) for s in p.stages], pipeline=p.pipeline,
                encoder=None if p.encoder is None else {
                    "dp": p.encoder.dp, "pp": p.encoder.pp, "stages": [list(s) for s in p.encoder.stages],
                    "llm_micro_batch": [list(m) for m in p.encoder.llm_micro_batch]})
            rep = {"step_seconds": [None] * a.steps, "compute_seconds": [None] * a.steps,
                   "wait_seconds": [None] * a.steps, "encoder_passes_ahead": [None] * a.steps, "losses": [],
                   "real_tokens": [None] * a.steps}
            record["modes"][m]["repeats"].append(rep)
            # The first repeat evaluates on the held-out samples; every layer's weights come from the rank that
            # trains them (in data-parallel replica 0).
            runs[m] = {"model": model, "runtime": runtime, "optimizer": optimizer, "rep": rep,
                       "owners": p.layer_ranks(), "evaluate": repeat == 0 and a.held_out > 0, "held_out": []}

        def note_held_out(run: dict, done: int) -> None:
            loss = held_out_loss(run["model"], run["owners"], held_batches, held_tokens)
            if loss is not None:
                run["held_out"].append([done, loss])

        def train(m: str, k: int) -> None:
            """Step ``k`` of ``order`` (warm-up ones first) in mode ``m``, timed from the ranks' common start."""
            run, s = runs[m], order[k]
            runtime, optimizer, rep = run["runtime"], run["optimizer"], run["rep"]
            if run["evaluate"] and k == 0:
                note_held_out(run, 0)
            dist.barrier()
            start = time.perf_counter()
            result = runtime.step(inputs[m]["batches"][s], step_tokens=inputs[m]["loss_tokens"][s])
            optimizer_start = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            end = time.perf_counter()
            origin = runtime.timeline.origin
            runtime.timeline.add(fr.Event("optimizer", "optimizer", COMPUTE, optimizer_start - origin, end - origin))
            rep["losses"].append(result.loss)
            if k >= a.warmup:
                rep["step_seconds"][k - a.warmup] = end - start
                rep["compute_seconds"][k - a.warmup] = result.compute_seconds + end - optimizer_start
                rep["wait_seconds"][k - a.warmup] = result.wait_seconds
                rep["encoder_passes_ahead"][k - a.warmup] = result.encoder_passes_ahead
                rep["real_tokens"][k - a.warmup] = inputs[m]["real_tokens"][s]
                if check and (k - a.warmup) % a.speed_checks == 0:  # every N-th of this mode's measured steps
                    check(m)
            if run["evaluate"] and ((k + 1) % a.eval_every == 0 or k + 1 == len(order)):
                note_held_out(run, k + 1)

        ran = fp.run_alternating(modes, a.warmup, a.steps, a.block, train)
        record.setdefault("order", ran)
        for m in modes:
            if runs[m]["evaluate"]:
                record["modes"][m]["held_out_losses"] = runs[m]["held_out"]
            if not np.isfinite(runs[m]["rep"]["losses"]).all():
                raise SystemExit(f"rank {rank}: the loss diverged in {m}: {runs[m]['rep']['losses']}")
    if check:
        record["speed_checks"] = check.samples()
        for m in modes:
            record["modes"][m]["speed_checks"] = check.samples(m)
    Path(a.out).with_suffix(f".{rank}.json").write_text(json.dumps(record))
    if a.trace:
        # The last step of the last repeat, every rank's events on one clock (the step starts together).
        events = [None] * dist.get_world_size()
        dist.all_gather_object(events, list(runs[modes[0]]["runtime"].timeline.current))
        if rank == 0:
            fr.write_chrome_trace(a.trace, list(enumerate(events)), f"tiny_vlm {modes[0]}")
    fr.end_rank()


def mode_list(text: str) -> list[str]:
    modes = text.split(",")
    if any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"{text!r}: modes from {', '.join(MODES)}, each once")
    if len({MODES[m][:2] for m in modes}) > 1:
        raise argparse.ArgumentTypeError(f"{text!r}: modes run together must have one layout (all dp or all pp)")
    return modes


def argument_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, type=mode_list, metavar="MODE[,MODE...]",
                   help=f"{', '.join(MODES)}; several of one layout (the pp modes, or the dp modes) run in "
                        "alternating blocks in the same processes")
    p.add_argument("--block", type=int, default=5,
                   help="measured steps of one mode before the next runs, with several modes (default 5)")
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
    p.add_argument("--eval-every", type=int, default=10, help="steps (warm-up ones counted) between held-out losses (default 10)")
    p.add_argument("--workdir", help="folder for the run's inputs (default: a temporary one)")
    p.add_argument("--fulcrum", help="the fulcrum command (default: build/fulcrum, then PATH)")
    p.add_argument("--no-fill", action="store_true",
                   help="pp-bubbles: run every encoder pass where the plan puts it, never earlier to fill a wait")
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
        a.micro_batches = 1 if MODES[a.mode[0]][1] == 1 else 4
    if not a.worker:
        a.fulcrum = fulcrum_cli(a.fulcrum)


def main(argv=None) -> None:
    p = argument_parser()
    a = p.parse_args(argv)
    fill_defaults(a)
    if a.worker:
        worker(a, json.loads(a.worker))
        return
    dp = MODES[a.mode[0]][0]
    if (a.steps < 1 or a.warmup < 0 or a.repeats < 1 or a.micro_batches < 1 or a.held_out < 0 or a.eval_every < 1
            or a.speed_checks < 0 or a.block < 1):
        p.error("--steps, --repeats, --eval-every and --block must be at least 1, --warmup, --held-out and "
                "--speed-checks at least 0")
    if len(a.mode) > 1 and a.trace:
        p.error("--trace takes one mode")
    if a.samples_per_step % (dp * a.micro_batches):
        p.error(f"--samples-per-step {a.samples_per_step} must divide into {dp} ranks × {a.micro_batches} "
                "micro-batches")
    with tempfile.TemporaryDirectory(prefix="tiny_vlm_") as scratch:
        a.workdir = Path(a.workdir or scratch)
        a.workdir.mkdir(parents=True, exist_ok=True)
        # One mode plans in the work folder itself; several, each in a folder of its own there.
        setups = {m: prepare(a, m, a.workdir if len(a.mode) == 1 else a.workdir / m) for m in a.mode}
        ranks = launch(a, setups)
        results = {m: summarize(a, m, setups[m], ranks) for m in a.mode}
    if len(a.mode) == 1:
        result = results[a.mode[0]]
    else:
        from fulcrum.profile import together_record

        result = together_record(results, a.block, ranks[0]["order"], ranks[0].get("speed_checks"))
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(out)
    for m, row in results.items():
        print(f"{m}: {row['step_seconds_mean'] * 1e3:.1f} ms per step (median "
              f"{row['step_seconds_median'] * 1e3:.1f}, CV {row['step_seconds_cv']:.1%} over {a.repeats} repeats), "
              f"{row['tokens_per_second']:.0f} real tokens/s, loss {row['losses'][0]:.3f} -> "
              f"{row['losses'][-1]:.3f}" + (f", held-out {row['held_out_losses'][0][1]:.3f} -> "
                                            f"{row['held_out_losses'][-1][1]:.3f}" if row["held_out_losses"] else ""))


if __name__ == "__main__":
    main()
