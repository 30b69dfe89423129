"""fulcrum.runtime: plans run on 2 gloo processes train exactly as one process trains the same model."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

import fulcrum.runtime as fr  # noqa: E402
from fulcrum.runtime.runtime import _program_order, _torch_pipeline_order  # noqa: E402

TESTS = REPO / "python" / "tests"
WORKER = TESTS / "runtime_worker.py"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", GLOO_SOCKET_IFNAME="lo")


def run_worker(layout, out, *extra, processes=2):
    if processes == 1:
        cmd = [sys.executable, str(WORKER), "--layout", layout, "--out", str(out), *extra]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               str(WORKER), "--layout", layout, "--out", str(out), *extra]
    done = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    # One process, the whole model, every micro-batch of each step: the gradient of the step's token mean.
    return run_worker("reference", tmp_path_factory.mktemp("reference") / "reference.json", processes=1)


def assert_same_training(result, reference):
    assert len(result["losses"]) == len(reference["losses"]) == 5
    for got, want in zip(result["losses"], reference["losses"]):
        assert got == pytest.approx(want, rel=1e-4)
    # Training really moved: the losses of a learning model fall over the five steps.
    assert reference["losses"][-1] < reference["losses"][0]
    assert len(result["parameters"]) == len(reference["parameters"])
    for got, want in zip(result["parameters"], reference["parameters"]):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("layout, engine", [
    ("ddp", "ddp"),            # DP 2: DistributedDataParallel
    ("gpipe", "torch"),        # PP 2: torch.distributed.pipelining's ScheduleGPipe
    ("1f1b", "torch"),         # PP 2: Schedule1F1B
    ("interleaved", "executor"),  # PP 2 × 2 chunks in Fulcrum's order: the executor
    ("interleaved-dp", "executor"),  # PP 1 × 2 chunks, DP 2: stages hand over on their rank, no transfer
    ("zb-h1", "executor"),     # split backward passes: the executor
])
def test_two_gloo_ranks_train_as_one_process(layout, engine, reference, tmp_path):
    result = run_worker(layout, tmp_path / "result.json")
    assert result["engine"] == engine
    assert_same_training(result, reference)
    assert 0 < result["compute_seconds"] <= result["seconds"]


@pytest.mark.parametrize("layout, encoder_dp, encoder_pp, processes", [
    ("bubbles-dp", 2, 1, 2),   # an encoder replica per rank; rank 1's features go to the LLM's first stage
    ("bubbles-pp", 1, 2, 2),   # one encoder pipeline over both ranks
    ("bubbles-dp2", 4, 1, 4),  # two LLM replicas: the encoder's gradients reduced over all four ranks
    ("bubbles-recompute", 1, 2, 2),  # the encoder's layers checkpointed, recomputed where the schedule says
])
def test_encoders_in_the_pipelines_bubbles_train_as_one_process(layout, encoder_dp, encoder_pp, processes, reference,
                                                                 tmp_path):
    # `fulcrum plan --encoders bubbles`: the LLM pipeline over 2 ranks, the encoder on its own plan beside it.
    result = run_worker(layout, tmp_path / "result.json", processes=processes)
    assert result["engine"] == "executor"
    plan = json.loads((tmp_path / "result.json.plan.json").read_text())["schedule"]
    encoder = plan["encoder"]
    assert (encoder["dp"], encoder["pp"]) == (encoder_dp, encoder_pp)
    # The LLM's stages start after the encoder side; both ranks run encoder passes, forward and backward.
    assert plan["stages"][0][0] == encoder["stages"][-1][-1][1]
    passes = {"forward", "backward", "recompute"} if layout == "bubbles-recompute" else {"forward", "backward"}
    for program in plan["programs"]:
        assert {i[5] for i in program if i[0] == "encoder"} == passes
    # The encoder layers that recompute (its transformer blocks, under --encoder-recompute full) are the ones whose
    # mode says so.
    encoder_layers = encoder["stages"][-1][-1][1]
    modes = [mode for mode, count in plan["recompute"] for _ in range(count)][:encoder_layers]
    recomputing = {i[4] for program in plan["programs"] for i in program if i[0] == "encoder" and i[5] == "recompute"}
    assert recomputing == {layer for layer, mode in enumerate(modes) if mode == "full"}
    assert bool(recomputing) == (layout == "bubbles-recompute")
    assert_same_training(result, reference)


@pytest.mark.parametrize("layout, late_rank", [
    ("bubbles-dp", 0),  # rank 1 waits for rank 0's first activations: its next encoder forward passes need nothing
    ("bubbles-pp", 1),  # rank 0 waits for the encoder's features from rank 1: it encodes its next micro-batch
])
def test_a_rank_waiting_for_a_late_peer_runs_its_next_encoder_passes_meanwhile(layout, late_rank, reference,
                                                                              tmp_path):
    late = ["--late-rank", str(late_rank), "--late-seconds", "0.2"]
    filled = run_worker(layout, tmp_path / "filled.json", *late)
    planned = run_worker(layout, tmp_path / "planned.json", *late, "--no-fill")
    # The peer starts every step 0.2 s late, so the other rank fills that wait: at least a pass a step.
    assert filled["encoder_passes_ahead"][1 - late_rank] >= 5
    assert planned["encoder_passes_ahead"] == [0, 0]
    # The same operations in the same order on every parameter: the same training, to the last bit.
    assert filled["losses"] == planned["losses"]
    assert filled["parameters"] == planned["parameters"]
    assert_same_training(filled, reference)


def test_encoder_stages_are_one_run_of_the_layer_chain():
    from fulcrum.runtime.encoder import EncoderLayout

    section = {"dp": 1, "pp": 2, "tp": 1, "pipelines": 1, "llm_micro_batch": [[0, 1]],
               "stages": [[[0, 3]], [[3, 5], [5, 6]]]}
    layout = EncoderLayout.from_json(section, 2, "plan.json")
    assert layout.stages == ((0, 3), (3, 6)) and layout.rank_of(0, 1) == 1 and layout.micro_batch_of(0, 1) == 1
    # Two encoders cut into two stages: each stage holds a piece of both, which one layer chain cannot run.
    with pytest.raises(ValueError, match="plan.json: encoder stage 0 holds layers that are not one run"):
        EncoderLayout.from_json(dict(section, stages=[[[0, 2], [4, 6]], [[2, 4], [6, 8]]]), 2, "plan.json")


def test_the_executor_runs_what_torch_runs(reference, tmp_path):
    # Forcing Fulcrum's executor onto a 1F1B plan gives the same training as the public schedule.
    assert_same_training(run_worker("1f1b", tmp_path / "result.json", "--engine", "executor"), reference)


def test_the_measured_timeline_is_a_chrome_trace(tmp_path):
    out = tmp_path / "result.json"
    run_worker("1f1b", out)
    trace = json.loads((tmp_path / "result.json.trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # Rank 0 holds stage 0 of a 4-micro-batch 1F1B step: one forward and one backward of each micro-batch.
    assert sorted(e["name"] for e in spans if e["cat"] in ("forward", "backward")) == sorted(
        [f"F s0 mb{m}" for m in range(4)] + [f"B s0 mb{m}" for m in range(4)])
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    starts = {e["name"]: e["ts"] for e in spans}
    assert starts["F s0 mb0"] < starts["B s0 mb0"]


@pytest.mark.parametrize("pipeline", ["gpipe", "1f1b"])
def test_torchs_schedules_run_fulcrums_order(pipeline):
    # The runtime hands a plan to torch's schedule only when the orders agree; for generated plans they must.
    for pp in range(2, 6):
        for micro_batches in range(1, 10):
            plan = fr.RuntimePlan.generate(pipeline, 2 * pp, micro_batches, pp=pp)
            for rank in range(pp):
                assert _program_order(plan.programs[rank]) == _torch_pipeline_order(pipeline, pp, rank,
                                                                                    micro_batches)


def test_plan_files_are_checked():
    plan = fr.RuntimePlan.generate("1f1b", 6, 4, pp=2, stages=[(0, 2), (2, 6)], recompute="full")
    assert plan.stages == ((0, 2), (2, 6)) and plan.recompute == ("full",) * 6 and plan.stages_of(1) == [1]
    doc = json.loads(plan.text)
    assert fr.RuntimePlan.from_json({"schedule": doc}).programs == plan.programs  # a `fulcrum plan --out` file
    broken = dict(doc, programs=[doc["programs"][0][:-1], doc["programs"][1]])
    with pytest.raises(ValueError, match="broken.json"):
        fr.RuntimePlan.from_json(broken, "broken.json")
    with pytest.raises(ValueError, match="TP 2"):
        fr.RuntimePlan.from_json(dict(doc, layout=dict(doc["layout"], tp=2, dp=1)))
    with pytest.raises(ValueError, match="neither a schedule"):
        fr.RuntimePlan.from_json({"fulcrum": 1, "kind": "batch_plan"})
    with pytest.raises(ValueError, match="broken.json"):  # the core checks encoder sections too
        fr.RuntimePlan.from_json(dict(doc, encoder={"dp": 2, "pp": 1, "tp": 1, "pipelines": 2}), "broken.json")
    with pytest.raises(ValueError, match="multitask schedule .*WaveRuntime"):
        fr.RuntimePlan.from_json(dict(doc, tasks={"waves": 1, "slices": [], "sync_groups": []}))


def test_a_plan_for_another_model_or_world_is_refused(tmp_path):
    import torch.nn as nn

    class Chain(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = nn.ModuleList(nn.Identity() for _ in range(n))

    plan = fr.RuntimePlan.generate("1f1b", 4, 2, pp=2)
    with pytest.raises(ValueError, match="covers 4 layers but the model has 5"):
        fr.Runtime(Chain(5), plan, lambda out, labels: out.sum())
    with pytest.raises(ValueError, match="2 are running|1 are running"):
        fr.Runtime(Chain(4), plan, lambda out, labels: out.sum())
    # A plan from a file is named by its path.
    path = tmp_path / "four.json"
    path.write_text(plan.text)
    with pytest.raises(ValueError, match=r"four\.json: the plan covers 4 layers but the model has 5"):
        fr.Runtime(Chain(5), str(path), lambda out, labels: out.sum())
    # So is a file whose text is not JSON, or not an object: the parser's own error named nothing.
    truncated = tmp_path / "truncated.json"
    truncated.write_text(plan.text[:40])
    for load in (fr.RuntimePlan.load, fr.WavePlan.load):
        with pytest.raises(ValueError, match=r"truncated\.json: malformed JSON at line \d+, column \d+"):
            load(str(truncated))
    listed = tmp_path / "listed.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"listed\.json: expected a JSON object, got list"):
        fr.RuntimePlan.load(str(listed))
    # A plan without a pipeline names the engine that runs it.
    with pytest.raises(ValueError, match="engine 'torch' runs pipelines; this plan has none: run it on 'ddp'"):
        fr.Runtime(Chain(4), fr.RuntimePlan.generate("1f1b", 4, 2, pp=1), lambda out, labels: out.sum(),
                   engine="torch")


@pytest.mark.parametrize("layout, processes", [("interleaved-dp", 2), ("bubbles-dp2", 4)])
def test_replicas_built_with_other_seeds_train_from_the_first_replicas_weights(layout, processes, reference,
                                                                                tmp_path):
    # Stage replicas (the executor's data-parallel groups) and encoder replicas: DDP's broadcast, done by the runtime.
    result = run_worker(layout, tmp_path / "result.json", "--seed-by-replica", processes=processes)
    assert_same_training(result, reference)


def test_wave_messages_between_two_devices_never_share_a_tag():
    # Slices with different micro-batch counts: a tag counted against the sender's own count would repeat (0→3 and
    # 1→2 here), and one task's activations could arrive as another's.
    from types import SimpleNamespace

    from fulcrum.runtime.waves import WavePlan, WaveRuntime

    slices = [SimpleNamespace(micro_batches=m) for m in (2, 1, 1, 2)]
    runtime = SimpleNamespace(plan=WavePlan(devices=4, waves=1, slices=tuple(slices), sync_groups=(), programs=()))
    tags = [WaveRuntime._tag(runtime, kind, sender, receiver, mb, part)
            for kind in ("activation", "gradient") for sender in range(4) for receiver in range(4)
            for mb in range(slices[sender].micro_batches) for part in range(8)]
    assert len(set(tags)) == len(tags)


def test_a_slice_cut_into_other_micro_batches_than_its_producer_is_refused():
    # Task 0 runs an encoder (component 0, 2 layers) into an LLM (component 1): the encoder's slice as 2 × 4
    # rows, the LLM's as 4 × 2. Rows move micro-batch by micro-batch, so half the LLM's rows would find no sender.
    from types import SimpleNamespace

    from fulcrum.runtime.waves import WavePlan, WaveRuntime, WaveSlice

    def cut(component, sequences, micro_batches, wave):
        return WaveSlice(task=0, component=component, first_layer=0, layers=2, sequences=sequences, tokens=8,
                         micro_batches=micro_batches, dp=1, tp=1, wave=wave, devices=(0,))

    encoder, llm = SimpleNamespace(component=0, inputs=[], terminal=False), SimpleNamespace(component=1, inputs=[0],
                                                                                            terminal=True)
    runtime = SimpleNamespace(model=SimpleNamespace(components={"vision": [0, 0], "llm": [0, 0]}),
                              component_names=["vision", "llm"], batch_sizes=[8], tasks=[[encoder, llm]])
    runtime._node_of = lambda s: WaveRuntime._node_of(runtime, s)
    for llm_cut, refused in ((cut(1, 4, 2, 1), True), (cut(1, 2, 4, 1), False)):
        runtime.plan = WavePlan(devices=1, waves=2, slices=(cut(0, 2, 4, 0), llm_cut), sync_groups=(), programs=(),
                                where="waves.json")
        if refused:
            with pytest.raises(ValueError, match="waves.json: slice 1 runs 2 micro-batches, but slice 0, whose "
                                                 "output it takes, runs 4"):
                WaveRuntime._wire(runtime)
        else:
            WaveRuntime._wire(runtime)
            assert runtime.producers == [[], [0]]


def test_a_trace_of_something_else_is_refused_and_leaves_no_file(tmp_path):
    timeline = fr.Timeline()
    timeline.begin_step()
    with timeline.span("F s0 mb0", "forward"):
        pass
    path = tmp_path / "trace.json"
    with pytest.raises(TypeError, match=r"\(rank, events\) pairs"):
        fr.write_chrome_trace(path, timeline.current, "one rank")  # the events without their rank
    with pytest.raises(TypeError, match=r"not its Timeline"):
        fr.write_chrome_trace(path, [(0, timeline)], "one rank")  # runtime.timeline itself
    assert list(tmp_path.iterdir()) == []
    fr.write_chrome_trace(path, [(0, timeline.current)], "one rank")
    assert [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"] == ["F s0 mb0"]


def test_a_message_that_cannot_travel_tells_its_receivers_instead_of_leaving_them_waiting():
    from fulcrum.runtime.executor import _buffers, message_parts

    sent = []
    messages = [(0, 1, (torch.zeros(2),)), (0, 2, (torch.zeros(2, dtype=torch.complex64),)), (1, 1, (torch.zeros(2),))]
    with pytest.raises(ValueError, match="complex64 tensor between stages: the runtime carries float32"):
        message_parts(messages, lambda t, peer, mb, part: sent.append((peer, mb, part, t)))
    assert [(peer, mb, part) for peer, mb, part, _ in sent] == [(1, 0, 0), (2, 0, 0), (1, 1, 0)]  # every receiver
    for *_, header in sent:
        with pytest.raises(RuntimeError, match="the sending rank could not send this message"):
            _buffers(header)  # what a receiver does with the header it waits for
    # Bytes travel (uint8 masks, int8 data); the receiver allocates what the header announces.
    ((_, _, parts),) = message_parts([(0, 1, (torch.ones(3, dtype=torch.uint8), torch.zeros(2, 4)))],
                                     lambda *a: None)
    assert [(b.dtype, tuple(b.shape)) for b in _buffers(parts[0])] == [(torch.uint8, (3,)), (torch.float32, (2, 4))]


def test_a_parameter_two_stages_share_is_reduced_once_after_both():
    from types import SimpleNamespace

    from fulcrum.runtime.runtime import Runtime

    shared, own = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
    first, second = torch.nn.Module(), torch.nn.Module()
    first.tied, second.tied, second.own = shared, shared, own
    # pp 1, two chunks: stage 1's gradient collective runs before stage 0's backward, stage 0's after it.
    program = [["F", 0, 0], ["F", 1, 0], ["B", 1, 0], ["collective", "all_reduce", "gradients", 1], ["B", 0, 0],
               ["collective", "all_reduce", "gradients", 0]]
    runtime = SimpleNamespace(plan=SimpleNamespace(programs=[program]), pipeline_rank=0,
                              stages={0: first, 1: second})
    owners = Runtime._gradient_owners(runtime)
    assert owners == {id(shared): 0, id(own): 1}


def test_a_parameter_layers_on_two_pipeline_ranks_share_is_refused():
    # A tied embedding and LM head on the first and last of two pipeline ranks: each rank would step its own copy.
    from fulcrum.runtime.runtime import refuse_parameters_across_ranks

    def chain(tie_first_to):
        torch.manual_seed(0)
        model = torch.nn.Module()
        model.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(4))
        model.layers[tie_first_to].weight = model.layers[0].weight
        return model

    plan = fr.RuntimePlan.generate("1f1b", 4, 2, pp=2)  # layers 0–1 on rank 0, 2–3 on rank 1
    with pytest.raises(ValueError, match=r"parameter layers\.0\.weight is used by layers on pipeline ranks \[0, 1\]"):
        refuse_parameters_across_ranks(chain(3), plan)
    refuse_parameters_across_ranks(chain(1), plan)  # both on rank 0: reduced once there
    refuse_parameters_across_ranks(chain(3), fr.RuntimePlan.generate("interleaved", 4, 2, pp=1, vpp=2))


def test_step_tokens_must_be_a_whole_count():
    import torch.nn as nn

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, state, batch):
            return (batch["x"] * self.w,)

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Scale()])

    runtime = fr.Runtime(Chain(), None, lambda out, labels: out[0].sum(), micro_batches=1)
    batch = {"x": torch.ones(2), "labels": torch.ones(2, dtype=torch.int64)}
    for bad in (0.5, True, "4"):
        with pytest.raises(TypeError, match="step_tokens must be a whole count"):
            runtime.step([batch], step_tokens=bad)
    assert runtime.step([batch], step_tokens=torch.tensor(4).item()).step_tokens == 4


def test_parameters_outside_the_layers_are_named_in_a_warning():
    import warnings

    import torch.nn as nn

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(2, 2) for _ in range(2))

    plan = fr.RuntimePlan.generate("1f1b", 2, 2, pp=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fr.Runtime(Chain(), plan, lambda out, labels: out[0].sum())
    model = Chain()
    model.temperature = nn.Parameter(torch.ones(1))  # beside the layers: no stage holds it
    model.extra = nn.Linear(2, 2)
    model.frozen = nn.Parameter(torch.ones(1), requires_grad=False)  # frozen: nothing to lose, not named
    with pytest.warns(UserWarning, match=r"3 parameter\(s\) of the model are outside model.layers, so no stage "
                                         r"trains them: temperature, extra.weight, extra.bias$"):
        runtime = fr.Runtime(model, plan, lambda out, labels: out[0].sum())
    assert {id(p) for p in runtime.parameters()} == {id(p) for layer in model.layers for p in layer.parameters()}


def test_the_executor_and_wave_runtime_refuse_nccl_whose_messages_carry_no_tags(tmp_path):
    # Their receives are posted ahead and paired with sends by tag; NCCL pairs by order and ignores tags. A
    # one-rank gloo group whose backend configuration is reported as NCCL's stands in for a GPU job here: a group
    # made with "nccl", and one made without a backend, whose CPU tensors go through gloo and CUDA ones through
    # NCCL (this model's CPU tensors then run).
    code = f"""
