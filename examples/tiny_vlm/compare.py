"""The simulator's predicted step time beside the measured one, for every mode of run.py.

    python examples/tiny_vlm/compare.py --out table.json

1. Calibrates this machine on two ranks at once (both cores busy, as in training): every layer of tiny_vlm
   timed pass by pass into a profile table, a gloo all-reduce fitted as latency + size / bandwidth, how much a
   collective in flight slows compute, and the optimizer step; the last three make the cluster file. The whole
   model's forward and backward over calibration micro-batches (not the runs') is timed after every round of
   the profile and set against the profile's prediction for them; every profile entry is scaled by that ratio.
2. Runs each mode for real (run.py), ``--repeats`` rounds with the modes interleaved, odd rounds in reverse
   (fulcrum.profile.measurement_order). Within a round the modes of one layout (the pp modes; the dp modes) run
   in the same two processes in alternating blocks of ``--block`` steps (run.py --mode pp-megatron,pp-planned,...),
   so that the host's drift within the round falls on all of them alike; ``--block 0`` runs each mode in
   processes of its own. After every ``--speed-checks``-th measured step (outside its time) and
   after every round the whole model and the optimizer step are timed again, never in the runs' own steps, each
   sample the slowest rank's (fulcrum.profile.SpeedCheck, slowest_rank_seconds): a shared host's speed moves
   within a run, by a third or more within minutes.
3. Simulates each mode's measured steps with the profile and the cluster file (`fulcrum simulate`: same
   samples, batches and schedule): first on the calibration before the runs (``planned_step_seconds``), then,
   as the prediction, with the profile scaled by the median of every whole-model sample and the optimizer step
   the median of every optimizer sample (fulcrum.profile.recalibrate_folder), so the calibration spans the same
   minutes as the runs.
4. Prints predicted and measured step times side by side and writes
   ``modes{<mode>{predicted_step_seconds, planned_step_seconds, measured_step_seconds, measured_cv,
   tokens_per_second, ...}}``, ``order`` (the modes of each round in measurement_order's turn; with ``--block``,
   the modes of one layout run together where the first of them stands, in that order) and ``block``.

The measured step time is the mean over the measured steps of each step's median over the rounds (run.timing);
``measured_cv`` is the spread of the rounds' means.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402

# Token counts the profile covers: an encoder's whole tiles (64 patch tokens each), the projector's merged
# tokens, the LLM's sequences; they span what a micro-batch of run.py holds.
PROFILE_TOKENS = {"vision": [64, 256, 640, 1280, 2560], "projector": [32, 128, 320, 640, 1280],
                  "llm": [64, 128, 256, 512, 1024]}


def calibrate_rank(out_dir: Path, rounds: int) -> None:
    """One of the two calibrating ranks: both profile (so the cores are as busy as in training), rank 0 writes."""
    import torch
    import torch.distributed as dist

    import fulcrum.profile as fp
    from model import TinyVlm, TinyVlmConfig

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = TinyVlm(TinyVlmConfig())
    model_json = model.fulcrum_model()
    # The whole model is timed after every round of the profile, so a slow spell of the machine moves both.
    whole = []
    table = fp.profile_model(model, model_json, PROFILE_TOKENS, dtype=run.DTYPE, warmup=2, repeats=3,
                             rounds=rounds, after_round=lambda: whole.extend(whole_model_seconds(model)))
    calibration = fp.calibrate_cpu(model.parameters())
    if rank == 0:
        (out_dir / "whole_model.json").write_text(json.dumps({"seconds": statistics.median(whole),
                                                             "samples": whole}) + "\n")
        fp.write_profile(out_dir / "profile.json", table)
        (out_dir / "cluster.json").write_text(json.dumps(calibration.cluster(), indent=1) + "\n")
        (out_dir / "calibration.json").write_text(json.dumps(calibration.record(), indent=1) + "\n")
    from fulcrum.runtime import end_rank

    end_rank()


def check_rank(out_file: Path) -> None:
    """One of the two ranks that time the whole model and the optimizer step again between rounds of the runs;
    rank 0 writes them."""
    import torch
    import torch.distributed as dist

    import fulcrum.profile as fp
    from fulcrum.runtime import end_rank
    from model import TinyVlm, TinyVlmConfig

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    model = TinyVlm(TinyVlmConfig())
    whole = whole_model_seconds(model)
    optimizer = fp.time_optimizer_step(model.parameters())
    if dist.get_rank() == 0:
        fp.write_check(out_file, whole, optimizer)
    end_rank()


def whole_model_seconds(model, warmup: int = 1, repeats: int = 3) -> list[float]:
    """Seconds of each of ``repeats`` forward and backward passes of the whole model over the calibration
    micro-batches, on every rank at once (both cores busy, as in training), each the slowest rank's (a step waits
    for it). The profile times each layer alone; one autograd graph over all of them also pays for its allocation
    and the caches refilled between layers."""
    import torch.distributed as dist

    import fulcrum.profile as fp

    batches = run.calibration_batches(model.config)
    times = []
    for k in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        run.whole_model_pass(model, batches)
        elapsed = fp.slowest_rank_seconds(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        if k >= warmup:
            times.append(elapsed)
    return times


def calibrate_whole_model(a) -> dict:
    """Sets the measured whole-model seconds against what the layer profile predicts for the same micro-batches
    (`fulcrum simulate` on one device, the optimizer step left out) and scales every profile entry by their
    ratio: profile.json becomes the calibrated table, profile_layers.json keeps the layers' own."""
    import fulcrum.profile as fp

    from data import scaled_lengths, write_lengths
    from model import TinyVlm, TinyVlmConfig

    work = a.workdir / "whole_model"
    work.mkdir(exist_ok=True)
    config = TinyVlmConfig()
    write_lengths(work / "lengths.json",
                  scaled_lengths(run.CALIBRATION_SAMPLES, config, seed=run.CALIBRATION_SEED))
    (work / "tiny.json").write_text(json.dumps(TinyVlm(config).fulcrum_model()))
    cluster = json.loads((a.workdir / "cluster.json").read_text())
    cluster["preset"] = "cpu:1"
    (work / "cluster.json").write_text(json.dumps(cluster))
    steps = run.CALIBRATION_SAMPLES // run.CALIBRATION_GROUP
    layers = a.workdir / "profile_layers.json"
    (a.workdir / "profile.json").replace(layers)
    out = subprocess.run([a.fulcrum, "simulate", "--model", str(work / "tiny.json"), "--cluster",
                          str(work / "cluster.json"), "--profile", str(layers), "--dtype", run.DTYPE, "--data",
                          str(work / "lengths.json"), "--batcher", "random-packed", "--gbs",
                          str(run.CALIBRATION_GROUP), "--mbs", str(run.CALIBRATION_GROUP), "--dp", "1",
                          "--recompute", "none", "--step", "0", "--steps", str(steps), "--json", "--quiet"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        sys.exit("compare.py: simulating the calibration micro-batches failed")
    doc = json.loads(out.stdout)
    predicted = sum(doc["data"]["iteration_seconds_per_step"]) - steps * doc["optimizer_seconds"]
    measured = json.loads((a.workdir / "whole_model.json").read_text())["seconds"]
    factor = measured / predicted
    fp.write_profile(a.workdir / "profile.json", fp.scaled_profile(json.loads(layers.read_text()), factor))
    return {"measured_seconds": measured, "predicted_seconds": predicted, "factor": factor,
            "micro_batches": steps, "samples_per_micro_batch": run.CALIBRATION_GROUP}


def run_args(a, modes: list[str], workdir: Path, out: Path) -> list[str]:
    """run.py's arguments for ``modes`` (of one layout) run together, planned in ``workdir`` (one mode) or in its
    ``<mode>/`` folders (several)."""
    mode = modes[0]
    args = ["--mode", ",".join(modes), "--block", str(a.block or a.steps), "--steps", str(a.steps), "--warmup",
            str(a.warmup), "--repeats", "1", "--profile", str(a.workdir / "profile.json"), "--cluster",
            str(a.workdir / "cluster.json"),
            "--seed", str(a.seed), "--workdir", str(workdir), "--fulcrum", a.fulcrum, "--out", str(out),
            "--speed-checks", str(a.speed_checks)]
    if a.no_fill:
        args.append("--no-fill")
    if mode.startswith("dp") and a.dp_samples_per_step:
        args += ["--samples-per-step", str(a.dp_samples_per_step)]
    if mode.startswith("pp") and a.pp_samples_per_step:
        args += ["--samples-per-step", str(a.pp_samples_per_step)]
    return args


def predicted_seconds(a, mode: str, workdir: Path) -> dict:
    parser = run.argument_parser()
    args = parser.parse_args(run_args(a, [mode], workdir, workdir / "unused.json"))
    run.fill_defaults(args)
    out = subprocess.run(run.simulate_command(args, mode, workdir), capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        sys.exit(f"compare.py: simulating {mode} failed")
    doc = json.loads(out.stdout)
    return {"predicted_step_seconds": doc["data"]["iteration_seconds_mean"], "simulated": doc}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out")
    p.add_argument("--modes", default=",".join(run.MODES), help="comma-separated modes (default all)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3, help="rounds over the modes (default 3)")
    p.add_argument("--dp-samples-per-step", type=int, help="run.py's --samples-per-step for the dp modes")
    p.add_argument("--pp-samples-per-step", type=int, help="run.py's --samples-per-step for the pp modes")
    p.add_argument("--profile-rounds", type=int, default=5, help="passes over the profile grid (default 5)")
    p.add_argument("--speed-checks", type=int, default=3, metavar="N",
                   help="time the whole model and the optimizer step after every N-th measured step of every mode, "
                        "outside the step's time (run.py --speed-checks; default 3, 0: only between rounds)")
    p.add_argument("--block", type=int, default=5, metavar="STEPS",
                   help="measured steps of one mode before the next of its layout runs, all in the same processes "
                        "(default 5; 0: each mode in processes of its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-fill", action="store_true", help="run.py --no-fill: encoder passes only where planned")
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
    modes = a.modes.split(",")
    for m in modes:
        if m not in run.MODES:
            p.error(f"--modes: unknown mode {m!r} (choose from {', '.join(run.MODES)})")
    if a.steps < 1 or a.repeats < 1 or a.warmup < 0 or a.speed_checks < 0 or a.block < 0:
        p.error("--steps and --repeats must be at least 1, --warmup, --speed-checks and --block at least 0")
    a.fulcrum = run.fulcrum_cli(a.fulcrum)
    import fulcrum.profile as fp

    with tempfile.TemporaryDirectory(prefix="tiny_vlm_compare_") as scratch:
        a.workdir = Path(a.workdir or scratch).resolve()
        a.workdir.mkdir(parents=True, exist_ok=True)
        print("calibrating: layer profile, all-reduce, compute slowdown, optimizer step", flush=True)
        run.start_ranks(Path(__file__).resolve(), ["--calibrate-rank", str(a.workdir),
                                                   "--profile-rounds", str(a.profile_rounds)])
        whole_model = calibrate_whole_model(a)
        calibration = json.loads((a.workdir / "calibration.json").read_text())
        calibration["whole_model"] = whole_model
        (a.workdir / "calibration.json").write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"whole model: {whole_model['measured_seconds']:.4f} s measured, {whole_model['predicted_seconds']:.4f} s "
              f"from the layer profile: its entries scaled by {whole_model['factor']:.3f}", flush=True)
        rounds: dict[str, list[dict]] = {m: [] for m in modes}
        checks: list[Path] = []
        order = fp.measurement_order(modes, a.repeats)
        for r, round_modes in enumerate(order):
            for group in layout_groups(round_modes) if a.block else [[m] for m in round_modes]:
                name = "+".join(group)
                out = a.workdir / f"{name}.{r}.json"
                # Each mode plans in a.workdir / mode, alone or beside the others of its layout.
                workdir = a.workdir / group[0] if len(group) == 1 else a.workdir
                done = subprocess.run([sys.executable, str(HERE / "run.py"), *run_args(a, group, workdir, out)],
                                      text=True)
                if done.returncode != 0:
                    sys.exit(f"compare.py: run.py --mode {','.join(group)} failed")
                result = json.loads(out.read_text())
                for m, row in (result["modes"] if len(group) > 1 else {group[0]: result}).items():
                    rounds[m].append(row)
                if a.speed_checks:  # the whole model and the optimizer step timed beside the run's steps
                    checks.append(a.workdir / f"check.{name}.{r}.json")
                    fp.write_check(checks[-1], **result["speed_checks"])
            checks.append(a.workdir / f"check.{r}.json")
            run.start_ranks(Path(__file__).resolve(), ["--check-rank", str(checks[-1])])
        planned = {m: predicted_seconds(a, m, a.workdir / m)["predicted_step_seconds"] for m in modes}
        across = fp.recalibrate_folder(a.workdir, checks)
        print(f"across the runs: whole model {across['whole_model_seconds']:.4f} s (profile scaled by "
              f"{across['factor']:.3f}), optimizer step {across['optimizer_seconds'] * 1e3:.1f} ms", flush=True)
        table = {"calibration": json.loads((a.workdir / "calibration.json").read_text()),
                 "profile": json.loads((a.workdir / "profile.json").read_text()),
                 "cluster": json.loads((a.workdir / "cluster.json").read_text()),
                 "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
                 "order": order, "block": a.block, "modes": {}}
        for m in modes:
            stats = run.timing([t for x in rounds[m] for t in x["step_seconds_by_repeat"]],
                               rounds[m][0]["real_tokens_per_step"])
            measured, cv = stats["step_seconds_mean"], stats["step_seconds_cv"]
            prediction = predicted_seconds(a, m, a.workdir / m)
            error = prediction["predicted_step_seconds"] / measured - 1
            table["modes"][m] = {
                "predicted_step_seconds": prediction["predicted_step_seconds"], "planned_step_seconds": planned[m],
                "measured_step_seconds": measured, "measured_cv": cv, "prediction_error": error,
                "within_tolerance": abs(error) <= max(0.15, 3 * cv),
                "measured_step_seconds_median": stats["step_seconds_median"],
                "tokens_per_second": stats["tokens_per_second"],
                "tokens_per_second_by_round": stats["tokens_per_second_by_repeat"],
                "losses": rounds[m][0]["losses"], "held_out_losses": rounds[m][0]["held_out_losses"],
                "per_rank": rounds[m][0]["per_rank"],
                "engine": rounds[m][0]["engine"], "stages": rounds[m][0]["stages"],
                "schedule": rounds[m][0]["schedule"], "encoder": rounds[m][0]["encoder"],
                "samples_per_step": rounds[m][0]["samples_per_step"],
                "breakdown": prediction["simulated"]["breakdown"]}
    table["speedups"] = speedups(table["modes"])
    out = Path(a.out)
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"\n{'mode':<18} {'planned s':>9} {'predicted s':>11} {'measured s':>10} {'CV':>6} {'error':>7} "
          f"{'tokens/s':>9} {'held-out loss':>13}")
    for m, row in table["modes"].items():
        held = row["held_out_losses"]
        print(f"{m:<18} {row['planned_step_seconds']:>9.4f} {row['predicted_step_seconds']:>11.4f} "
              f"{row['measured_step_seconds']:>10.4f} "
              f"{row['measured_cv']:>6.1%} {row['prediction_error']:>+7.1%} {row['tokens_per_second']:>9.0f} "
              f"{held[-1][1] if held else float('nan'):>13.3f}"
              f"{'' if row['within_tolerance'] else '  outside max(15%, 3 CV)'}")
    for name, ratio in table["speedups"].items():
        print(f"{name}: {ratio:.3f}x real tokens/s")


def layout_groups(modes: list[str]) -> list[list[str]]:
    """``modes`` in their order, the modes of one layout (data-parallel and pipeline degrees) together, each group
    where its first mode stands: run.py runs a group in one pair of processes."""
    groups: dict[tuple, list[str]] = {}
    for m in modes:
        groups.setdefault(run.MODES[m][:2], []).append(m)
    return list(groups.values())


def speedups(modes: dict) -> dict:
    """Real tokens/s of one mode over another, for the pairs the example is about."""
    pairs = [("dp-fulcrum", "dp-random"), ("dp-fulcrum", "dp-random-packed"), ("pp-planned", "pp-megatron"),
             ("pp-bubbles", "pp-planned")]
    return {f"{a} / {b}": modes[a]["tokens_per_second"] / modes[b]["tokens_per_second"]
            for a, b in pairs if a in modes and b in modes}


if __name__ == "__main__":
    main()
