import os
from pathlib import Path

import numpy as np
import pytest

# One thread per process: the machine running the tests may have two cores and the gloo test starts two ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[2]
BUNDLED_INDEX = REPO / "data" / "internvl_sft_1.2M.json"


def fulcrum_cli() -> str:
    """The CLI the tests run: the build's (ctest sets FULCRUM_CLI to it), else build/fulcrum."""
    return os.environ.get("FULCRUM_CLI") or str(REPO / "build" / "fulcrum")


def random_lengths(n: int, seed: int):
    """Lengths shaped like the bundled data: 0–6 tiles, a few hundred to a few thousand tokens."""
    rng = np.random.default_rng(seed)
    tiles = rng.integers(0, 7, size=n)
    tokens = tiles * 256 + rng.integers(20, 1500, size=n)
    return tokens, tiles


def epoch_batches(sampler):
    """All micro-batches one rank yields in one pass, as (step, micro_batch, ids)."""
    return [(b.info.step, b.info.micro_batch, list(b)) for b in sampler]


@pytest.fixture(scope="session")
def bundled_index() -> Path:
    return BUNDLED_INDEX