import torch, torch.distributed as dist, torch.nn as nn
import fulcrum.runtime as fr
from fulcrum.runtime.waves import WaveRuntime
dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(2, 2) for _ in range(4))
plan = fr.RuntimePlan.generate("interleaved", 4, 2, pp=1, vpp=2)
for config in ("nccl", "cpu:nccl", "cpu:gloo,cuda:nccl"):
    dist.get_backend_config = lambda group=None: config
    for build in (lambda: fr.Runtime(Chain(), plan, lambda out, labels: out.sum()),
                  lambda: WaveRuntime(Chain(), None, "waves.json")):
        try:
            build()
            print(config, "accepted")
        except Exception as e:  # past the check, the stand-in task graph is no graph
            print(config, "refused: " + str(e) if isinstance(e, ValueError) and "NCCL" in str(e) else "accepted")
dist.get_backend_config = lambda group=None: "nccl"
# The same plan without a pipeline runs on DDP, which NCCL serves.
fr.Runtime(Chain(), fr.RuntimePlan.generate("1f1b", 4, 2), lambda out, labels: out.sum())
print("ddp accepted")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 7, out.stdout
    for line in lines[:4]:
        assert "refused:" in line and "NCCL" in line, line
    assert "executor" in lines[0] and "WaveRuntime" in lines[1]
    assert lines[4:] == ["cpu:gloo,cuda:nccl accepted", "cpu:gloo,cuda:nccl accepted", "ddp accepted"]


