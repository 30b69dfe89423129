"""Per-rank recomputation counts for Megatron-LM from a plan file."""

import pytest

from fulcrum.megatron import recompute_num_layers


def plan(pp, vpp, stages, recompute, blocks=None, llm_blocks=None):
    p = {"schedule": {"layout": {"pp": pp, "vpp": vpp}, "stages": stages, "recompute": recompute}}
    if blocks is not None:
        p["transformer_blocks"] = blocks
    if llm_blocks is not None:
        p["llm_blocks"] = llm_blocks
    return p


def test_each_rank_takes_the_most_its_chunks_recompute_counting_selective_as_full():
    # 8 layers, pp 2 × vpp 2: stages [0,2) [2,4) [4,6) [6,8) on ranks 0, 1, 0, 1.
    # Modes: none none | full selective | full full | none selective.
    p = plan(2, 2, [[0, 2], [2, 4], [4, 6], [6, 8]],
             [["none", 2], ["full", 1], ["selective", 1], ["full", 2], ["none", 1], ["selective", 1]],
             llm_blocks=[True] * 8)
    assert recompute_num_layers(p, 0) == 2  # chunk 0 recomputes 0, chunk 1 recomputes 2
    assert recompute_num_layers(p, 1) == 2  # chunk 0: full + selective; chunk 1: selective only


def test_layers_that_are_not_blocks_do_not_count():
    p = plan(1, 1, [[0, 4]], [["full", 4]], llm_blocks=[False, True, True, False])
    assert recompute_num_layers(p, 0) == 2


def test_the_encoders_blocks_do_not_count_where_the_plan_names_the_llms():
    # Two encoder blocks then two LLM blocks in one stage, all recomputed: Megatron's 't' are the LLM's two.
    p = plan(1, 1, [[0, 4]], [["full", 4]], blocks=[True] * 4, llm_blocks=[False, False, True, True])
    assert recompute_num_layers(p, 0) == 2


def test_a_rank_outside_the_plan_is_refused():
    with pytest.raises(ValueError, match="pipeline rank 2 is not one of the plan's 2"):
        recompute_num_layers(plan(2, 1, [[0, 1], [1, 2]], [["none", 2]], llm_blocks=[True, True]), 2)


def test_a_schedule_that_does_not_say_which_layers_are_blocks_is_refused():
    # Counting the embedding and the head as blocks would recompute more than the plan does.
    with pytest.raises(ValueError, match="which layers are the LLM's blocks"):
        recompute_num_layers(plan(1, 1, [[0, 2]], [["full", 2]])["schedule"], 0)
    # An older plan file's transformer_blocks count the encoders' blocks too, which Megatron's count leaves out.
    with pytest.raises(ValueError, match="which layers are the LLM's blocks"):
        recompute_num_layers(plan(1, 1, [[0, 2]], [["full", 2]], blocks=[True, True]), 0)
    with pytest.raises(ValueError, match="names 3 layers but its schedule 2"):
        recompute_num_layers(plan(1, 1, [[0, 2]], [["full", 2]], llm_blocks=[True] * 3), 0)


def test_the_module_is_reachable_after_a_plain_import_of_the_package():
    # The docs call fulcrum.megatron.recompute_num_layers(...) after `import fulcrum`; a fresh interpreter shows
    # whether the package loads its submodules when asked (this test process may already hold them).
    import subprocess
    import sys

    code = ("import fulcrum\n"
            "assert 'fulcrum.megatron' not in __import__('sys').modules\n"
            "print(fulcrum.megatron.recompute_num_layers.__name__, fulcrum.runtime.__name__,"
            " fulcrum.profile.__name__)\n"
            "try:\n"
            "    fulcrum.no_such_thing\n"
            "except AttributeError:\n"
            "    print('refused')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["recompute_num_layers", "fulcrum.runtime", "fulcrum.profile", "refused"]
