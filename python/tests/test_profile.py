"""fulcrum.profile: layer tables the simulator reads, the same from a torch.profiler trace, and communication."""

import json
import sys
import types

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

import fulcrum._core as core  # noqa: E402
import fulcrum.profile as fp  # noqa: E402

sys.path.insert(0, str(REPO / "examples" / "tiny_vlm"))
from model import TinyVlm, TinyVlmConfig  # noqa: E402

CONFIG = TinyVlmConfig(vision_hidden=32, vision_ffn=64, vision_heads=2, vision_blocks=2, hidden=48, ffn=96, heads=2,
                       blocks=2, vocab=64)
GRID = {"vision": [64, 256], "projector": [32, 128], "llm": [64, 256]}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    torch.set_num_threads(1)
    model = TinyVlm(CONFIG)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        table = fp.profile_model(model, model.fulcrum_model(), GRID, warmup=1, repeats=3, profiler=prof)
    trace = tmp_path_factory.mktemp("kineto") / "trace.json"
    prof.export_chrome_trace(str(trace))
    return model, table, trace


def test_the_table_is_what_the_simulator_reads(profiled, tmp_path):
    model, table, _ = profiled
    path = tmp_path / "profile.json"
    fp.write_profile(path, table)
    assert core.check_profile(path.read_text(), str(path)) == len(table["entries"])
    assert fp.read_profile(path) == table
    # One entry per distinct layer shape and pass: the encoder's and the LLM's blocks differ, the repeated
    # blocks of each share theirs. 8 shapes: patch embedding, two blocks, two final norms, projector, embedding,
    # LM head; the patch embedding has no input gradient, so 8 × 5 − 1 entries.
    shapes = {json.dumps({k: v for k, v in e.items() if k not in ("pass", "tokens", "seconds")}, sort_keys=True)
              for e in table["entries"]}
    assert len(shapes) == 8 and len(table["entries"]) == 8 * 5 - 1
    for e in table["entries"]:
        assert e["dtype"] == "fp32" and e["tp"] == 1 and e["pass"] in fp.PASSES
        assert e["tokens"] == GRID[{"patch_embedding": "vision", "projector": "projector"}.get(
            e["layer"], "llm" if e["hidden"] == 48 else "vision")]
        assert all(s > 0 for s in e["seconds"])
    blocks = [e for e in table["entries"] if e["layer"] == "transformer" and e["hidden"] == 48]
    assert {e["pass"] for e in blocks} == set(fp.PASSES)
    (block,) = [e for e in blocks if e["pass"] == "forward"]
    assert block == {**block, "ffn": 96, "heads": 2, "kv_heads": 2, "head_dim": 24, "mlp": "gelu", "sequence_tokens": 0}
    # Four times the tokens take longer (a block's work grows at least linearly).
    assert block["seconds"][1] > block["seconds"][0]
    vision = [e for e in table["entries"] if e["layer"] == "transformer" and e["hidden"] == 32]
    assert {e["sequence_tokens"] for e in vision} == {CONFIG.patches}


def test_a_kineto_trace_gives_the_same_table(profiled):
    model, table, trace = profiled
    back = fp.import_kineto_trace(trace, model.fulcrum_model())
    assert [(e["layer"], e["hidden"], e["pass"], e["tokens"]) for e in back["entries"]] == [
        (e["layer"], e["hidden"], e["pass"], e["tokens"]) for e in table["entries"]]
    for got, want in zip(back["entries"], table["entries"]):
        # The profiler's range encloses the timed call: never shorter, and close on layers that take a while.
        for g, w in zip(got["seconds"], want["seconds"]):
            if want["pass"] != "backward_weight" and w > 1e-3:
                assert w * 0.8 <= g <= w * 1.5 + 1e-4