def test_a_step_that_fails_leaves_the_gradients_as_they_were(tmp_path):
    # One process, PP 1 × 2 chunks (the executor): the loss of the second micro-batch raises after the first
    # micro-batch's backward has written gradients. Parameters that held none hold none again; one that held a
    # gradient from an earlier call holds exactly it.
    from chain_model import Chain

    calls = []

    def loss_fn(out, labels):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a loss that fails")
        return out.sum()

    model = Chain()
    earlier = torch.full((3,), 7.0)
    model.layers[3].linear.bias.grad = earlier.clone()
    runtime = fr.Runtime(model, fr.RuntimePlan.generate("interleaved", 4, 2, pp=1, vpp=2), loss_fn)
    assert runtime.engine == "executor"
    batches = [{"x": torch.randn(2, 3), "labels": torch.ones(2, dtype=torch.long)} for _ in range(2)]
    with pytest.raises(RuntimeError, match="a loss that fails"):
        runtime.step(batches, step_tokens=4)
    assert len(calls) == 2
    for name, q in model.named_parameters():
        if name == "layers.3.linear.bias":
            assert torch.equal(q.grad, earlier)
        else:
            assert q.grad is None, name


CHANGING_STEPS = """
import sys, torch, torch.distributed as dist
import fulcrum.runtime as fr
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
sys.path.insert(0, sys.argv[-1])  # the tests' folder
from chain_model import Chain
loss = lambda out, labels: out.sum()
torch.manual_seed(rank + 1)
mb = lambda n: {"x": torch.randn(n, 3), "labels": torch.ones(n, dtype=torch.long)}
if sys.argv[1] == "ddp":
    model = Chain()
    first = model.layers[0].linear.weight
    first.requires_grad_(False)
    runtime = fr.Runtime(model, fr.RuntimePlan.generate("1f1b", 4, 1, dp=2), loss)
    assert runtime.engine == "ddp"
    first.requires_grad_(True)  # unfrozen after the runtime was made, on every replica
    torch.manual_seed(rank + 1)  # each replica its own data
    runtime.step([mb(2)], step_tokens=4)
    both = [torch.zeros_like(first.grad) for _ in range(2)]
    dist.all_gather(both, first.grad)
    print("equal" if torch.equal(both[0], both[1]) else "apart")
else:
    runtime = fr.Runtime(Chain(), fr.RuntimePlan.generate("1f1b", 4, 2, pp=2), loss)
    assert runtime.engine == "torch"
    runtime.step([mb(2), mb(2)], step_tokens=4)
    try:
        runtime.step([mb(5), mb(5)], step_tokens=10)
        print("accepted")
    except ValueError as e:
        print("refused: " + str(e))
runtime.close()
fr.end_rank()  # past gloo's teardown, which can abort a rank after its work is done
"""


