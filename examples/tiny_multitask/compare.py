"""The simulator's predicted step time beside the measured one, for tiny_multitask's sequential and waves modes.

    python examples/tiny_multitask/compare.py --out table.json

1. Calibrates this machine on two ranks at once (both cores busy, as in training): every distinct layer of the
   model timed pass by pass at the token counts its slices run into a profile table, a gloo all-reduce fitted as
   latency + size / bandwidth, how much a collective in flight slows compute, and the optimizer step; the last
   three make the cluster file. Both tasks' forward and backward through the whole model, at their whole batches
   and at half of them, is timed after every round of the profile and set against the profile's prediction for
   it: every profile entry is corrected for its size and scaled by that ratio (calibrate_whole_model).
2. Plans each mode with `fulcrum multitask` on that profile and cluster (the `sequential` arrangement, and the
   arrangement `fulcrum multitask` keeps, the fastest it simulated).
3. Runs each mode for real (run.py) in rounds, sampling the host beside and between them as tiny_vlm's compare.py
   does (fulcrum.profile.measurement_order, SpeedCheck; ``--repeats``, ``--speed-checks``). Within a round both
   modes run in the same two processes in alternating blocks of ``--block`` steps (run.py --mode with both, in the
   round's order), so that the host's drift within the round falls on both alike; ``--block 0`` runs each mode in
   processes of its own, one after the other.
4. Scales the layer profile by the median of every whole-model sample and sets the optimizer step to the median of
   every optimizer sample (fulcrum.profile.calibration_across_runs), so the calibration spans the same minutes
   as the runs, and simulates each schedule that ran on them (`fulcrum multitask --load-schedule`).
5. Prints predicted and measured step times side by side and writes ``modes{<mode>{predicted_step_seconds,
   measured_step_seconds`` (the median over steps of each step's median over the rounds),
   ``measured_step_seconds_mean`` (the mean of the same), ``measured_cv`` (the spread of the rounds' means),
   ``prediction_error, within_tolerance, arrangement, planned_step_seconds`` (the simulator's iteration on the
   calibration before the runs)``, ...}}``, ``speedup`` (sequential's measured step time over waves') and
   ``order`` (the modes each round ran, in turn, or led its blocks with) and ``block``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402

RUN_MODES = ("sequential", "waves")


def calibrate_rank(out_dir: Path, rounds: int) -> None:
    """One of the two calibrating ranks: both profile (so the cores are as busy as in training), rank 0 writes."""
    import torch
    import torch.distributed as dist

    import fulcrum.profile as fp
    from fulcrum.runtime import end_rank
    from model import TinyMultitask

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    model = TinyMultitask()
    graph = model.task_graph()
    # Every slice's rows: a task's whole batch on one device, or half of it on each.
    patches = model.config.patches
    counts = sorted({patches * n for _, batch, _, _ in model.config.tasks for n in (batch, batch // 2)} | {patches})
    # The whole model is timed after every round of the profile, so a slow spell of the machine moves both; at
    # the tasks' whole batches and at half of them, one pass of each in turn, for the size correction
    # (calibrate_whole_model): the ratio of a pair is taken in the same second, whatever the host's speed.
    # The batches are made once, before any clock starts, as the runs' are: a pass on tensors just made runs at
    # another speed (the two sizes' ratio moved by 2-10% on this host).
    whole, half = [], []
    whole_batches, half_batches = calibration_batches(model, 1.0), calibration_batches(model, 0.5)

    def after_round():
        for k in range(4):
            pair = (whole_model_seconds(model, warmup=0, repeats=1, batches=whole_batches),
                    whole_model_seconds(model, warmup=0, repeats=1, batches=half_batches))
            if k:  # the first pair warms up
                whole.extend(pair[0])
                half.extend(pair[1])

    table = fp.profile_model(model, graph["model"], counts, dtype=run.DTYPE, warmup=2, repeats=3, rounds=rounds,
                             after_round=after_round)
    calibration = fp.calibrate_cpu(model.parameters())
    if dist.get_rank() == 0:
        (out_dir / "whole_model.json").write_text(json.dumps({
            "seconds": statistics.median(whole), "samples": whole,
            "half_batch_seconds": statistics.median(half), "half_batch_samples": half,
            "half_batch_ratio": statistics.median(h / w for h, w in zip(half, whole))}) + "\n")
        fp.write_profile(out_dir / "profile.json", table)
        (out_dir / "cluster.json").write_text(json.dumps(calibration.cluster(), indent=1) + "\n")
        (out_dir / "calibration.json").write_text(json.dumps(calibration.record(), indent=1) + "\n")
    end_rank()


def check_rank(out_file: Path) -> None:
    """One of the two ranks that time the whole model and the optimizer step again between rounds of the runs;
    rank 0 writes them."""
    import torch
    import torch.distributed as dist

    import fulcrum.profile as fp
    from fulcrum.runtime import end_rank
    from model import TinyMultitask

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    model = TinyMultitask()
    whole = whole_model_seconds(model)
    optimizer = fp.time_optimizer_step(model.parameters())
    if dist.get_rank() == 0:
        fp.write_check(out_file, whole, optimizer)
    end_rank()


def calibration_batches(model, scale: float = 1.0) -> list[dict]:
    """Both tasks' batches of their own seed (not the runs'), ``scale`` of each task's samples."""
    from model import make_batches

    return [{k: v[:round(v.shape[0] * scale)] for k, v in b.items()}
            for b in make_batches(model.config, 0, seed=1000)]