def test_bad_tables_and_traces_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    lm_head = {"layer": "lm_head", "hidden": 8, "vocab": 64, "pass": "forward"}
    bad.write_text(json.dumps({"fulcrum_profile": 1, "device": "cpu", "entries": [
        dict(lm_head, tokens=[2, 1], seconds=[1, 2])]}))
    with pytest.raises(ValueError, match="bad.json: entry 0: tokens must increase"):
        fp.read_profile(bad)
    # What the core refuses, the Python reader refuses: a key no entry has, a count given as true.
    for entry, message in ((dict(lm_head, tokens=[1], seconds=[1], heads=2), "heads"),
                           (dict(lm_head, tokens=[True], seconds=[1]), "tokens")):
        bad.write_text(json.dumps({"fulcrum_profile": 1, "device": "cpu", "entries": [entry]}))
        with pytest.raises(ValueError, match=f"bad.json: entry 0: .*{message}"):
            fp.read_profile(bad)
    with pytest.raises(ValueError, match="bad.json: entry 0"):
        core.check_profile(bad.read_text(), str(bad))
    empty = tmp_path / "trace.json"
    empty.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "dur": 3}]}))
    with pytest.raises(ValueError, match="trace.json: no fulcrum"):
        fp.import_kineto_trace(empty, TinyVlm(CONFIG).fulcrum_model())


def test_a_trace_of_a_frozen_first_layer_and_of_a_gpu_is_read_as_profile_model_writes_it(tmp_path):
    # Layer 0 (the patch embedding, frozen, on pixels that take no gradient) runs forwards only, as time_layer
    # times it; layer 1's forward also has the GPU's span of the same name, shorter, which is not the host's.
    def span(name, dur, cat="user_annotation"):
        return {"ph": "X", "name": name, "dur": dur, "cat": cat}

    events = [span("fulcrum/0/64/forward", 100), span("fulcrum/0/64/forward", 300), span("fulcrum/0/64/forward", 200),
              span("fulcrum/1/64/forward", 1000), span("fulcrum/1/64/forward", 40, "gpu_user_annotation"),
              span("fulcrum/1/64/backward", 2000), span("fulcrum/1/64/backward_input", 1200),
              span("fulcrum/1/64/backward_weight", 900)]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    model_json = TinyVlm(CONFIG).fulcrum_model()
    table = fp.import_kineto_trace(trace, model_json)
    seconds = {(e["layer"], e["pass"]): e["seconds"] for e in table["entries"]}
    assert seconds[("patch_embedding", "forward")] == [pytest.approx(200e-6)]  # the median of three
    assert ("patch_embedding", "backward") not in seconds
    assert seconds[("transformer", "forward")] == [pytest.approx(1000e-6)]
    assert seconds[("transformer", "backward_weight")] == [pytest.approx(900e-6)]
    # Split halves without the whole backward they are checked against are refused.
    trace.write_text(json.dumps({"traceEvents": [span("fulcrum/1/64/forward", 1000),
                                                 span("fulcrum/1/64/backward_input", 1200)]}))
    with pytest.raises(ValueError, match="trace.json: layer 1 at 64 tokens has split backward runs"):
        fp.import_kineto_trace(trace, model_json)


def test_an_encoder_token_count_between_whole_items_is_refused():
    # The vision tower runs whole tiles: 100 tokens would be timed as one 64-token tile and recorded as 100.
    model = TinyVlm(CONFIG)
    with pytest.raises(ValueError, match="token count 100 for component 'vision' is not a whole number of its "
                                         f"{CONFIG.patches}-token items"):
        fp.profile_model(model, model.fulcrum_model(), dict(GRID, vision=[64, 100]), warmup=0, repeats=1)


def test_a_model_json_that_is_not_the_model_is_refused():
    model = TinyVlm(CONFIG)
    other = TinyVlm(TinyVlmConfig(vision_blocks=1, blocks=1, vision_hidden=32, vision_ffn=64, hidden=32, ffn=64,
                                  vocab=64)).fulcrum_model()
    with pytest.raises(ValueError, match="layers but the model has"):
        fp.profile_model(model, other, [64])