@pytest.mark.parametrize("mode", ["ddp", "torch"])
def test_steps_that_change_what_trains_or_the_shapes_are_reduced_or_refused(mode, tmp_path):
    # DDP reduces only what required a gradient when it was made: layers unfrozen later were left unreduced, each
    # replica stepping its own gradient. torch.distributed.pipelining's stages keep the first step's shapes: a
    # later step of other shapes aborted the process in gloo.
    script = tmp_path / "changing_steps.py"
    script.write_text(CHANGING_STEPS)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), mode, str(TESTS)], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The two ranks' lines may interleave: each rank's answer is counted.
    want = "equal" if mode == "ddp" else ("refused: engine 'torch' fixed the micro-batches' shapes at its first step, "
                                          "but 'labels' was (2,) and is now (5,)")
    assert done.stdout.count(want) == 2, done.stdout
    assert "apart" not in done.stdout and "accepted" not in done.stdout


CLIPPED = """
import sys, torch, torch.distributed as dist
import fulcrum.runtime as fr
torch.set_num_threads(1)
dist.init_process_group("gloo")
sys.path.insert(0, sys.argv[-1])  # the tests' folder
from chain_model import Chain
loss = lambda out, labels: (out ** 2).sum()
model, reference = Chain(), Chain()
torch.manual_seed(1)
batches = [{"x": torch.randn(2, 3), "labels": torch.ones(2, dtype=torch.long)} for _ in range(2)]
runtime = fr.Runtime(model, fr.RuntimePlan.generate("1f1b", 4, 2, pp=2), loss)
runtime.step(batches, step_tokens=4)
norm = runtime.clip_grad_norm_(0.05)
# One process: the whole chain on both micro-batches, the same token mean, torch's own clipping.
total = 0
for b in batches:
    state = ()
    for layer in reference.layers:
        state = layer(state, b)
    total = total + loss(state[0], b["labels"]) / 4
total.backward()
want = float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05))
mine = [name for name, q in model.named_parameters() if any(q is r for r in runtime.parameters())]
got = dict(model.named_parameters())
same = all(torch.allclose(got[n].grad, dict(reference.named_parameters())[n].grad, rtol=1e-5, atol=1e-8)
           for n in mine)
print(f"norm {norm:.6g} want {want:.6g} clipped {'alike' if same else 'apart'} stages {len(mine)}", flush=True)
runtime.close()
fr.end_rank()  # past gloo's teardown, which can abort a rank after its work is done
"""