def whole_model_seconds(model, warmup: int = 1, repeats: int = 3, batches: Optional[list] = None) -> list[float]:
    """Seconds of each of ``repeats`` forward and backward passes of both tasks' ``batches`` (default: their
    whole calibration batches) through the whole model, on every rank at once (both cores busy, as in training),
    each the slowest rank's (a step waits for it). The profile times each layer alone; one autograd graph over
    all of them also pays for its allocation and the caches refilled between layers."""
    import torch.distributed as dist

    import fulcrum.profile as fp

    batches = batches if batches is not None else calibration_batches(model)
    times = []
    for k in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        model.reference_loss(batches)[0].backward()
        elapsed = fp.slowest_rank_seconds(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        if k >= warmup:
            times.append(elapsed)
    return times


def calibrate_whole_model(a) -> dict:
    """Sets the measured whole-model seconds against what the layer profile predicts for them (`fulcrum
    multitask` on one device, whose only arrangement runs every operator in turn, less the calibrated optimizer
    step), at the tasks' whole batches and at half of them. Layers timed one by one need not stand in the whole
    model's ratio between the two sizes (caches kept warm between their runs, the host's speed moving between
    the profile's token counts), so every profile entry is first multiplied by a size correction, 1 at the whole
    batches' tokens and at half of them the factor that makes the profile's half-to-whole ratio the measured one
    (the median over pairs of passes taken one after the other; fulcrum.profile.size_correction), then scaled by
    the measured whole model over the corrected profile's prediction. profile.json becomes the calibrated
    table, profile_layers.json keeps the layers' own."""
    import fulcrum.profile as fp

    from model import TinyMultitask

    work = a.workdir / "whole_model"
    work.mkdir(exist_ok=True)
    model = TinyMultitask()
    graph = model.task_graph()
    half_graph = json.loads(json.dumps(graph))
    for t in half_graph["tasks"]:
        t["batch"] //= 2
    cluster = json.loads((a.workdir / "cluster.json").read_text())
    cluster["preset"] = "cpu:1"
    (work / "cluster.json").write_text(json.dumps(cluster))
    layers_file = a.workdir / "profile_layers.json"
    (a.workdir / "profile.json").replace(layers_file)
    layers = json.loads(layers_file.read_text())
    optimizer = json.loads((a.workdir / "calibration.json").read_text())["optimizer_seconds"]

    def predicted(tasks: dict, table: dict) -> float:
        (work / "tasks.json").write_text(json.dumps(tasks))
        fp.write_profile(work / "profile.json", table)
        out = subprocess.run([a.fulcrum, "multitask", "--tasks", str(work / "tasks.json"), "--cluster",
                              str(work / "cluster.json"), "--profile", str(work / "profile.json"), "--dtype",
                              run.DTYPE, "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            sys.stderr.write(out.stderr)
            sys.exit("compare.py: planning the whole model on one device failed")
        return json.loads(out.stdout)["iteration_seconds"] - optimizer

    measured = json.loads((a.workdir / "whole_model.json").read_text())
    whole, half_ratio = measured["seconds"], measured["half_batch_ratio"]
    # Tokens a layer pass holds on average over the tasks, at whole and at half batches.
    tokens = model.config.patches * statistics.fmean(t["batch"] for t in graph["tasks"])
    correction = [[tokens / 2, 1.0], [tokens, 1.0]]
    for _ in range(4):  # the half-batch prediction moves about in proportion to its correction
        table = fp.scaled_profile(layers, 1.0, correction)
        correction[0][1] *= half_ratio / (predicted(half_graph, table) / predicted(graph, table))
    corrected = fp.scaled_profile(layers, 1.0, correction)
    prediction, half_prediction = predicted(graph, corrected), predicted(half_graph, corrected)
    factor = whole / prediction
    fp.write_profile(a.workdir / "profile.json", fp.scaled_profile(layers, factor, correction))
    return {"measured_seconds": whole, "predicted_seconds": prediction, "factor": factor,
            "half_batch_measured_ratio": half_ratio, "half_batch_predicted_seconds": half_prediction,
            "size_correction": correction}


def run_dir(a, mode: str) -> Path:
    """The folder the runs of ``mode`` plan and save its schedule in."""
    return a.workdir / ("interleaved" if a.block else mode)


def run_args(a, modes: list[str], out: Path) -> list[str]:
    return ["--mode", ",".join(modes), "--block", str(a.block or a.steps), "--steps", str(a.steps), "--warmup",
            str(a.warmup), "--repeats", "1",
            "--profile", str(a.workdir / "profile.json"), "--cluster", str(a.workdir / "cluster.json"),
            "--seed", str(a.seed), "--workdir", str(run_dir(a, modes[0])), "--fulcrum", a.fulcrum, "--out", str(out),
            "--speed-checks", str(a.speed_checks)]


def launch_ranks(args: list[str], what: str) -> None:
    """Two ranks of this script with ``args``, through torch's launcher (gloo on loopback, one thread each)."""
    import os

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(Path(__file__).resolve()), *args], env=env)
    if done.returncode != 0:
        sys.exit(f"compare.py: {what} failed (exit status {done.returncode})")


def simulated_seconds(a, mode: str) -> float:
    """The simulator's iteration of the schedule ``mode`` ran, on the current profile and cluster file."""
    work = run_dir(a, mode)
    out = subprocess.run([a.fulcrum, "multitask", "--tasks", str(work / "tasks.json"), "--cluster",
                          str(a.workdir / "cluster.json"), "--profile", str(a.workdir / "profile.json"), "--dtype",
                          run.DTYPE, "--load-schedule", str(work / f"{mode}.schedule.json"), "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        sys.exit(f"compare.py: simulating {mode}'s schedule failed")
    return json.loads(out.stdout)["iteration_seconds"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3, help="rounds over the modes (default 3)")
    p.add_argument("--profile-rounds", type=int, default=5, help="passes over the profile grid (default 5)")
    p.add_argument("--speed-checks", type=int, default=1, metavar="N",
                   help="time the whole model and the optimizer step after every N-th measured step of each mode, "
                        "outside the step's time (run.py --speed-checks; default 1, 0: only between rounds)")
    p.add_argument("--block", type=int, default=5, metavar="STEPS",
                   help="measured steps of one mode before the other runs, both in the same processes (default 5; "
                        "0: each mode in processes of its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="folder for the calibration and the runs (default: a temporary one)")
    p.add_argument("--fulcrum", help="the fulcrum command (default: build/fulcrum, then PATH)")
    p.add_argument("--calibrate-rank", help=argparse.SUPPRESS)
    p.add_argument("--check-rank", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.calibrate_rank:
        calibrate_rank(Path(a.calibrate_rank), a.profile_rounds)
        return
    if a.check_rank:
        check_rank(Path(a.check_rank))
        return
    if not a.out:
        p.error("--out is required")
    if a.steps < 1 or a.repeats < 1 or a.warmup < 0 or a.speed_checks < 0 or a.block < 0:
        p.error("--steps and --repeats must be at least 1, --warmup, --speed-checks and --block at least 0")
    a.fulcrum = run.fulcrum_cli(a.fulcrum)
    import fulcrum.profile as fp

    with tempfile.TemporaryDirectory(prefix="tiny_multitask_compare_") as scratch:
        a.workdir = Path(a.workdir or scratch).resolve()
        a.workdir.mkdir(parents=True, exist_ok=True)
        print("calibrating: layer profile, all-reduce, compute slowdown, optimizer step", flush=True)
        launch_ranks(["--calibrate-rank", str(a.workdir), "--profile-rounds", str(a.profile_rounds)], "calibration")
        whole_model = calibrate_whole_model(a)
        calibration = json.loads((a.workdir / "calibration.json").read_text())
        calibration["whole_model"] = whole_model
        (a.workdir / "calibration.json").write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"whole model: {whole_model['measured_seconds']:.4f} s measured, {whole_model['predicted_seconds']:.4f} "
              f"s from the layer profile corrected for size (x{whole_model['size_correction'][0][1]:.3f} at half "
              f"batches): its entries scaled by {whole_model['factor']:.3f}", flush=True)
        rounds: dict[str, list[dict]] = {m: [] for m in RUN_MODES}
        checks: list[Path] = []
        order = fp.measurement_order(RUN_MODES, a.repeats)
        for r, round_modes in enumerate(order):
            for group in [round_modes] if a.block else [[m] for m in round_modes]:
                name = "+".join(group)
                out = a.workdir / f"{name}.{r}.json"
                done = subprocess.run([sys.executable, str(HERE / "run.py"), *run_args(a, group, out)], text=True)
                if done.returncode != 0:
                    sys.exit(f"compare.py: run.py --mode {','.join(group)} failed")
                result = json.loads(out.read_text())
                for m, row in (result["modes"] if len(group) > 1 else {group[0]: result}).items():
                    rounds[m].append(row)
                if a.speed_checks:  # the whole model and the optimizer step timed beside the run's steps
                    checks.append(a.workdir / f"check.{name}.{r}.json")
                    fp.write_check(checks[-1], **result["speed_checks"])
            checks.append(a.workdir / f"check.{r}.json")
            launch_ranks(["--check-rank", str(checks[-1])], "timing the whole model between rounds")
        across = fp.recalibrate_folder(a.workdir, checks)
        print(f"across the runs: whole model {across['whole_model_seconds']:.4f} s (profile scaled by "
              f"{across['factor']:.3f}), optimizer step {across['optimizer_seconds'] * 1e3:.1f} ms", flush=True)
        predicted = {m: simulated_seconds(a, m) for m in RUN_MODES}
        table = {"calibration": json.loads((a.workdir / "calibration.json").read_text()),
                 "profile": json.loads((a.workdir / "profile.json").read_text()),
                 "cluster": json.loads((a.workdir / "cluster.json").read_text()),
                 "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
                 "order": order, "block": a.block, "modes": {}}
    for m in RUN_MODES:
        # Each round's step times are one repeat: a step's median over the rounds, then the median over steps, so
        # that a slow spell of the machine (every pass 1.7-1.8x its usual time for a few steps) moves it little.
        by_round = [x["step_seconds_by_repeat"][0] for x in rounds[m]]
        per_step = [statistics.median(r[s] for r in by_round) for s in range(a.steps)]
        means = [statistics.fmean(r) for r in by_round]
        measured = statistics.median(per_step)
        cv = statistics.pstdev(means) / statistics.fmean(means) if len(means) > 1 else 0.0
        error = predicted[m] / measured - 1
        table["modes"][m] = {
            "predicted_step_seconds": predicted[m], "measured_step_seconds": measured,
            "planned_step_seconds": rounds[m][0]["predicted_step_seconds"],
            "measured_step_seconds_mean": statistics.fmean(per_step), "measured_cv": cv,
            "prediction_error": error, "within_tolerance": abs(error) <= max(0.15, 3 * cv),
            "measured_step_seconds_by_round": means, "arrangement": rounds[m][0]["arrangement"],
            "losses": rounds[m][0]["losses"], "per_rank": rounds[m][0]["per_rank"]}
    modes = table["modes"]
    table["speedup"] = modes["sequential"]["measured_step_seconds"] / modes["waves"]["measured_step_seconds"]
    table["predicted_speedup"] = modes["sequential"]["predicted_step_seconds"] / modes["waves"]["predicted_step_seconds"]
    out = Path(a.out)
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"\n{'mode':<12} {'arrangement':<12} {'planned s':>9} {'predicted s':>11} {'measured s':>10} {'(mean)':>8} "
          f"{'CV':>6} {'error':>7}")
    for m, row in modes.items():
        print(f"{m:<12} {row['arrangement']:<12} {row['planned_step_seconds']:>9.4f} "
              f"{row['predicted_step_seconds']:>11.4f} {row['measured_step_seconds']:>10.4f} "
              f"{row['measured_step_seconds_mean']:>8.4f} {row['measured_cv']:>6.1%} {row['prediction_error']:>+7.1%}"
              f"{'' if row['within_tolerance'] else '  outside max(15%, 3 CV)'}")
    print(f"waves over sequential: {table['speedup']:.3f}x measured, {table['predicted_speedup']:.3f}x simulated")


if __name__ == "__main__":
    main()
