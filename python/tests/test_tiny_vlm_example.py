"""examples/tiny_vlm: run.py's short mode on 2 gloo processes, and compare.py's predicted-against-measured table."""

import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("torch")

EXAMPLE = REPO / "examples" / "tiny_vlm"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", GLOO_SOCKET_IFNAME="lo")


def run_example(script, *args, timeout=240):
    done = subprocess.run([sys.executable, str(EXAMPLE / script), *map(str, args)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done


def short_run(tmp_path, mode, *extra):
    out, work = tmp_path / f"{mode}.json", tmp_path / mode
    run_example("run.py", "--mode", mode, "--steps", 2, "--warmup", 1, "--repeats", 1, "--workdir", work,
                "--out", out, *extra)
    return json.loads(out.read_text()), work


def step_samples(work, step):
    """Every sample id of a step of the run's batch plan, and the lengths file they index."""
    plan = json.loads((work / "batches.json").read_text())
    lengths = json.loads((work / "lengths.json").read_text())
    return [i for rank in plan["steps"][step] for mb in rank for i in mb], lengths


@pytest.mark.parametrize("mode", ["dp-random", "dp-fulcrum"])
def test_short_data_parallel_run(tmp_path, mode):
    result, work = short_run(tmp_path, mode, "--eval-every", 1)
    assert result["mode"] == mode and result["steps"] == 2 and result["dp"] == 2 and result["engine"] == "ddp"
    assert result["batcher"] == mode.split("-", 1)[1]
    # Losses of the warm-up step and both measured ones, finite, from the untrained model's ~ln(vocab).
    assert len(result["losses"]) == 3 and all(math.isfinite(x) for x in result["losses"])
    assert abs(result["losses"][0] - math.log(512)) < 1.0
    # Real tokens are the plan's samples' token counts over both ranks, whatever the padding computed.
    for k in range(2):  # the epoch's two steps, measured after a warm-up step on the first
        ids, lengths = step_samples(work, k)
        assert result["real_tokens_per_step"][k] == sum(lengths[i]["token_num"] for i in ids)
    seconds = result["step_seconds_by_repeat"][0]
    assert result["tokens_per_second"] == pytest.approx(sum(result["real_tokens_per_step"]) / sum(seconds))
    assert result["step_seconds_mean"] == pytest.approx(sum(seconds) / 2)
    assert len(result["per_rank"]) == 2
    for rank in result["per_rank"]:
        assert 0 < rank["compute_seconds"] <= max(seconds) * 1.01 and rank["wait_seconds"] >= 0
    # The held-out loss before training and after each of the 3 steps: the untrained model's ~ln(vocab),
    # falling as it learns.
    held = result["held_out_losses"]
    assert [k for k, _ in held] == [0, 1, 2, 3]
    assert abs(held[0][1] - math.log(512)) < 1.0 and held[-1][1] < held[0][1] - 0.02


def test_short_planned_pipeline_run(tmp_path):
    result, work = short_run(tmp_path, "pp-planned")
    plan = json.loads((work / "schedule.json").read_text())
    # The runtime ran the planner's stages and schedule: two stages covering the 20 layers in order.
    assert result["pp"] == 2 and result["stages"] == plan["schedule"]["stages"]
    assert result["stages"][0][0] == 0 and result["stages"][0][1] == result["stages"][1][0]
    assert result["stages"][1][1] == 20
    assert result["schedule"] == plan["plan"]["schedule"]
    assert all(math.isfinite(x) for x in result["losses"]) and result["tokens_per_second"] > 0
    # The held-out loss runs the whole model on rank 0 with the second stage's weights sent over from rank 1.
    held = result["held_out_losses"]
    assert [k for k, _ in held] == [0, 3] and held[1][1] < held[0][1]


def test_encoder_in_the_pipelines_bubbles_trains_as_the_planned_pipeline(tmp_path):
    bubbles, work = short_run(tmp_path, "pp-bubbles")
    plan = json.loads((work / "schedule.json").read_text())["schedule"]
    # The encoder (patch embedding, 6 blocks, norm) and projector on their own plan over both ranks, the LLM's
    # pipeline after them; both ranks run encoder passes in the program's order.
    encoder = bubbles["encoder"]
    assert encoder is not None and encoder["stages"][0][0] == 0 and encoder["stages"][-1][1] == 9
    assert bubbles["stages"][0][0] == 9 and bubbles["stages"][-1][1] == 20 and bubbles["engine"] == "executor"
    assert all(any(i[0] == "encoder" for i in program) for program in plan["programs"])
    # The same samples in the same micro-batches as the planned pipeline with the encoder in its first stage:
    # the same training, whatever order the passes ran in.
    planned, _ = short_run(tmp_path, "pp-planned")
    assert planned["encoder"] is None and planned["stages"][0][0] == 0
    assert bubbles["losses"] == pytest.approx(planned["losses"], rel=1e-4)
    assert [k for k, _ in bubbles["held_out_losses"]] == [k for k, _ in planned["held_out_losses"]]
    assert [x for _, x in bubbles["held_out_losses"]] == pytest.approx([x for _, x in planned["held_out_losses"]],
                                                                        rel=1e-4)
    # Both again in one pair of processes, in alternating blocks of one step: each mode's model, runtime and
    # optimizer carry on from its own last step, so each trains as it did alone.
    out, work = tmp_path / "together.json", tmp_path / "together"
    run_example("run.py", "--mode", "pp-planned,pp-bubbles", "--block", 1, "--steps", 2, "--warmup", 1, "--repeats",
                1, "--speed-checks", 1, "--workdir", work, "--out", out)
    together = json.loads(out.read_text())
    assert [tuple(b) for b in together["order"]] == [("pp-planned", 0, 1), ("pp-bubbles", 0, 1),
                                                      ("pp-bubbles", 1, 2), ("pp-planned", 1, 2)]
    for row in together["modes"].values():  # a speed check after each of the mode's own two measured steps
        assert len(row["speed_checks"]["whole_model_seconds"]) == 2
    for alone in (planned, bubbles):
        row = together["modes"][alone["mode"]]
        assert row["losses"] == pytest.approx(alone["losses"], rel=1e-4)
        assert [k for k, _ in row["held_out_losses"]] == [k for k, _ in alone["held_out_losses"]]
        assert [x for _, x in row["held_out_losses"]] == pytest.approx([x for _, x in alone["held_out_losses"]],
                                                                       rel=1e-4)
        assert row["stages"] == alone["stages"] and row["encoder"] == alone["encoder"]
        assert (work / alone["mode"] / "schedule.json").is_file()
    assert len(together["speed_checks"]["whole_model_seconds"]) == 4  # after each measured step of each mode


def test_megatron_pipeline_holds_the_encoder_in_the_first_stage(tmp_path):
    result, _ = short_run(tmp_path, "pp-megatron")
    # Encoder (patch embedding, 6 blocks, norm), projector, token embedding and half of the 8 LLM blocks first.
    assert result["stages"] == [[0, 14], [14, 20]] and result["schedule"] == "1f1b"
    assert result["engine"] == "torch"


def test_compare_lays_predictions_beside_measurements(tmp_path):
    out = tmp_path / "table.json"
    done = run_example("compare.py", "--modes", "dp-random-packed,pp-megatron,pp-planned", "--steps", 2, "--warmup", 1,
                       "--repeats", 1, "--profile-rounds", 1, "--workdir", tmp_path / "work", "--out", out,
                       timeout=400)
    table = json.loads(out.read_text())
    assert set(table["modes"]) == {"dp-random-packed", "pp-megatron", "pp-planned"} and table["block"] == 5
    assert "predicted" in done.stdout and "pp-megatron" in done.stdout
    # The calibration wrote a profile for every layer shape and a cluster file the simulator read.
    assert table["cluster"]["preset"] == "cpu:2" and table["profile"]["entries"]
    # The whole model set against the layer profile (the graph's overhead makes the ratio about 1 or more; never
    # several times off either way). This short calibration profiles each layer in one round, so a busy machine
    # moves the ratio by a third.
    whole = table["calibration"]["whole_model"]
    assert 0.5 < whole["factor"] < 3, whole
    assert abs(whole["factor"] - whole["measured_seconds"] / whole["predicted_seconds"]) < 1e-12
    # The profile the runs are predicted with is the layers' own scaled by the median of the whole model's
    # samples, the calibration's, the check's after the one round and those beside the measured steps
    # (run.py --speed-checks 3: every third of each mode's steps, so the first of each). The two pp modes ran in
    # one pair of processes, the dp mode on its own.
    work = tmp_path / "work"
    samples = json.loads((work / "whole_model.json").read_text())["samples"]
    samples += [t for c in sorted(work.glob("check.*.json")) for t in json.loads(c.read_text())["whole_model_seconds"]]
    across = table["calibration"]["across_runs"]
    assert sorted(c.name for c in work.glob("check.*.json")) == [
        "check.0.json", "check.dp-random-packed.0.json", "check.pp-megatron+pp-planned.0.json"]
    assert across["checks"] == 3 and across["whole_model_samples"] == len(samples) == 9, across
    assert across["factor"] == pytest.approx(statistics.median(samples) / whole["predicted_seconds"], rel=1e-12)
    assert 0.5 < across["factor"] < 3, across
    layers = json.loads((work / "profile_layers.json").read_text())
    for scaled, own in zip(table["profile"]["entries"], layers["entries"], strict=True):
        assert scaled["seconds"] == pytest.approx([t * across["factor"] for t in own["seconds"]], rel=1e-12)
    for mode, row in table["modes"].items():
        for key in ("predicted_step_seconds", "planned_step_seconds", "measured_step_seconds", "measured_cv",
                    "tokens_per_second"):
            assert row[key] >= 0, (mode, key)
        # Two steps are too few to hold the simulator to its target, but not to being the right size.
        assert 0.5 < row["predicted_step_seconds"] / row["measured_step_seconds"] < 2, (mode, row)


def test_text_only_samples_and_micro_batches_train():
    # The bundled lengths hold no sample without tiles, but the model and data are written for them: a text-only
    # sample's labels predict each next token, and a micro-batch without tiles runs the encoder on nothing.
    import importlib.util

    import numpy as np
    import torch

    sys.path.insert(0, str(EXAMPLE))
    try:
        spec = importlib.util.spec_from_file_location("tiny_vlm_model", EXAMPLE / "model.py")
        model_module = sys.modules.setdefault("tiny_vlm_model", importlib.util.module_from_spec(spec))
        spec.loader.exec_module(model_module)
        import data as data_module
    finally:
        sys.path.remove(str(EXAMPLE))
    config = model_module.TinyVlmConfig()
    lengths = data_module.Lengths(tiles=np.array([0, 0, 1]), tokens=np.array([5, 6, config.tokens_per_tile + 4]),
                                  text=np.array([5, 6, 4]))
    dataset = data_module.SyntheticVlmData(lengths, config)
    text_only = dataset[0]
    assert text_only["pixels"].shape[0] == 0
    assert torch.equal(text_only["labels"][:-1], text_only["tokens"][1:])
    model = model_module.TinyVlm(config)
    for samples in ([dataset[0], dataset[1]], [dataset[0], dataset[2]]):
        batch = data_module.pack(samples)
        loss = model_module.token_loss_sum(model(batch), batch["labels"])
        loss.backward()
        assert torch.isfinite(loss)
        assert next(model.layers[-1].parameters()).grad is not None