def test_the_gradient_norm_is_clipped_over_every_pipeline_stage(tmp_path):
    # Megatron-LM clips by the whole model's gradient norm; each stage clipping by its own norm would scale the
    # stages differently and train apart from one process.
    script = tmp_path / "clipped.py"
    script.write_text(CLIPPED)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), str(TESTS)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.replace("norm ", "\nnorm ").split("\n") if line.startswith("norm ")]
    assert len(lines) == 2, done.stdout
    for line in lines:
        fields = line.split()
        assert float(fields[1]) == pytest.approx(float(fields[3]), rel=1e-5), line
        assert float(fields[1]) > 0.05  # the norm was above the bound: the clipping scaled something
        assert fields[5] == "alike" and int(fields[7]) > 0, line


STAGE_INPUTS = """
import json, sys, torch, torch.nn as nn, torch.distributed as dist
import fulcrum.runtime as fr
torch.set_num_threads(1)


class First(nn.Module):  # features, and the token ids passed on to the next stage
    def __init__(self):
        super().__init__()
        self.lin, self.bn = nn.Linear(3, 3), nn.BatchNorm1d(3)

    def forward(self, state, b):
        return (self.bn(self.lin(b["x"])), b["ids"] + 0)


class Same(nn.Module):
    def forward(self, state, b):
        return state


class Lookup(nn.Module):  # the next stage looks the ids up
    def __init__(self):
        super().__init__()
        self.emb, self.bn = nn.Embedding(5, 3), nn.BatchNorm1d(3)

    def forward(self, state, b):
        return (self.bn(state[0] + self.emb(state[1])),)


class Last(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, state, b):
        return (self.lin(state[0]),)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList([First(), Same(), Lookup(), Last()])


loss = lambda out, labels: (out ** 2).sum()
torch.manual_seed(1)
batches = [{"x": torch.randn(2, 3), "ids": torch.randint(0, 5, (2,)), "labels": torch.ones(2, dtype=torch.long)}
           for _ in range(2)]
if sys.argv[1] == "one":
    model = Model()
    model.train()
    total = 0.0
    for b in batches:
        state = ()
        for layer in model.layers:
            state = layer(state, b)
        total += float(loss(state[0], b["labels"])) / 4
    stats = {f"{i}": [int(l.bn.num_batches_tracked), [float(v) for v in l.bn.running_mean]]
             for i, l in enumerate(model.layers) if hasattr(l, "bn")}
    print("RESULT " + json.dumps({"loss": total, "stats": stats}), flush=True)
    sys.exit(0)
dist.init_process_group("gloo")
model = Model()
runtime = fr.Runtime(model, fr.RuntimePlan.generate("1f1b", 4, 2, pp=2), loss, engine=sys.argv[1])
result = runtime.step(batches, step_tokens=4)
stats = {f"{runtime.stages[s].first + k}": [int(l.bn.num_batches_tracked), [float(v) for v in l.bn.running_mean]]
         for s in runtime.stage_ids for k, l in enumerate(runtime.stages[s].layers) if hasattr(l, "bn")}
print("RESULT " + json.dumps({"engine": runtime.engine, "loss": result.loss, "stats": stats}), flush=True)
if sys.argv[1] == "torch":
    try:
        runtime.step([dict(b, pixels=torch.zeros(0, 4)) for b in batches], step_tokens=4)
        print("REFUSAL accepted", flush=True)
    except ValueError as e:
        print("REFUSAL " + str(e), flush=True)
runtime.close()
fr.end_rank()  # past gloo's teardown, which can abort a rank after its work is done
"""