def test_after_round_runs_between_the_rounds_of_the_grid():
    # What after_round times must share the machine's slow spells with the layers: it runs after each whole pass,
    # between the timed runs of the grid, not once before or after all of them.
    model = TinyVlm(CONFIG)
    events = []
    layer = model.layers[0]
    hook = layer.register_forward_hook(lambda *_: events.append("layer"))
    fp.profile_model(model, model.fulcrum_model(), [64], warmup=0, repeats=1, rounds=3,
                     after_round=lambda: events.append("round"))
    hook.remove()
    assert events.count("round") == 3
    assert events[-1] == "round"
    assert "layer" in events[events.index("round") + 1:]  # the grid ran again after the first round's call


def test_frozen_layers_are_timed_for_the_passes_they_run():
    # A frozen first layer (a frozen patch embedding) runs no backward at all, and a frozen layer further on only
    # its input gradient: the table leaves out what they do not run (the analytic model prices it), so profiling a
    # partly frozen model does not fail.
    model = TinyVlm(CONFIG)
    for q in [*model.layers[0].parameters(), *model.layers[1].parameters()]:
        q.requires_grad_(False)
    first = fp.time_layer(model.layers[0], lambda: model.profile_inputs(0, 64), warmup=0, repeats=1)
    assert set(first) == {"forward", "recompute"} and first["forward"] > 0
    middle = fp.time_layer(model.layers[1], lambda: model.profile_inputs(1, 64), warmup=0, repeats=1)
    assert middle["backward_input"] == middle["backward"] > 0 and middle["backward_weight"] == 0
    table = fp.profile_model(model, model.fulcrum_model(), GRID, warmup=0, repeats=1)
    passes = {(e["layer"], e["pass"], e["hidden"]) for e in table["entries"]}
    hidden = CONFIG.vision_hidden
    assert ("patch_embedding", "forward", hidden) in passes and ("patch_embedding", "backward", hidden) not in passes
    # The frozen vision block shares its shape with a trained one, which is the one timed: a weight gradient.
    assert ("transformer", "backward_weight", hidden) in passes


NCCL_TESTS = """# nThread 1 nGpus 1 minBytes 1024 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid   1234 on   node-1 device  0 [0x07] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1235 on   node-1 device  1 [0x0a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    20.00    0.05    0.05      0    19.90    0.05    0.05      0
       65536         16384     float     sum      -1    30.00    2.18    2.18      0    29.50    2.22    2.22      0
     4194304       1048576     float     sum      -1   660.00    6.36    6.36      0   650.00    6.45    6.45      0
# Out of bounds values : 0 OK
"""


def test_nccl_tests_output_fits_latency_and_bandwidth():
    fit = fp.parse_nccl_tests(NCCL_TESTS)
    assert fit.op == "all_reduce" and fit.ranks == 2
    # The rows lie near t = 20 µs + S / 6.67 GB/s: the fit recovers both within a few percent.
    assert fit.latency_seconds == pytest.approx(20e-6, rel=0.1)
    assert fit.bytes_per_second == pytest.approx((4194304 - 1024) / (660e-6 - 20e-6), rel=0.03)
    with pytest.raises(ValueError, match="run.log: no nccl-tests result rows"):
        fp.parse_nccl_tests("# nothing here\n", "run.log")


def test_the_cpu_cluster_reproduces_the_measured_all_reduce(tmp_path):
    fit = fp.fit_alpha_beta("all_reduce", 2, [1e6, 4e6], [1e-3 + 1e6 / 2e9, 1e-3 + 4e6 / 2e9])
    assert fit.bytes_per_second == pytest.approx(2e9) and fit.latency_seconds == pytest.approx(1e-3)
    cluster = fp.cpu_cluster(2, fit, fp32_flops_per_second=5e10, compute_slowdown=0.7)
    # Under the simulator's link model a 2-rank ring moves S / (rate / 2 × 0.5): S / 2e9 again.
    rate = cluster["device"]["intra_node_bytes_per_second"]
    assert 1e6 / (rate / 2 * fp.comm.CPU_LINK_EFFICIENCY) == pytest.approx(1e6 / 2e9)
    # fp32 runs at half the bf16 rate in the simulator: the measured fp32 rate is written doubled.
    assert cluster["preset"] == "cpu:2" and cluster["device"]["bf16_flops_per_second"] == 1e11
    assert cluster["device"]["communication_compute_slowdown"] == 0.7
    # The 1 ms fitted latency is the simulator's two ring steps of 2 ranks: 0.5 ms each.
    assert cluster["device"]["collective_latency_seconds"] == pytest.approx(0.5e-3)


