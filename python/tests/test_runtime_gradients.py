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


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("gradients") / "result.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(WORKER), "--out", str(out)], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case, engine", [
    ("ddp-unused", "ddp"),                          # no images, then on one rank only, then on both
    ("ddp-accumulate", "ddp"),                      # two steps' gradients before the optimizer's
    ("executor-accumulate", "executor"),            # the same where the runtime sums over replicas itself
    ("zb-h1-frozen-first-stage", "executor"),       # split backward, nothing to differentiate on rank 0
    ("interleaved-frozen-first-stage", "executor"),
    ("zb-h1-frozen-last-stage", "executor"),        # no weight gradients on rank 1, input gradients still sent
])
def test_gradients_are_one_processes(cases, case, engine):
    ranks = cases[case]
    assert len(ranks) == 2
    for rank in ranks:
        assert rank["engine"] == engine
        assert rank["errors"] and all(e <= 1e-6 for e in rank["errors"]), rank["errors"]