@pytest.mark.parametrize("engine", ["torch", "executor"])
def test_stage_inputs_of_token_ids_run_and_each_forward_counts_once(engine, tmp_path):
    # torch.distributed.pipelining inferred its stages' shapes by running every stage after the first on
    # uninitialised inputs: token ids passed between stages indexed an embedding out of range, and the extra
    # forward counted in BatchNorm's statistics. The runtime gives it the shapes from a forward of real data.
    script = tmp_path / "stage_inputs.py"
    script.write_text(STAGE_INPUTS)

    def results(*args, processes):
        cmd = ([sys.executable, str(script)] if processes == 1 else
               [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
                str(script)])
        done = subprocess.run(cmd + list(args), cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        lines = done.stdout.replace("RESULT ", "\nRESULT ").replace("REFUSAL ", "\nREFUSAL ").split("\n")
        return ([json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")],
                [line[len("REFUSAL "):] for line in lines if line.startswith("REFUSAL ")])

    (one,), _ = results("one", processes=1)
    ranks, refusals = results(engine, processes=2)
    assert len(ranks) == 2
    stats = {}
    for r in ranks:
        assert r["engine"] == engine
        assert r["loss"] == pytest.approx(one["loss"], rel=1e-5)
        stats.update(r["stats"])
    assert sorted(stats) == sorted(one["stats"])
    for layer, (batches_tracked, mean) in stats.items():
        assert batches_tracked == one["stats"][layer][0] == 2  # one forward of each micro-batch
        assert mean == pytest.approx(one["stats"][layer][1], rel=1e-5, abs=1e-7)
    if engine == "torch":  # an entry torch cannot split into micro-batches is named, not a crash inside torch
        assert len(refusals) == 2, refusals
        assert all("engine 'torch' splits every batch entry along its first dimension, but 'pixels' is a tensor of "
                   "no rows, (0, 4)" in r for r in refusals), refusals