def test_all_reduces_are_fitted_on_their_mean_time_with_the_sizes_in_turn(monkeypatch):
    """Each size costs 1 ms + S / 1 GB/s, and two of its five measured all-reduces are woken 3 ms late (the
    bimodal wait of a shared host): the fit takes the mean, 1 ms + 1.2 ms of latency, where the median would
    take the prompt mode alone."""
    import torch.distributed as dist

    clock, called = [0.0], []

    def all_reduce(buffer, group=None):
        called.append(buffer.numel() * 4)
        late = called.count(called[-1]) in (2, 3)  # the first measured repeats, after one warm-up
        clock[0] += 1e-3 + buffer.numel() * 4 / 1e9 + (3e-3 if late else 0.0)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "barrier", lambda group=None: None)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(fp.comm, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    sizes = [1 << 12, 1 << 16, 1 << 20]
    fit = fp.benchmark_all_reduce(sizes, repeats=5, warmup=1)
    # Every repeat (the warm-up's too) takes each size once, in turn, so a slow spell falls on all of them.
    assert called == sizes * 6
    assert fit.seconds == pytest.approx([1e-3 + s / 1e9 + 1.2e-3 for s in sizes])
    assert fit.latency_seconds == pytest.approx(2.2e-3) and fit.bytes_per_second == pytest.approx(1e9)


def test_a_collective_started_between_compute_is_charged_its_mean_cost_in_place(monkeypatch):
    """Each chunk of compute takes 5 ms; starting an all-reduce beside it costs the loop 1 ms, or 5 ms one time in
    sixteen (a peer's thread woken late), which falls in two of the eight measured loops: the mean, 1.25 ms, is
    what a step pays per all-reduce, where the median of the loops would say 1 ms. The all-reduces start in the
    loop's middle, without waiting, and are waited for at its end."""
    import torch.distributed as dist

    clock, events, started = [0.0], [], [0]

    class Work:
        def wait(self):
            events.append("wait")

    def all_reduce(buffer, group=None, async_op=False):
        assert async_op
        started[0] += 1
        clock[0] += 5e-3 if started[0] % 16 == 0 else 1e-3
        events.append("all_reduce")
        return Work()

    def chunk():
        clock[0] += 5e-3
        events.append("chunk")

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "barrier", lambda group=None: events.append("barrier"))
    monkeypatch.setattr(fp.comm, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    seconds = fp.measure_collective_compute_seconds(chunk, chunks=10, collectives=4, repeats=8)
    assert seconds == pytest.approx(1.25e-3)
    # One warm-up pair and eight measured ones, each loop without the all-reduces first.
    loops = [loop.split() for loop in " ".join(events).split("barrier")[1:]]
    alone = ["chunk"] * 10
    with_them = ["chunk"] * 4 + ["all_reduce", "chunk"] * 3 + ["all_reduce"] + ["chunk"] * 3 + ["wait"] * 4
    assert loops == [alone, with_them] * 9
    with pytest.raises(ValueError, match="cannot start between"):
        fp.measure_collective_compute_seconds(chunk, chunks=3, collectives=4)
    # What the simulator gets on top of its slowdown × the all-reduce's time (1 ms + 4096 B / 2 GB/s), into the
    # cluster file.
    fit = fp.fit_alpha_beta("all_reduce", 2, [1e6, 4e6], [1e-3 + 1e6 / 2e9, 1e-3 + 4e6 / 2e9])
    start = fp.collective_start_seconds(1.5e-3, 0.5, fit, 4096)
    assert start == pytest.approx(1.5e-3 - 0.5 * (1e-3 + 4096 / 2e9))
    assert fp.collective_start_seconds(0.2e-3, 0.5, fit, 4096) == 0.0  # the slowdown covers it all
    cluster = fp.CpuCalibration(all_reduce=fit, compute_slowdown=0.5, optimizer_seconds=0.02, parameters=1000,
                                devices=2, collective_compute_seconds=start).cluster()
    assert cluster["device"]["collective_compute_seconds"] == start


def test_a_calibration_across_runs_takes_the_median_of_every_sample():
    fit = fp.fit_alpha_beta("all_reduce", 2, [1e6, 4e6], [1e-3 + 1e6 / 2e9, 1e-3 + 4e6 / 2e9])
    cluster = fp.cpu_cluster(2, fit, compute_slowdown=0.6, optimizer_seconds=0.02, optimizer_parameters=1000)
    table = {"fulcrum_profile": 1, "entries": [{"layer": "a", "pass": "forward", "tokens": [8, 16],
                                                "seconds": [2.0, 3.0]}]}
    profile, recalibrated, record = fp.calibration_across_runs(
        table, cluster, whole_model_predicted_seconds=0.5, whole_model_seconds=[0.6, 0.4, 0.55, 0.7, 0.5],
        optimizer_seconds=[0.03, 0.01, 0.02, 0.05], parameters=1000)
    # Medians 0.55 s (the layer profile said 0.5 s) and 0.025 s.
    assert record["factor"] == pytest.approx(1.1) and record["optimizer_seconds"] == pytest.approx(0.025)
    assert profile["entries"][0]["seconds"] == pytest.approx([2.2, 3.3])
    assert table["entries"][0]["seconds"] == [2.0, 3.0]  # the layers' own table is left as it was
    # The simulator's Adam step: 30 bytes a parameter over the memory bandwidth at the cpu kind's efficiency.
    bandwidth = recalibrated["device"]["memory_bytes_per_second"]
    assert 30 * 1000 / (bandwidth * 0.6) == pytest.approx(0.025)
    # Everything else in the cluster file is the calibration's.
    assert {k: v for k, v in recalibrated["device"].items() if k != "memory_bytes_per_second"} == \
        {k: v for k, v in cluster["device"].items() if k != "memory_bytes_per_second"}
    with pytest.raises(ValueError, match="needs whole-model and optimizer samples"):
        fp.calibration_across_runs(table, cluster, whole_model_predicted_seconds=0.5, whole_model_seconds=[],
                                   optimizer_seconds=[0.02], parameters=1000)


def test_a_speed_check_times_its_own_work_every_nth_call():
    import time

    import torch

    layer = torch.nn.Linear(4, 4)
    before = [q.detach().clone() for q in layer.parameters()]
    calls = []

    def forward_backward():
        calls.append(len(calls))
        time.sleep(0.01)
        layer(torch.ones(2, 4)).sum().backward()

    check = fp.SpeedCheck(forward_backward, layer.parameters(), every=3)
    # Calls 1, 4 and 7 are timed (and say so): the work and an optimizer step each.
    assert [check() for _ in range(7)] == [True, False, False, True, False, False, True]
    assert len(calls) == 3
    assert len(check.whole_model_seconds) == len(check.optimizer_seconds) == 3
    assert min(check.whole_model_seconds) >= 0.01
    assert check.samples() == {"whole_model_seconds": check.whole_model_seconds,
                               "optimizer_seconds": check.optimizer_seconds}
    # A label files a sample under it as well; an unlabelled call, and a call that takes no sample, file nothing.
    assert check("b") is False and check("b") is False and check("a") is True
    assert check.samples("a") == {"whole_model_seconds": check.whole_model_seconds[-1:],
                                  "optimizer_seconds": check.optimizer_seconds[-1:]}
    assert check.samples("b") == {"whole_model_seconds": [], "optimizer_seconds": []}
    assert len(check.samples()["whole_model_seconds"]) == 4
    assert all(q.grad is None for q in layer.parameters())  # its gradients are cleared after its step
    assert any(not torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    with pytest.raises(ValueError, match="at least 1"):
        fp.SpeedCheck(forward_backward, layer.parameters(), every=0)


def test_odd_rounds_run_the_modes_in_reverse():
    assert fp.measurement_order(("a", "b", "c"), 3) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert fp.measurement_order(["a", "b"], 1) == [["a", "b"]]
    assert fp.measurement_order(["a", "b"], 0) == []


def test_alternating_blocks_run_every_step_of_every_mode_once_with_the_order_turned_each_block():
    order = fp.alternating_blocks(("a", "b"), 7, 3)
    assert order == [("a", 0, 3), ("b", 0, 3), ("b", 3, 6), ("a", 3, 6), ("a", 6, 7), ("b", 6, 7)]
    # Each mode meets every step once, whatever the block; over a whole number of pairs of blocks each mode runs
    # first in as many blocks as the other, so a linear drift of the host's speed charges both alike.
    for modes, steps, block in ((("x", "y", "z"), 30, 5), (("x", "y"), 30, 1), (("x", "y"), 10, 3)):
        order = fp.alternating_blocks(modes, steps, block)
        for m in modes:
            covered = [s for mode, first, end in order if mode == m for s in range(first, end)]
            assert covered == list(range(steps)), (m, order)
        firsts = [order[i][0] for i in range(0, len(order), len(modes))]
        assert firsts.count(modes[0]) == firsts.count(modes[-1]) == len(firsts) // 2, firsts
    assert [b[0] for b in fp.alternating_blocks(("x",), 4, 3)] == ["x", "x"]
    assert fp.alternating_blocks(("a", "b"), 0, 5) == []
    with pytest.raises(ValueError, match="at least 1"):
        fp.alternating_blocks(("a", "b"), 10, 0)
    with pytest.raises(ValueError, match="once"):
        fp.alternating_blocks(("a", "a"), 10, 2)


def test_modes_run_together_warm_up_last_mode_first_then_run_their_blocks():
    calls = []
    ran = fp.run_alternating(["a", "b"], 2, 3, 2, lambda m, k: calls.append((m, k)))
    assert calls == [("b", 0), ("b", 1), ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 2), ("b", 3), ("b", 4),
                     ("a", 4)]
    assert ran == [["a", 0, 2], ["b", 0, 2], ["b", 2, 3], ["a", 2, 3]]
    record = fp.together_record({"a": {"steps": 3, "warmup_steps": 2, "repeats": 1, "command": "c", "x": 1},
                                 "b": {"steps": 3, "warmup_steps": 2, "repeats": 1, "command": "c", "x": 2}},
                                2, ran, {"whole_model_seconds": [1.0], "optimizer_seconds": [0.1]})
    assert record["modes"]["b"]["x"] == 2 and record["steps"] == 3 and record["warmup_steps"] == 2
    assert record["repeats"] == 1 and record["command"] == "c" and record["block"] == 2 and record["order"] == ran
    assert record["speed_checks"]["whole_model_seconds"] == [1.0]
    assert "speed_checks" not in fp.together_record({"a": {"steps": 3}}, 2, [], None)


def test_a_size_correction_is_linear_in_log_tokens_between_its_points():
    at = fp.size_correction([[1024, 1.0], [256, 1.3]])  # given in any order
    assert at(256) == pytest.approx(1.3) and at(1024) == pytest.approx(1.0)
    assert at(512) == pytest.approx(1.15)  # halfway in log tokens
    assert at(64) == pytest.approx(1.3) and at(4096) == pytest.approx(1.0)  # the nearest point's beyond them
    assert fp.size_correction([])(100) == 1.0
    with pytest.raises(ValueError, match="positive"):
        fp.size_correction([[0, 1.0]])
    table = {"fulcrum_profile": 1, "entries": [{"layer": "a", "pass": "forward", "tokens": [256, 512, 1024],
                                                "seconds": [1.0, 2.0, 4.0]}]}
    scaled = fp.scaled_profile(table, 2.0, [[256, 1.3], [1024, 1.0]])
    assert scaled["entries"][0]["seconds"] == pytest.approx([2.6, 4.6, 8.0])
    assert fp.scaled_profile(table, 2.0)["entries"][0]["seconds"] == pytest.approx([2.0, 4.0, 8.0])


def _slowest_rank_worker(rank: int, store: str, out: str) -> None:
    import time

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    layer = torch.nn.Linear(4, 4)

    def forward_backward():  # rank 1 is the straggler
        time.sleep(0.05 * rank)
        layer(torch.ones(2, 4)).sum().backward()

    check = fp.SpeedCheck(forward_backward, layer.parameters())
    check()
    check()
    result = {"slowest": fp.slowest_rank_seconds(1.0 + rank), "check": check.samples(),
              "optimizer": fp.time_optimizer_step(layer.parameters(), warmup=0, repeats=2)}
    dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)


