"""Trains tiny_multitask's two tasks on this machine's CPUs, as Spindle's waves or sub-model by sub-model.

    python examples/tiny_multitask/run.py --mode waves --steps 30 --repeats 3 --out result.json

starts two processes (gloo, one thread each) and trains ``--steps`` optimizer steps after ``--warmup`` steps,
``--repeats`` times from the same initial weights. Modes:

  sequential   every MetaOp of every task in turn on both ranks (data parallel over them), as Megatron-LM and
               DeepSpeed run a multi-task model: `fulcrum multitask`'s `sequential` arrangement
  waves        the arrangement `fulcrum multitask` keeps for the model: the fastest it simulated, its waves of
               task slices on device groups, levels in turn or a baseline
  reference    one process, no runtime: every task's whole batch through the whole model, the losses both
               modes must reproduce

Both modes run the schedule `fulcrum multitask --save-schedule` writes, through ``fulcrum.runtime.WaveRuntime``,
and train on the same batches. The step time is the slowest rank's forward, backward, gradient synchronisation
and optimizer step, with the ranks starting each step together. The result (``--out``) holds ``mode, steps,
step_seconds_mean`` (the mean over steps of each step's median over the repeats), ``step_seconds_median``,
``step_seconds_cv`` (spread of the repeats' means), ``losses`` and ``task_losses`` (first repeat, warm-up
included), ``predicted_step_seconds`` (the simulator's iteration of the schedule run) and ``arrangement``; with
``--speed-checks N``, ``speed_checks{whole_model_seconds, optimizer_seconds}`` (the slowest rank's, every repeat's).

``--mode sequential,waves`` runs both modes in the same two processes, each with a model, runtime and optimizer of
its own: the warm-up steps of each (the last mode's first), then the measured steps in alternating blocks of
``--block`` steps (fulcrum.profile.alternating_blocks), so that a drift of the host's speed during the
measurement falls on both alike. The result is then ``modes{<mode>{...}}``, each mode's record as above with the
speed checks taken after its own steps (every ``N``-th of them), ``order`` (the blocks as the ranks ran them)
and ``speed_checks`` (all of them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

MODES = ("sequential", "waves", "reference")
DTYPE = "fp32"  # what the CPU trains in


def fulcrum_cli(given: str | None) -> str:
    for candidate in (given, os.environ.get("FULCRUM_CLI"), str(REPO / "build" / "fulcrum"), shutil.which("fulcrum")):
        if candidate and Path(candidate).is_file():
            return candidate
    sys.exit("run.py: the fulcrum command was not found: build it (make) or pass --fulcrum PATH")


def plan_command(a, workdir: Path, mode: str) -> list[str]:
    """The `fulcrum multitask` call that writes ``mode``'s schedule into ``workdir`` and prints its timing."""
    # --zero 0: every rank steps a whole optimizer over the parameters it holds (make_optimizer), not a shard.
    cmd = [a.fulcrum, "multitask", "--tasks", str(workdir / "tasks.json"), "--cluster", a.cluster, "--dtype", DTYPE,
           "--zero", "0", "--schedule-of", "sequential" if mode == "sequential" else "plan",
           "--save-schedule", str(workdir / f"{mode}.schedule.json"), "--json"]
    return cmd + (["--profile", a.profile] if a.profile else [])


