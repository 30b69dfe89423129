"""Times BalancedBatchSampler at 1.2M samples: building it (load + plan of the epoch) and the per-step cost of
iterating it on one rank. Run by bench/run-benchmarks; figures go to BENCHMARKS.md.

    PYTHONPATH=build/python .venv/bin/python bench/sampler_bench.py build/bench/lengths_1.2M.json
"""

import argparse
import time
import warnings

import numpy as np

import fulcrum


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("lengths", help="a 1.2M-record length file (bench/run-benchmarks makes one)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = fulcrum.Dataset.load(args.lengths)
    tokens, tiles = np.asarray(data.tokens).copy(), np.asarray(data.vision).copy()
    print(f"{len(data):,} samples; best of {args.repeats}")
    print(f"{'case':44s} {'build s':>8s} {'steps':>7s} {'µs/step':>8s} {'µs/micro-batch':>15s}")
    for world_size, micro_batches in [(8, 1), (8, 4), (64, 1), (64, 4)]:
        def build_from_file():
            s = fulcrum.BalancedBatchSampler(args.lengths, rank=world_size - 1, world_size=world_size,
                                             batch_size=4, micro_batches=micro_batches)
            len(s)  # plans the epoch
            return s

        def build_from_arrays():
            s = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=world_size - 1,
                                             world_size=world_size, batch_size=4, micro_batches=micro_batches)
            len(s)
            return s

        file_s, sampler = best_of(args.repeats, build_from_file)
        array_s, _ = best_of(args.repeats, build_from_arrays)

        def iterate():
            count = 0
            for _ in sampler:
                count += 1
            return count

        iter_s, count = best_of(args.repeats, iterate)
        steps = count // micro_batches
        label = f"dp {world_size}, {micro_batches} micro-batch(es)/step"
        print(f"{label + ', from file':44s} {file_s:8.3f} {steps:7d} {iter_s / steps * 1e6:8.2f} "
              f"{iter_s / count * 1e6:15.2f}")
        print(f"{label + ', from arrays':44s} {array_s:8.3f}")

    # A resume on another world size re-plans the earlier segment to learn what it consumed.
    old = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=64)
    it = iter(old)
    for _ in range(1000):
        next(it)
    state = old.state_dict()

    def resume():
        s = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=48)
        s.load_state_dict(state)
        len(s)
        return s

    resume_s, _ = best_of(args.repeats, resume)
    print(f"{'resume at step 1000 of dp 64 on dp 48':44s} {resume_s:8.3f}")


if __name__ == "__main__":
    main()