def test_every_rank_keeps_the_slowest_ranks_time(tmp_path):
    import torch.multiprocessing as mp

    assert fp.slowest_rank_seconds(0.25) == 0.25  # outside a process group: its own
    out = tmp_path / "rank"
    mp.spawn(_slowest_rank_worker, args=(str(tmp_path / "store"), str(out)), nprocs=2)
    results = [json.loads((tmp_path / f"rank.{r}").read_text()) for r in range(2)]
    assert [r["slowest"] for r in results] == [2.0, 2.0]
    # Rank 0's own pass takes no time to speak of; the samples both ranks keep are rank 1's 50 ms.
    assert results[0]["check"] == results[1]["check"]
    assert len(results[0]["check"]["whole_model_seconds"]) == 2
    assert min(results[0]["check"]["whole_model_seconds"]) >= 0.05
    assert results[0]["optimizer"] == results[1]["optimizer"]


def test_the_measurement_helpers_refuse_counts_that_would_measure_nothing():
    with pytest.raises(ValueError, match="cannot be negative"):
        fp.measurement_order(["a", "b"], -1)
    with pytest.raises(ValueError, match="the steps at least 0"):
        fp.alternating_blocks(["a", "b"], -3, 2)
    with pytest.raises(ValueError, match="moves nothing"):
        fp.fit_alpha_beta("all_reduce", 1, [1e6, 4e6], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="must be positive"):
        fp.calibration_across_runs({"entries": []}, {}, whole_model_predicted_seconds=0, whole_model_seconds=[1.0],
                                   optimizer_seconds=[1.0], parameters=10)
    with pytest.raises(ValueError, match="repeats >= 1"):
        fp.time_layer(torch.nn.Linear(4, 4), lambda: ((torch.randn(2, 4),), {}), repeats=0)


def test_an_optimizer_step_is_timed_without_a_process_group():
    params = [torch.nn.Parameter(torch.randn(8))]
    times = fp.time_optimizer_step(params, warmup=1, repeats=2)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_the_host_time_per_operator_counts_what_a_block_dispatches():
    """The block dispatches the operators the analytic model launches for a pre-norm GELU block with biases
    (fulcrum/cost/analytic_cost.h): forward 10, input gradient 13, weight gradient 8; the loss's sum and its
    gradient seed one each beside them. Its time over them is the host's time per operator."""
    torch.set_num_threads(1)
    m = fp.measure_launch_seconds(steps=20, repeats=3, warmup=3)
    assert m.forward_operators == 10 + 1
    assert m.backward_operators == 13 + 8 + 1
    assert 0 < m.seconds_per_operator < 1e-2
    assert m.seconds_per_operator == pytest.approx(m.step_seconds / 33)
    with pytest.raises(ValueError, match="must be at least 1"):
        fp.measure_launch_seconds(steps=0)