def prepare(a, mode: str) -> dict:
    """Writes the task graph and the mode's schedule; returns the plan's prediction for the mode."""
    from model import TinyMultitask

    (a.workdir / "tasks.json").write_text(json.dumps(TinyMultitask().task_graph()))
    if mode == "reference":
        return {"schedule": None, "predicted_step_seconds": None, "arrangement": None}
    if a.schedule:
        return {"schedule": str(Path(a.schedule).resolve()), "predicted_step_seconds": None, "arrangement": "given"}
    done = subprocess.run(plan_command(a, a.workdir, mode), capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(f"run.py: fulcrum multitask failed with status {done.returncode}")
    plan = json.loads(done.stdout)
    timed = plan["baselines"]["sequential"] if mode == "sequential" else plan
    return {"schedule": str(a.workdir / f"{mode}.schedule.json"),
            "predicted_step_seconds": timed["iteration_seconds"],
            "arrangement": "sequential" if mode == "sequential" else plan["arrangement"]}


def make_optimizer(a, parameters):
    import torch

    parameters = list(parameters)
    if a.optimizer == "sgd":  # plain SGD keeps runs comparable to rounding: Adam magnifies near-zero gradients
        return torch.optim.SGD(parameters, lr=a.lr)
    return torch.optim.AdamW(parameters, lr=a.lr)


def freeze(a, model, step: int) -> None:
    """With ``--frozen-steps N``, the encoder's last layer takes no gradients for the first N steps and trains
    after, as a recipe that unfreezes part of a model partway through; with ``--frozen-encoder`` the whole encoder
    takes none, as when heads are trained on a frozen backbone."""
    for q in model.components["vision"][-1].parameters():
        q.requires_grad_(step >= a.frozen_steps)
    if a.frozen_encoder:
        for q in model.components["vision"].parameters():
            q.requires_grad_(False)


def reference(a) -> dict:
    """One process: every task's batch through the whole model, the losses summed, one optimizer step."""
    import torch

    from model import TinyMultitask, make_batches

    torch.set_num_threads(1)
    model = TinyMultitask(seed=a.seed)
    optimizer = make_optimizer(a, model.parameters())
    losses, task_losses = [], []
    for k in range(a.warmup + a.steps):
        freeze(a, model, k)
        for _ in range(a.accumulate):
            total, per_task = model.reference_loss(make_batches(model.config, k % a.steps, a.seed))
            total.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(total.detach()))
        task_losses.append(per_task)
    return {"mode": "reference", "steps": a.steps, "warmup_steps": a.warmup, "losses": losses,
            "task_losses": task_losses}


def worker(a, setups: dict) -> None:
    """Every mode of ``setups`` (mode: prepare's record) on this rank, each with a model, runtime and optimizer
    of its own made anew every repeat: the warm-up steps of each mode in turn, then the measured steps in
    alternating blocks (the module's docstring)."""
    import torch
    import torch.distributed as dist

    import fulcrum.profile as fp
    import fulcrum.runtime as fr
    from model import TinyMultitask, make_batches

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    graph = json.loads((a.workdir / "tasks.json").read_text())
    config = TinyMultitask().config
    order = [k % a.steps for k in range(a.warmup + a.steps)]
    batches = {s: make_batches(config, s, a.seed) for s in set(order)}  # made before the clock starts
    modes = list(setups)
    record = {"modes": {m: {"repeats": []} for m in modes}}
    check = None
    if a.speed_checks:
        # The host's speed beside the steps: the whole model on a copy of its own, on batches of their own seed.
        copy, calibration = TinyMultitask(seed=a.seed), make_batches(config, 0, seed=1000)
        check = fp.SpeedCheck(lambda: copy.reference_loss(calibration)[0].backward(), copy.parameters())
    for _ in range(a.repeats):
        runs = {}
        for m in modes:
            model = TinyMultitask(seed=a.seed)
            freeze(a, model, 0)  # frozen when the runtime is made, as a model loaded for its first stage would be
            runtime = fr.WaveRuntime(model, graph, setups[m]["schedule"], timeline=bool(a.trace))
            optimizer = make_optimizer(a, runtime.parameters())
            if a.zero_grad == "zero":  # gradients the model already holds, as after a checkpoint load or a warm-up
                for q in runtime.parameters():
                    q.grad = torch.zeros_like(q)
            rep = {"step_seconds": [None] * a.steps, "compute_seconds": [None] * a.steps, "losses": [],
                   "task_losses": []}
            runs[m] = (model, runtime, optimizer, rep)
            record["modes"][m]["repeats"].append(rep)

        def train(m: str, k: int) -> None:
            """Step ``k`` (warm-up ones first) of mode ``m``, timed from the ranks' common start."""
            model, runtime, optimizer, rep = runs[m]
            freeze(a, model, k)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(a.accumulate):
                result = runtime.step(batches[order[k]])
            optimizer.step()
            optimizer.zero_grad(set_to_none=a.zero_grad == "none")
            end = time.perf_counter()
            rep["losses"].append(result.loss)
            rep["task_losses"].append(list(result.task_losses))
            if k >= a.warmup:
                rep["step_seconds"][k - a.warmup] = end - start
                rep["compute_seconds"][k - a.warmup] = result.compute_seconds
                if check and (k - a.warmup) % a.speed_checks == 0:  # every N-th of this mode's measured steps
                    check(m)

        ran = fp.run_alternating(modes, a.warmup, a.steps, a.block, train)
        record.setdefault("order", ran)
        for _, runtime, _, _ in runs.values():
            runtime.close()  # its sync groups' communicators, before the next repeat makes its own
    if check:
        record["speed_checks"] = check.samples()
        for m in modes:
            record["modes"][m]["speed_checks"] = check.samples(m)
    (a.workdir / f"rank.{rank}.json").write_text(json.dumps(record))
    if a.trace:
        events = [None] * dist.get_world_size()
        dist.all_gather_object(events, list(runs[modes[0]][1].timeline.current))
        if rank == 0:
            fr.write_chrome_trace(a.trace, list(enumerate(events)), f"tiny_multitask {modes[0]}")
    fr.end_rank()


