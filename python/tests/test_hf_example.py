"""examples/hf_trainer.py on 2 gloo processes: the Trainer trains on exactly the sampler's micro-batches."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

import fulcrum

pytest.importorskip("transformers")


def test_trainer_takes_each_ranks_planned_micro_batches(tmp_path):
    # One host, gloo over loopback; no network: nothing here may reach the Hugging Face hub.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               GLOO_SOCKET_IFNAME="lo", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    report = tmp_path / "report"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(REPO / "examples" / "hf_trainer.py"), "--max-samples", "800", "--steps", "6",
           "--output-dir", str(tmp_path / "out"), "--report", str(report)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-20000:]
    assert "trained 6 steps on 2 processes" in done.stdout

    with pytest.warns(UserWarning):  # the bundled index lists files that are not bundled
        lengths = fulcrum.Dataset.load(str(REPO / "data" / "internvl_sft_1.2M.json"))
    lengths = lengths.subset(np.arange(800))
    for rank in range(2):
        got = json.loads((tmp_path / f"report.rank{rank}.json").read_text())["micro_batches"]
        sampler = fulcrum.BalancedBatchSampler(lengths, rank=rank, world_size=2, batch_size=4, micro_batches=2,
                                               seed=42)  # TrainingArguments' default seed
        want = [list(b) for b, _ in zip(sampler, range(12))]
        # Accelerate's loader fetches one micro-batch ahead (to know which is last), so one more may show.
        assert got[:12] == want and len(got) <= 13
