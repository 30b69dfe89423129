"""A real data-parallel run of examples/ddp_train.py: 2 processes over gloo, then a resume on 1 process."""

import collections
import json
import math
import os
import subprocess
import sys

from conftest import REPO

SAMPLES = 600


def torchrun(processes, *args, tmp_path):
    # One host: gloo talks over loopback.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               GLOO_SOCKET_IFNAME="lo")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
           str(REPO / "examples" / "ddp_train.py"), "--max-samples", str(SAMPLES), *args]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-20000:]
    return done.stdout


def read(prefix, ranks):
    return [json.loads(open(f"{prefix}.rank{r}.json").read()) for r in range(ranks)]


def test_two_gloo_ranks_then_resume_on_one(tmp_path):
    ckpt, first, second = tmp_path / "ckpt.pt", tmp_path / "first", tmp_path / "second"
    torchrun(2, "--steps", "10", "--checkpoint", str(ckpt), "--report", str(first), tmp_path=tmp_path)
    a = read(first, 2)

    # Both ranks ran the same 10 steps, each with the same number of micro-batches, and DDP kept their
    # parameters identical.
    assert [s["step"] for s in a[0]["steps"]] == [s["step"] for s in a[1]["steps"]] == list(range(10))
    assert all(len(s["ids"]) == 2 for r in a for s in r["steps"])
    assert a[0]["parameter_checksum"] == a[1]["parameter_checksum"]
    assert all(math.isfinite(x) for x in a[0]["step_loss"])
    seen = [i for r in a for s in r["steps"] for mb in s["ids"] for i in mb]
    assert len(seen) == len(set(seen)), "a sample trained twice within the first steps"

    # Resume the same epoch on one process: the rest of the samples, re-planned, none lost or repeated.
    out = torchrun(1, "--resume", str(ckpt), "--report", str(second), tmp_path=tmp_path)
    assert "trained" in out
    (b,) = read(second, 1)
    assert b["steps"][0]["step"] == 10
    rest = [i for s in b["steps"] for mb in s["ids"] for i in mb]
    assert not set(seen) & set(rest)
    counts = collections.Counter(seen + rest)
    assert sorted(counts) == list(range(SAMPLES)), "a sample was never trained on"
    assert sum(counts.values()) - SAMPLES < 2 * 4, "more repeats than completing one step needs"
