"""fulcrum.runtime on 2 gloo processes where gradients are easy to get wrong: parameters a micro-batch leaves
unused, gradients accumulated over two steps, frozen pipeline stages. Each rank's gradients must be one process's
on the same data."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("torch")

WORKER = REPO / "python" / "tests" / "gradient_worker.py"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", GLOO_SOCKET_IFNAME="lo")


def run_worker(out, ranks):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                           str(WORKER), "--out", str(out)], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return run_worker(tmp_path_factory.mktemp("gradients") / "result.json", 2)


@pytest.fixture(scope="module")
def four_rank_cases(tmp_path_factory):
    return run_worker(tmp_path_factory.mktemp("gradients4") / "result.json", 4)


@pytest.mark.parametrize("case, engine", [
    ("ddp-unused", "ddp"),                          # no images, then on one rank only, then on both
    ("ddp-accumulate", "ddp"),                      # two steps' gradients before the optimizer's
    ("executor-accumulate", "executor"),            # the same where the runtime sums over replicas itself
    ("zb-h1-frozen-first-stage", "executor"),       # split backward, nothing to differentiate on rank 0
    ("interleaved-frozen-first-stage", "executor"),
    ("zb-h1-frozen-last-stage", "executor"),        # no weight gradients on rank 1, input gradients still sent
])
def test_gradients_are_one_processes(cases, case, engine):
    assert_one_processes(cases[case], 2, engine)


def assert_one_processes(ranks, world_size, engine):
    """Every rank ran ``engine`` and its gradients were one process's at every step."""
    assert len(ranks) == world_size
    for rank in ranks:
        assert rank["engine"] == engine
        assert rank["errors"] and all(e <= 1e-6 for e in rank["errors"]), rank["errors"]


@pytest.mark.parametrize("case, engine", [
    ("torch-accumulate", "torch"),              # torch.distributed.pipelining's 1F1B, DP 2 × PP 2
    ("executor-dp-pp-accumulate", "executor"),  # interleaved, DP 2 × PP 2 × VPP 2
])
def test_gradients_accumulated_over_data_parallel_pipelines_are_one_processes(four_rank_cases, case, engine):
    assert_one_processes(four_rank_cases[case], 4, engine)


def test_a_closed_runtime_gives_its_process_groups_back(four_rank_cases):
    # DP 2 × PP 2 makes a data-parallel and a pipeline group per rank position; leaving the `with` block
    # destroys them all, down to the groups held before.
    for rank in four_rank_cases["groups"]:
        assert rank["held"] > rank["before"]
        assert rank["after"] == rank["before"]
