"""examples/tiny_multitask and fulcrum.runtime.WaveRuntime: multi-task schedules on 2 gloo processes train as
one process does."""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import warnings

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

import fulcrum.profile as fp  # noqa: E402

EXAMPLE = REPO / "examples" / "tiny_multitask"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", GLOO_SOCKET_IFNAME="lo")
STEPS = 5


def run_example(tmp_path, mode, *extra):
    out, work = tmp_path / f"{mode}.json", tmp_path / mode
    done = subprocess.run([sys.executable, str(EXAMPLE / "run.py"), "--mode", mode, "--steps", str(STEPS),
                           "--warmup", "0", "--repeats", "1", "--optimizer", "sgd", "--lr", "0.05", "--workdir",
                           str(work), "--out", str(out), *map(str, extra)],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(out.read_text()), work


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    result, _ = run_example(tmp_path_factory.mktemp("reference"), "reference")
    # Training really moved: the summed loss of two learning tasks falls over the five steps.
    assert result["losses"][-1] < 0.8 * result["losses"][0]
    return result


def assert_same_losses(result, reference):
    assert len(result["losses"]) == len(reference["losses"]) == STEPS
    for got, want in zip(result["losses"], reference["losses"]):
        assert got == pytest.approx(want, rel=1e-4)
    for got, want in zip(result["task_losses"], reference["task_losses"]):
        assert got == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("mode", ["sequential", "waves"])
def test_both_modes_train_with_the_losses_of_one_process(mode, reference, tmp_path):
    result, work = run_example(tmp_path, mode)
    assert_same_losses(result, reference)
    schedule = json.loads((work / f"{mode}.schedule.json").read_text())
    slices = schedule["tasks"]["slices"]
    if mode == "sequential":  # every operator on both devices, data parallel
        assert all(s[10] == [0, 1] for s in slices)


def test_both_modes_in_one_pair_of_processes_train_as_each_alone(tmp_path):
    # Two warm-up steps, then alternating blocks of two: each mode's model, runtime and optimizer carry on from its
    # own last step whatever the other mode ran in between, so both train with the single-process losses of the
    # same steps (the warm-up reruns the epoch's first batches).
    steps = ["--steps", "4", "--warmup", "2", "--repeats", "1", "--optimizer", "sgd", "--lr", "0.05"]

    def run(mode, *extra):
        out = tmp_path / f"{mode}.json"
        done = subprocess.run([sys.executable, str(EXAMPLE / "run.py"), "--mode", mode, *steps, "--workdir",
                               str(tmp_path / mode), "--out", str(out), *extra],
                              cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
        return json.loads(out.read_text())

    reference = run("reference")
    result = run("sequential,waves", "--block", "2", "--speed-checks", "1")
    assert set(result["modes"]) == {"sequential", "waves"}
    for mode, row in result["modes"].items():
        assert len(row["losses"]) == len(reference["losses"]) == 6
        assert row["losses"] == pytest.approx(reference["losses"], rel=1e-4), mode
        for got, want in zip(row["task_losses"], reference["task_losses"], strict=True):
            assert got == pytest.approx(want, rel=1e-4), mode
        assert (tmp_path / "sequential,waves" / f"{mode}.schedule.json").is_file()
        assert len(row["step_seconds_by_repeat"][0]) == 4 and all(t > 0 for t in row["step_seconds_by_repeat"][0])
        # A speed check after each of the mode's own measured steps, and only those.
        assert len(row["speed_checks"]["whole_model_seconds"]) == 4, mode
    # The blocks as the ranks ran them.
    assert [tuple(b) for b in result["order"]] == [("sequential", 0, 2), ("waves", 0, 2), ("waves", 2, 4),
                                                   ("sequential", 2, 4)]
    pooled = result["speed_checks"]["whole_model_seconds"]
    assert sorted(pooled) == sorted(t for row in result["modes"].values()
                                    for t in row["speed_checks"]["whole_model_seconds"])


def test_gradients_zeroed_in_place_train_the_same(reference, tmp_path):
    # The runtime's gradient buckets: a model that holds .grad tensors of its own before the first step, which the
    # optimizer then zeroes in place, still has its gradients accumulated into the buffers the all-reduce sends;
    # otherwise the ranks would step on unsynchronised gradients and the losses would part from one process's.
    result, _ = run_example(tmp_path, "waves", "--zero-grad", "zero")
    assert_same_losses(result, reference)


def test_a_layer_unfrozen_partway_is_synchronised(tmp_path):
    # The encoder's last layer, shared by both ranks, trains only from step 2: the runtime's gradient buckets,
    # made before it took gradients, must take it in, or the ranks would step on unsynchronised gradients.
    reference, _ = run_example(tmp_path, "reference", "--frozen-steps", 2)
    result, _ = run_example(tmp_path, "waves", "--frozen-steps", 2)
    assert_same_losses(result, reference)


def test_a_frozen_encoder_and_accumulated_gradients_train_as_one_process(tmp_path):
    # The shared encoder frozen whole (its slices' outputs take no gradient), and each optimizer step taking the
    # gradients of two runs of its batches: gradients kept from the first run must not be summed over the
    # devices again by the second's all-reduce.
    for extra in (["--frozen-encoder"], ["--accumulate", 2]):
        reference, _ = run_example(tmp_path / "reference", "reference", *extra)
        for mode in ("sequential", "waves"):
            result, _ = run_example(tmp_path / mode, mode, *extra)
            assert_same_losses(result, reference)


def split_schedule(template):
    """A hand-made schedule in which data moves between slices of different data-parallel widths on different
    devices: task 0's encoder on both devices then its head on device 0 (device 1 sends its half of the rows);
    task 1's encoder on device 1 alone, its head's first two layers on both (device 1 sends device 0 the first
    half of its rows) and the rest on device 0. Shared layers held by both devices sync in two groups."""
    doc = dict(template)

    def piece(task, component, first, layers, sequences, dp, wave, devices):
        return [task, component, first, layers, sequences, 64, 1, dp, 1, wave, devices]

    doc["tasks"] = {"waves": 4, "slices": [
        piece(0, 0, 0, 6, 16, 2, 0, [0, 1]), piece(0, 1, 0, 3, 16, 1, 1, [0]), piece(1, 0, 0, 6, 12, 1, 1, [1]),
        piece(1, 2, 0, 2, 12, 2, 2, [0, 1]), piece(1, 2, 2, 3, 12, 1, 3, [0])],
        "sync_groups": [{"devices": [0, 1], "tp": 1, "layers": [[2, 0], [2, 1]]},
                        {"devices": [0, 1], "tp": 1, "layers": [[0, layer] for layer in range(6)]}]}

    def send(payload, s, peer):
        return ["send", payload, s, 0, peer]

    def recv(payload, s, peer):
        return ["recv", payload, s, 0, peer]

    sync = [["collective", "all_reduce", "gradients", g] for g in range(2)]
    doc["programs"] = [
        [["F", 0, 0], send("activation", 0, 1), ["wave", 0],
         recv("activation", 1, 0), ["F", 1, 0], ["wave", 1],
         recv("activation", 3, 2), ["F", 3, 0], send("activation", 3, 4), ["wave", 2],
         recv("activation", 4, 3), ["F", 4, 0], ["wave", 3],
         ["B", 4, 0], send("gradient", 4, 3), ["wave", 4],
         recv("gradient", 3, 4), ["B", 3, 0], send("gradient", 3, 2), ["wave", 5], sync[0],
         ["B", 1, 0], send("gradient", 1, 0), ["wave", 6],
         recv("gradient", 0, 1), ["B", 0, 0], ["wave", 7], sync[1]],
        [["F", 0, 0], send("activation", 0, 1), ["wave", 0],
         ["F", 2, 0], send("activation", 2, 3), ["wave", 1],
         recv("activation", 3, 2), ["F", 3, 0], send("activation", 3, 4), ["wave", 2],
         ["wave", 3], ["wave", 4],
         recv("gradient", 3, 4), ["B", 3, 0], send("gradient", 3, 2), ["wave", 5], sync[0],
         recv("gradient", 2, 3), ["B", 2, 0], ["wave", 6],
         recv("gradient", 0, 1), ["B", 0, 0], ["wave", 7], sync[1]]]
    return doc


def test_copies_of_a_layer_start_and_step_with_their_first_holders_state_and_groups_are_given_back(tmp_path):
    # Models built apart on each rank (another seed, a frozen layer, a buffer counting forwards): as
    # DistributedDataParallel does, every engine gives each copy its first holder's parameters, frozen ones too,
    # and buffers when it is made, and the first holder's buffers again at each step unless told not to. Closed,
    # a runtime destroys the process groups it made.
    _, work = run_example(tmp_path, "sequential")
    out = tmp_path / "replicas.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(REPO / "python" / "tests" / "replica_state_worker.py"), "--graph",
                           str(work / "tasks.json"), "--schedule", str(work / "sequential.schedule.json"), "--out",
                           str(out)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["ddp"]["engine"] == "ddp" and result["executor"]["engine"] == "executor"
    for case in ("waves", "waves-frozen-component", "ddp", "executor"):
        assert result[case]["start_equal"], case
        rank0, rank1 = result[case]["forwards_after_drift"]
        assert all(n > 0 for n in rank0), case  # the counts moved: the hooks ran
        assert rank1 == rank0, case             # rank 1's drift of 1000 was overwritten by the step
    rank0, rank1 = result["waves"]["forwards_without_broadcast"]
    assert [b - a for a, b in zip(rank0, rank1)] == [1000.0] * len(rank0)
    # close() gives back the groups each runtime made (the default group stays), as leaving a `with` block does.
    groups = result["waves"]["groups"]
    assert groups["two_runtimes"] > groups["closed"] >= 1
    assert groups["scoped"] > groups["after_scope"] == groups["closed"]
    for case in ("waves", "ddp", "executor"):
        assert "the runtime is closed" in result[case]["step_after_close"], case


def test_rows_move_between_slices_of_different_widths(reference, tmp_path):
    _, work = run_example(tmp_path, "sequential")
    path = tmp_path / "split.json"
    path.write_text(json.dumps(split_schedule(json.loads((work / "sequential.schedule.json").read_text()))))
    result, _ = run_example(tmp_path, "waves", "--schedule", path)
    assert result["arrangement"] == "given"
    assert_same_losses(result, reference)


def frozen_split_schedule(template, transfers_kept):
    """split_schedule with the encoder frozen: its slices have no backward (input_gradient 0). Task 0's encoder
    runs in two slices on both devices, layers [0, 3) (slice 0) and [3, 6) (slice 5, whose input is slice 0's
    output), so a slice without a backward has a producer too. Without `transfers_kept` the slices after the
    encoder on other devices pass it no gradient, as the planner's schedules since have it; with them, as a
    schedule saved before, they send it zeros."""
    doc = split_schedule(template)
    slices = doc["tasks"]["slices"]
    slices[0][3] = 3
    slices.append(list(slices[0]))
    slices[5][2] = 3
    for s in (0, 2, 5):
        slices[s].append(0)
    frozen = (0, 2, 5)

    def rewrite(i):
        if i == ["F", 0, 0]:
            return [["F", 0, 0], ["F", 5, 0]]
        if i == ["B", 0, 0]:
            return [["B", 5, 0], ["B", 0, 0]]
        if i[0] not in ("send", "recv"):
            return [i]
        if {i[2], i[4]} == {0, 1}:  # the head takes the encoder's output from slice 5 now
            i = [i[0], i[1], 5 if i[2] == 0 else i[2], 0, 5 if i[4] == 0 else i[4]]
        into_frozen = i[1] == "gradient" and (i[4] if i[0] == "send" else i[2]) in frozen
        return [i] if transfers_kept or not into_frozen else []

    doc["programs"] = [[j for i in p for j in rewrite(i)] for p in doc["programs"]]
    return doc


@pytest.mark.parametrize("transfers_kept", [False, True], ids=["no-gradient", "zeros-sent"])
def test_a_frozen_encoder_without_a_backward_trains_as_one_process(tmp_path, transfers_kept):
    # Its slices run no backward, the one with a producer too, and keep no gradient of theirs; the runtime keeps no
    # share of a gradient it never sends; a schedule that still sends them zeros runs as before.
    reference, _ = run_example(tmp_path / "reference", "reference", "--frozen-encoder")
    _, work = run_example(tmp_path, "sequential", "--frozen-encoder")
    doc = frozen_split_schedule(json.loads((work / "sequential.schedule.json").read_text()), transfers_kept)
    gradients = sum(i[0] in ("send", "recv") and i[1] == "gradient" for p in doc["programs"] for i in p)
    # Slice 1's gradient to slice 5 and slice 3's to slice 2, sent and received on both devices, where kept;
    # slice 4's to slice 3 (trained) either way.
    assert gradients == (6 if transfers_kept else 0) + 3
    path = tmp_path / "split-frozen.json"
    path.write_text(json.dumps(doc))
    result, _ = run_example(tmp_path / "waves", "waves", "--schedule", path, "--frozen-encoder")
    assert result["arrangement"] == "given"
    assert_same_losses(result, reference)


def test_a_slice_without_a_backward_whose_parameters_train_is_refused(tmp_path):
    # The schedule says the encoder is frozen, the model's parameters say otherwise: its gradients would be lost.
    _, work = run_example(tmp_path, "sequential")
    doc = frozen_split_schedule(json.loads((work / "sequential.schedule.json").read_text()), False)
    path = tmp_path / "split-frozen.json"
    path.write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(EXAMPLE / "run.py"), "--mode", "waves", "--steps", "1", "--warmup", "0",
                           "--repeats", "1", "--workdir", str(tmp_path / "waves"), "--out", str(tmp_path / "w.json"),
                           "--schedule", str(path)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "slice 0 has no backward" in done.stderr or "slice 5 has no backward" in done.stderr, done.stderr[-3000:]
    assert "'vision' still has requires_grad set" in done.stderr, done.stderr[-3000:]


def test_wave_plans_are_checked(tmp_path):
    import fulcrum.runtime as fr

    _, work = run_example(tmp_path, "sequential")
    doc = json.loads((work / "sequential.schedule.json").read_text())
    assert len(fr.WavePlan.from_json(doc).slices) == len(doc["tasks"]["slices"])
    with pytest.raises(ValueError, match="not a multitask schedule"):
        fr.WavePlan.from_json({k: v for k, v in doc.items() if k != "tasks"})
    broken = dict(doc, programs=[doc["programs"][0][:-1], doc["programs"][1]])
    with pytest.raises(ValueError, match="broken.json"):
        fr.WavePlan.from_json(broken, "broken.json")
    wide = json.loads(json.dumps(doc))
    wide["tasks"]["slices"][0][8] = 2  # TP 2: the runtime runs TP 1
    with pytest.raises(ValueError):
        fr.WavePlan.from_json(wide, "wide.json")

    # The example's model under its own name: other tests import tiny_vlm's model.py as `model`.
    spec = importlib.util.spec_from_file_location("tiny_multitask_model", EXAMPLE / "model.py")
    example = sys.modules.setdefault("tiny_multitask_model", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(example)
    graph = json.loads((work / "tasks.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every parameter of the example is in a component: no warning
        with pytest.raises(ValueError, match="2 devices, but 1 ranks"):
            fr.WaveRuntime(example.TinyMultitask(), graph, doc)
        with pytest.raises(ValueError, match=r"sequential\.schedule\.json: the schedule runs on 2 devices, but 1 ranks"):
            fr.WaveRuntime(example.TinyMultitask(), graph, str(work / "sequential.schedule.json"))
    # A parameter beside the components would never be trained: said before anything else is checked.
    with_scale = example.TinyMultitask()
    with_scale.logit_scale = torch.nn.Parameter(torch.ones(1))
    with pytest.warns(UserWarning, match="1 parameter.* outside the components the task graph names.*logit_scale"):
        with pytest.raises(ValueError, match="2 devices, but 1 ranks"):
            fr.WaveRuntime(with_scale, graph, doc)

    # Without its gradient sync the schedule is well formed, but the copies of every shared layer would train apart.
    from fulcrum.runtime.waves import check_copies_synchronised

    components = example.TinyMultitask().components
    check_copies_synchronised(fr.WavePlan.from_json(doc), graph["model"], components)
    unsynced = dict(doc, tasks=dict(doc["tasks"], sync_groups=[]),
                    programs=[[i for i in p if i[0] != "collective"] for p in doc["programs"]])
    with pytest.raises(ValueError, match="layer 0 of component 'vision' is held by devices 0,1 and no sync group"):
        check_copies_synchronised(fr.WavePlan.from_json(unsynced), graph["model"], components)
    with pytest.raises(ValueError, match="layer 0 of component 'vision' is held by devices 0,1 and no sync group"):
        fr.WaveRuntime(example.TinyMultitask(), graph, unsynced)  # before it looks for the ranks to run it

    # One module in two components' layers: the waves would step and synchronise its copies apart.
    from fulcrum.runtime.waves import check_layers_share_no_parameter

    check_layers_share_no_parameter(example.TinyMultitask().components)
    tied = example.TinyMultitask()
    first, second = list(tied.components)[:2]
    tied.components[second][0] = tied.components[first][0]
    with pytest.raises(ValueError, match=f"a parameter of layer 0 of component '{second}' is also one of layer 0 of "
                                         f"component '{first}'"):
        fr.WaveRuntime(tied, graph, doc)

    # Every task's nodes run whole, once: a task left out would train nothing and report a loss of 0.
    from fulcrum.runtime.waves import check_tasks_run

    plan = fr.WavePlan.from_json(doc)
    check_tasks_run(plan, graph, components)
    without_task_1 = dataclasses.replace(plan, slices=tuple(s for s in plan.slices if s.task != 1))
    with pytest.raises(ValueError, match=rf"schedule: task '{graph['tasks'][1]['name']}': the slices do not run"):
        check_tasks_run(without_task_1, graph, components)
    halved = dataclasses.replace(plan, slices=tuple(dataclasses.replace(s, layers=max(1, s.layers // 2))
                                                    if s.layers > 1 else s for s in plan.slices))
    with pytest.raises(ValueError, match="the slices do not run"):
        check_tasks_run(halved, graph, components)


def test_compare_predicts_the_schedules_that_ran(tmp_path):
    out, work = tmp_path / "table.json", tmp_path / "work"
    done = subprocess.run([sys.executable, str(EXAMPLE / "compare.py"), "--steps", "2", "--warmup", "1", "--repeats",
                           "1", "--profile-rounds", "1", "--block", "1", "--workdir", str(work), "--out", str(out)],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    table = json.loads(out.read_text())
    assert set(table["modes"]) == {"sequential", "waves"}
    assert table["order"] == [["sequential", "waves"]] and table["block"] == 1
    ran = json.loads((work / "sequential+waves.0.json").read_text())
    assert [tuple(b) for b in ran["order"]] == [("sequential", 0, 1), ("waves", 0, 1), ("waves", 1, 2),
                                                ("sequential", 1, 2)]
    # The profile the runs are predicted with is the layers' own corrected for size and scaled by the median of
    # the whole model's samples: the calibration's three, the check's three after the one round, and one after
    # each measured step of each mode (both modes' two steps, run in one pair of processes: two checks in all).
    across = table["calibration"]["across_runs"]
    assert across["checks"] == 2 and across["whole_model_samples"] == 10, across
    whole = table["calibration"]["whole_model"]
    (half_tokens, half_correction), (tokens, one) = whole["size_correction"]
    assert half_tokens == tokens / 2 and one == 1.0 and 0.3 < half_correction < 3, whole
    # The correction makes the profile's half-to-whole ratio the measured one.
    assert whole["half_batch_predicted_seconds"] / whole["predicted_seconds"] == pytest.approx(
        whole["half_batch_measured_ratio"], rel=0.02), whole
    correction = fp.size_correction(whole["size_correction"])
    layers = json.loads((work / "profile_layers.json").read_text())
    for scaled, own in zip(table["profile"]["entries"], layers["entries"], strict=True):
        assert scaled["seconds"] == pytest.approx(
            [t * across["factor"] * correction(n) for t, n in zip(own["seconds"], own["tokens"])], rel=1e-12)
    for mode, row in table["modes"].items():
        # Every rank steps a whole AdamW, so the schedules that ran keep the optimizer state whole.
        schedule = json.loads((work / "interleaved" / f"{mode}.schedule.json").read_text())
        assert schedule["layout"]["state_sharding"] == "zero-0", mode
        # Two steps are too few to hold the simulator to its target, but not to being the right size.
        assert row["planned_step_seconds"] > 0
        assert 0.5 < row["predicted_step_seconds"] / row["measured_step_seconds"] < 2, (mode, row)


def test_compare_runs_both_modes_in_one_pair_of_processes_or_each_in_its_own(tmp_path):
    spec = importlib.util.spec_from_file_location("tiny_multitask_compare", EXAMPLE / "compare.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    args = compare.argparse.Namespace(steps=30, warmup=3, workdir=tmp_path, seed=0, fulcrum="fulcrum",
                                      speed_checks=1, block=5)

    def flag(argv, name):
        return argv[argv.index(name) + 1]

    together = compare.run_args(args, ["waves", "sequential"], tmp_path / "out.json")
    assert flag(together, "--mode") == "waves,sequential" and flag(together, "--block") == "5"
    assert flag(together, "--workdir") == str(tmp_path / "interleaved") == str(compare.run_dir(args, "waves"))
    args.block = 0  # each mode in processes of its own, planned in a folder of its own, as one block of all steps
    alone = compare.run_args(args, ["waves"], tmp_path / "out.json")
    assert flag(alone, "--mode") == "waves" and flag(alone, "--block") == "30"
    assert flag(alone, "--workdir") == str(tmp_path / "waves") == str(compare.run_dir(args, "waves"))


UNUSED_PARAMETER = """
import sys, torch, torch.distributed as dist, torch.nn as nn
sys.path.insert(0, sys.argv[2])
import fulcrum.runtime as fr
from model import TinyMultitask, make_batches
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = TinyMultitask(seed=0)
model.components["vision"][1].unused = nn.Parameter(torch.ones(4))  # a branch no batch takes this step
runtime = fr.WaveRuntime(model, model.task_graph(), sys.argv[1])
runtime.step(make_batches(model.config, 0))
used = model.components["vision"][1].unused.grad
print("none" if used is None else "tensor", flush=True)
others = [q.grad is not None for q in runtime.parameters() if q is not model.components["vision"][1].unused]
print("others have gradients" if all(others) else "others lost theirs", flush=True)
runtime.close()
fr.end_rank()  # past gloo's teardown, which can abort a rank after its work is done
"""


def test_a_synchronised_parameter_no_device_used_keeps_no_gradient(tmp_path):
    # As in one process and under DDP: an optimizer skips a parameter without a gradient, where a zero one would
    # still be decayed and moved by its momentum. Every layer of the sequential schedule is synchronised.
    _, work = run_example(tmp_path, "sequential")
    script = tmp_path / "unused.py"
    script.write_text(UNUSED_PARAMETER)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), str(work / "sequential.schedule.json"), str(EXAMPLE)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("none") == 2, done.stdout
    assert done.stdout.count("others have gradients") == 2, done.stdout