def launch(a) -> list[dict]:
    """Runs the two ranks (torch's launcher, gloo on loopback) and returns each one's record."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(Path(__file__).resolve()), *sys.argv[1:], "--workdir", str(a.workdir), "--worker"]
    done = subprocess.run(cmd, env=env)
    if done.returncode != 0:
        sys.exit(f"run.py: a rank failed (exit status {done.returncode})")
    return [json.loads((a.workdir / f"rank.{r}.json").read_text()) for r in range(2)]


def summarize(a, mode: str, setup: dict, ranks: list[dict]) -> dict:
    """Mode ``mode``'s slowest-rank time of each step, and its statistics over the measured steps and repeats.
    Every repeat trains the same steps from the same weights, so a step's median over the repeats filters out a
    slow spell of the machine."""
    checks = ranks[0]["modes"][mode].get("speed_checks")
    ranks = [rank["modes"][mode] for rank in ranks]
    by_repeat = [[max(rank["repeats"][r]["step_seconds"][s] for rank in ranks) for s in range(a.steps)]
                 for r in range(a.repeats)]
    means = [statistics.fmean(r) for r in by_repeat]
    per_step = [statistics.median(r[s] for r in by_repeat) for s in range(a.steps)]
    first = ranks[0]["repeats"][0]
    return {
        "mode": mode, "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
        "arrangement": setup["arrangement"], "predicted_step_seconds": setup["predicted_step_seconds"],
        "step_seconds_mean": statistics.fmean(per_step),
        "step_seconds_median": statistics.median(t for r in by_repeat for t in r),
        "step_seconds_cv": statistics.pstdev(means) / statistics.fmean(means) if len(means) > 1 else 0.0,
        "losses": first["losses"], "task_losses": first["task_losses"],
        "per_rank": [{"rank": i, "compute_seconds": statistics.fmean(
            c for rep in rank["repeats"] for c in rep["compute_seconds"])} for i, rank in enumerate(ranks)],
        "step_seconds_by_repeat": by_repeat,
        **({"speed_checks": checks} if checks is not None else {}),
        "command": "python examples/tiny_multitask/run.py " + " ".join(sys.argv[1:]),
    }


def mode_list(text: str) -> list[str]:
    modes = text.split(",")
    if any(m not in MODES for m in modes) or len(set(modes)) != len(modes) or ("reference" in modes and len(modes) > 1):
        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(MODES)}, or sequential and waves once each")
    return modes


def argument_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, type=mode_list, metavar="MODE[,MODE]",
                   help="sequential, waves or reference; sequential,waves runs both in alternating blocks")
    p.add_argument("--block", type=int, default=5,
                   help="measured steps of one mode before the next runs, with several modes (default 5)")
    p.add_argument("--steps", type=int, default=30, help="measured optimizer steps (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="steps run first and not measured (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="runs of the steps from the same start (default 3)")
    p.add_argument("--profile", help="profile table of the model's layers (fulcrum.profile) the plan is made with")
    p.add_argument("--cluster", default="cpu:2", help="cluster preset or file for the cost model (default cpu:2)")
    p.add_argument("--schedule", help="run this multitask schedule file instead of planning one (waves mode)")
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"))
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--zero-grad", default="none", choices=("none", "zero"),
                   help="what .grad holds between steps: None, or zero tensors the model holds from the start and the "
                        "optimizer's zero_grad zeroes in place (default none)")
    p.add_argument("--frozen-steps", type=int, default=0,
                   help="steps for which the encoder's last layer is frozen before it trains (default 0)")
    p.add_argument("--frozen-encoder", action="store_true", help="train the heads on a frozen encoder")
    p.add_argument("--accumulate", type=int, default=1,
                   help="runs of each step's batches whose gradients one optimizer step takes (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="folder for the run's inputs (default: a temporary one)")
    p.add_argument("--fulcrum", help="the fulcrum command (default: build/fulcrum, then PATH)")
    p.add_argument("--trace", help="write the last step's timeline of both ranks as Chrome trace JSON")
    p.add_argument("--speed-checks", type=int, default=0, metavar="N",
                   help="after every N-th measured step, outside its time, time the whole model and an optimizer step "
                        "on a copy of the model (``speed_checks`` in the result; compare.py calibrates with them; "
                        "default 0: none)")
    p.add_argument("--out", required=True)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> None:
    p = argument_parser()
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.repeats < 1 or a.speed_checks < 0 or a.block < 1:
        p.error("--steps, --repeats and --block must be at least 1, --warmup and --speed-checks at least 0")
    if len(a.mode) > 1 and (a.trace or a.schedule):
        p.error("--trace and --schedule take one mode")
    if a.worker:
        a.workdir = Path(a.workdir)
        worker(a, json.loads((a.workdir / "setup.json").read_text()))
        return
    if a.mode != ["reference"]:
        a.fulcrum = fulcrum_cli(a.fulcrum)
    if a.trace:
        a.trace = str(Path(a.trace).resolve())
    with tempfile.TemporaryDirectory(prefix="tiny_multitask_") as scratch:
        a.workdir = Path(a.workdir or scratch).resolve()
        a.workdir.mkdir(parents=True, exist_ok=True)
        setups = {m: prepare(a, m) for m in a.mode}
        if a.mode == ["reference"]:
            result = reference(a)
        else:
            (a.workdir / "setup.json").write_text(json.dumps(setups))
            ranks = launch(a)
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
    for m, row in (result["modes"].items() if len(a.mode) > 1 else [(a.mode[0], result)]):
        line = f"{m}: loss {row['losses'][0]:.4f} -> {row['losses'][-1]:.4f}"
        if m != "reference":
            line += (f", {row['step_seconds_mean'] * 1e3:.1f} ms per step (CV {row['step_seconds_cv']:.1%} over "
                     f"{a.repeats} repeats, {row['arrangement']}")
            if row["predicted_step_seconds"] is not None:
                line += f"; simulated {row['predicted_step_seconds'] * 1e3:.1f} ms"
        print(line + ("" if m == "reference" else ")"))


if __name__ == "__main__":
    main()
