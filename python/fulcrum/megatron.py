"""Applying a Fulcrum plan's per-stage recomputation in Megatron-LM.

Megatron-LM recomputes the first N transformer blocks of every model chunk (``--recompute-granularity full
--recompute-method block --recompute-num-layers N``) with one N for the whole run. A Fulcrum plan chooses per
block, so stages with spare memory recompute less. Each pipeline rank is its own process and builds its own
model, so the N can differ per rank: call this before building the model::

    plan = json.load(open("plan.json"))              # fulcrum plan --out plan.json
    args.recompute_num_layers = fulcrum.megatron.recompute_num_layers(
        plan, mpu.get_pipeline_model_parallel_rank())

Megatron has no per-block choice between selective and full recomputation, so a block the plan recomputes
selectively is recomputed fully here: never more memory than planned, at some extra compute.
"""

__all__ = ["recompute_num_layers"]


def _expand_runs(runs):
    modes = []
    for mode, count in runs:
        modes.extend([mode] * int(count))
    return modes


def _block_flags(plan):
    """Which flattened layers are the LLM's transformer blocks (the layout's ``t``), if the plan file says (None
    otherwise: plan files before ``llm_blocks`` gave only ``transformer_blocks``, the encoders' blocks among them,
    which Megatron's count leaves out)."""
    blocks = plan.get("llm_blocks")
    return None if blocks is None else [bool(b) for b in blocks]


def recompute_num_layers(plan, pipeline_rank):
    """The number of LLM blocks Megatron-LM should recompute on each model chunk of ``pipeline_rank``.

    ``plan`` is the JSON object ``fulcrum plan --out`` writes (its ``llm_blocks`` say which layers Megatron's
    count covers; ValueError without them). The answer is the most any of the rank's chunks recomputes, counting selective recomputation as
    full, so every chunk fits its memory. The encoders' blocks do not count: Megatron configures its vision model's
    recomputation on its own.
    """
    schedule = plan.get("schedule", plan)
    layout = schedule["layout"]
    pp, vpp = int(layout["pp"]), int(layout["vpp"])
    if not 0 <= pipeline_rank < pp:
        raise ValueError(f"pipeline rank {pipeline_rank} is not one of the plan's {pp}")
    modes = _expand_runs(schedule["recompute"])
    blocks = _block_flags(plan)
    if blocks is None:
        raise ValueError("the plan does not say which layers are the LLM's blocks (llm_blocks): pass the whole file "
                         "fulcrum plan --out writes, not its schedule alone, made by a Fulcrum that writes them")
    if len(blocks) != len(modes):
        raise ValueError(f"the plan's llm_blocks names {len(blocks)} layers but its schedule {len(modes)}")
    most = 0
    for chunk in range(vpp):
        first, end = schedule["stages"][chunk * pp + pipeline_rank]
        count = sum(1 for i in range(first, end) if modes[i] != "none" and blocks[i])
        most = max(most, count)
    return most
