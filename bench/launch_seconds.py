"""The host's time per operator of eager PyTorch (the cluster file's kernel_launch_seconds, and the GPU kinds'
launch_seconds in fulcrum/cost/analytic_cost.cc): a pre-norm block of width 8 on 4 tokens, forward and backward,
timed on one thread and divided by the operators it dispatches. Figures go to BENCHMARKS.md.

    PYTHONPATH=build/python .venv/bin/python bench/launch_seconds.py [--device cuda]
"""

import argparse
import json

import torch

import fulcrum.profile as fp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    m = fp.measure_launch_seconds(args.device, steps=args.steps, repeats=args.repeats)
    print(json.dumps({"device": args.device, "torch": torch.__version__, "forward_operators": m.forward_operators,
                      "backward_operators": m.backward_operators, "step_seconds": m.step_seconds,
                      "seconds_per_operator": m.seconds_per_operator, "spread": m.spread}, indent=1))


if __name__ == "__main__":
    main()
