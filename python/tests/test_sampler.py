"""BalancedBatchSampler's guarantees: once per epoch, equal micro-batch counts, determinism, resume."""

import collections
import warnings

import numpy as np
import pytest
from conftest import epoch_batches, random_lengths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fulcrum

ALGOS = ["random", "random-packed", "length-grouped", "isf", "fulcrum"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_samplers(tokens, tiles, world_size, **kwargs):
    return [fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=r, world_size=world_size, **kwargs)
            for r in range(world_size)]


def all_ranks(samplers):
    return [epoch_batches(s) for s in samplers]


configs = st.fixed_dictionaries({
    "n": st.integers(1, 300),
    "data_seed": st.integers(0, 2**16),
    "world_size": st.integers(1, 5),
    "batch_size": st.integers(1, 4),
    "micro_batches": st.integers(1, 3),
    "seed": st.integers(0, 2**32),
    "algo": st.sampled_from(ALGOS),
})


def isf_caps(algo, tokens, tiles):
    # isf needs caps that every sample fits under; the other batchers take none.
    if algo != "isf":
        return {}
    return {"vision_cap": int(max(tiles.max(), 9)), "token_cap": int(max(tokens.max(), 4096))}


@SETTINGS
@given(configs)
def test_every_sample_once_per_epoch_and_equal_micro_batch_counts(c):
    tokens, tiles = random_lengths(c["n"], c["data_seed"])
    samplers = make_samplers(tokens, tiles, c["world_size"], batch_size=c["batch_size"],
                             micro_batches=c["micro_batches"], seed=c["seed"], algo=c["algo"],
                             **isf_caps(c["algo"], tokens, tiles))
    ranks = all_ranks(samplers)
    plan = samplers[0].plan
    counts = collections.Counter(i for batches in ranks for _, _, ids in batches for i in ids)
    assert set(counts) == set(range(c["n"])), "a sample is missing"
    assert sum(counts.values()) - c["n"] == plan.repeated
    assert plan.repeated < c["world_size"] * c["micro_batches"] * max(1, c["batch_size"])
    for batches in ranks:
        assert len(batches) == plan.steps * c["micro_batches"]
        per_step = collections.Counter(step for step, _, _ in batches)
        assert set(per_step.values()) == {c["micro_batches"]}, "a rank has a different micro-batch count"
        assert all(ids for _, _, ids in batches), "an empty micro-batch"
        assert len(samplers[0]) == len(batches)


@SETTINGS
@given(configs)
def test_drop_last_drops_only_the_counted_tail(c):
    tokens, tiles = random_lengths(c["n"] + 60, c["data_seed"])  # at least one full step
    samplers = make_samplers(tokens, tiles, c["world_size"], batch_size=c["batch_size"],
                             micro_batches=c["micro_batches"], seed=c["seed"], drop_last=True)
    counts = collections.Counter(i for batches in all_ranks(samplers) for _, _, ids in batches for i in ids)
    assert max(counts.values()) == 1
    assert len(tokens) - len(counts) == samplers[0].plan.dropped


def test_yields_the_core_plan_of_each_rank(bundled_index):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = fulcrum.Dataset.load(str(bundled_index))
    core = fulcrum.plan(data, dp=8, micro_batches=2, samples_per_step=64, seed=3)
    ids, begins = np.asarray(core.sample_ids), np.asarray(core.begins)
    for rank in (0, 5):
        sampler = fulcrum.BalancedBatchSampler(data, rank=rank, world_size=8, batch_size=4, micro_batches=2, seed=3)
        got = epoch_batches(sampler)
        want = [ids[begins[(s * 8 + rank) * 2 + j]:begins[(s * 8 + rank) * 2 + j + 1]].tolist()
                for s in range(core.steps) for j in range(2)]
        assert [b for _, _, b in got] == want


def test_same_arguments_same_batches_and_seed_and_epoch_change_them():
    tokens, tiles = random_lengths(500, 1)
    a = epoch_batches(fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=1, world_size=4, seed=7))
    b = epoch_batches(fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=1, world_size=4, seed=7))
    assert a == b
    c = epoch_batches(fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=1, world_size=4, seed=8))
    assert a != c
    sampler = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=1, world_size=4, seed=7)
    sampler.set_epoch(1)
    d = epoch_batches(sampler)
    assert d != a
    sampler.set_epoch(1)
    assert epoch_batches(sampler) == d


def test_a_second_pass_without_set_epoch_repeats_the_epoch():
    tokens, tiles = random_lengths(200, 2)
    sampler = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=2)
    assert epoch_batches(sampler) == epoch_batches(sampler)


def consume(sampler, steps):
    """Takes `steps` optimizer steps' micro-batches from a fresh pass."""
    out = []
    it = iter(sampler)
    for _ in range(steps * sampler.plan.micro_batches):
        b = next(it)
        out.append((b.info.step, b.info.micro_batch, list(b)))
    return out


@SETTINGS
@given(configs, st.floats(0, 1))
def test_resume_at_the_same_world_size_continues_exactly(c, where):
    tokens, tiles = random_lengths(c["n"], c["data_seed"])
    kwargs = dict(tokens=tokens, tiles=tiles, world_size=c["world_size"], batch_size=c["batch_size"],
                  micro_batches=c["micro_batches"], seed=c["seed"], algo=c["algo"],
                  **isf_caps(c["algo"], tokens, tiles))
    for rank in range(c["world_size"]):
        full = epoch_batches(fulcrum.BalancedBatchSampler(rank=rank, **kwargs))
        first = fulcrum.BalancedBatchSampler(rank=rank, **kwargs)
        k = int(where * first.plan.steps)
        head = consume(first, k)
        state = first.state_dict()
        resumed = fulcrum.BalancedBatchSampler(rank=rank, **kwargs)
        resumed.load_state_dict(state)
        assert len(resumed) == (first.plan.steps - k) * c["micro_batches"]
        assert head + epoch_batches(resumed) == full


def run_segment(samplers, steps):
    """Every rank consumes `steps` steps; returns the ids they trained on and the state to save."""
    seen = [i for s in samplers for _, _, ids in consume(s, steps) for i in ids]
    states = [s.state_dict() for s in samplers]
    assert all(st == states[0] for st in states), "ranks disagree on the sampler state"
    return seen, states[0]


@SETTINGS
@given(configs, st.lists(st.tuples(st.integers(1, 6), st.floats(0, 1), st.integers(1, 4)), min_size=1, max_size=3))
def test_resume_at_another_world_size_loses_and_repeats_nothing(c, resumes):
    """Train part of an epoch, checkpoint, resume on a different number of ranks (possibly several times):
    every sample is trained on, and none twice except the counted repeats completing a last step."""
    tokens, tiles = random_lengths(c["n"], c["data_seed"])
    common = dict(tokens=tokens, tiles=tiles, seed=c["seed"], micro_batches=c["micro_batches"])
    samplers = make_samplers(tokens, tiles, c["world_size"], batch_size=c["batch_size"], seed=c["seed"],
                             micro_batches=c["micro_batches"])
    seen_before = []
    repeats_allowed = 0  # each plan's completing repeats, an upper bound on what its consumed part holds
    for world_size, where, batch_size in resumes:
        plan = samplers[0].plan
        steps_left = len(samplers[0]) // c["micro_batches"]
        seen, state = run_segment(samplers, int(where * steps_left))
        repeats_allowed += plan.repeated
        seen_before += seen
        samplers = [fulcrum.BalancedBatchSampler(rank=r, world_size=world_size, batch_size=batch_size, **common)
                    for r in range(world_size)]
        for s in samplers:
            s.load_state_dict(state)
    rest = [i for batches in all_ranks(samplers) for _, _, ids in batches for i in ids]
    repeats_allowed += samplers[0].plan.repeated
    counts = collections.Counter(seen_before + rest)
    assert set(counts) == set(range(c["n"])), "a sample was lost in the resume"
    assert sum(counts.values()) - c["n"] <= repeats_allowed
    # Nothing trained before the checkpoint comes back after it, but to complete the epoch's last step (the
    # same repeats an uninterrupted run makes).
    assert len(set(seen_before) & set(rest)) <= samplers[0].plan.repeated
    # Every new rank has the same number of micro-batches in every step.
    per_rank = [len(b) for b in all_ranks(samplers)]
    assert len(set(per_rank)) == 1


def test_resume_at_another_world_size_on_the_bundled_data(bundled_index):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = fulcrum.Dataset.load(str(bundled_index))
    old = [fulcrum.BalancedBatchSampler(data, rank=r, world_size=8, micro_batches=2, seed=1) for r in range(8)]
    seen, state = run_segment(old, 300)
    new = [fulcrum.BalancedBatchSampler(data, rank=r, world_size=6, micro_batches=2, seed=1) for r in range(6)]
    for s in new:
        s.load_state_dict(state)
    new_batches = all_ranks(new)
    rest = [i for batches in new_batches for _, _, ids in batches for i in ids]
    assert not set(seen) & set(rest)
    assert set(seen) | set(rest) == set(range(len(data)))
    # The old plan's repeats sit in its last steps, far past step 300: only the new plan completes a step.
    assert len(seen) + len(rest) == len(data) + new[0].plan.repeated
    assert new_batches[0][0][0] == 300, "steps keep counting through the epoch"
    assert new[0].steps_per_epoch == 300 + new[0].plan.steps


def test_state_from_other_data_or_seed_is_refused():
    tokens, tiles = random_lengths(100, 3)
    state = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles).state_dict()
    with pytest.raises(ValueError, match="different lengths"):
        fulcrum.BalancedBatchSampler(tokens=tokens + 1, tiles=tiles).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, seed=5).load_state_dict(state)


def test_state_dict_with_steps_done_for_loaders_that_fetch_ahead():
    tokens, tiles = random_lengths(300, 4)
    kwargs = dict(tokens=tokens, tiles=tiles, rank=0, world_size=2, micro_batches=2)
    ahead = fulcrum.BalancedBatchSampler(**kwargs)
    consume(ahead, 10)  # a worker fetched 10 steps, training finished 6
    resumed = fulcrum.BalancedBatchSampler(**kwargs)
    resumed.load_state_dict(ahead.state_dict(steps_done=6))
    assert epoch_batches(resumed) == epoch_batches(fulcrum.BalancedBatchSampler(**kwargs))[12:]


def test_rank_and_size_are_checked():
    tokens, tiles = random_lengths(10, 0)
    with pytest.raises(ValueError, match="rank"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=0)
    with pytest.raises(fulcrum.InputError, match=r"tokens\[1\]"):
        fulcrum.BalancedBatchSampler(tokens=[5, 0], tiles=[1, 1])
    with pytest.raises(fulcrum.InputError, match="same length"):
        fulcrum.BalancedBatchSampler(tokens=[5, 6], tiles=[1])
    with pytest.raises(fulcrum.InputError, match="integers"):
        fulcrum.BalancedBatchSampler(tokens=[5.5, 6.0], tiles=[1, 1])


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(window=0), ValueError, "window must be at least 1, got 0"),
    (dict(window=-1), ValueError, "window"),
    (dict(passes=0), ValueError, "passes"),
    (dict(vision_cap=-1), ValueError, "vision_cap"),
    (dict(token_cap=-5), ValueError, "token_cap"),
    (dict(batch_size=2.5), TypeError, "batch_size must be an integer"),
    (dict(micro_batches="2"), TypeError, "micro_batches"),
    (dict(global_batch_size=7.0), TypeError, "global_batch_size"),
    (dict(seed=1.7), TypeError, "seed"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(world_size=2.0, rank=0), TypeError, "world_size"),
    (dict(world_size=2, rank=True), TypeError, "rank"),
    (dict(drop_last="yes"), TypeError, "drop_last"),
    (dict(search=1), TypeError, "search"),
    (dict(strict=None), TypeError, "strict"),
    (dict(algo="fastest"), ValueError, "algo must be one of random"),
    (dict(oversize="skip"), ValueError, "oversize"),
    (dict(cost="no/such/cost.json"), ValueError, "no/such/cost.json"),
])
def test_bad_arguments_are_refused_when_the_sampler_is_made(kwargs, error, words):
    # Refused when the sampler is made: not truncated, not left to fail at the first len() or iteration (a window
    # of 0 would divide by zero inside the batcher).
    tokens, tiles = random_lengths(40, 0)
    with pytest.raises(error, match=words):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, **kwargs)


@pytest.mark.parametrize("kwargs, words", [
    (dict(window=0), "window must be at least 1, got 0"),
    (dict(micro_batches=0), "micro_batches must be at least 1, got 0"),
    (dict(dp=0), "dp must be at least 1"),
    (dict(passes=0), "passes must be at least 1"),
    (dict(token_cap=-1), "vision_cap, token_cap, text_full and vision_full must not be negative"),
    (dict(dp=4, samples_per_step=2), r"samples_per_step 2 is less than dp × micro_batches = 4"),
])
def test_the_core_planner_names_its_python_arguments(kwargs, words):
    tokens, tiles = random_lengths(40, 0)
    data = fulcrum.Dataset.from_arrays(np.asarray(tokens), np.asarray(tiles), None, "tiles")
    with pytest.raises(fulcrum.InputError, match=words):
        fulcrum.plan(data, **kwargs)


def test_a_sampler_made_before_the_process_group_under_a_launcher_is_refused(monkeypatch):
    tokens, tiles = random_lengths(40, 0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="WORLD_SIZE is 2 but torch.distributed is not initialized"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles)
    # Told its place, it needs no process group.
    assert fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=1, world_size=2).rank == 1
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match="world_size=2 needs rank="):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, world_size=2)
    assert fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles).world_size == 1


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_a_pass_broken_off_early_is_started_again_by_the_next_one(micro_batches):
    tokens, tiles = random_lengths(120, 6)
    sampler = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=1,
                                           micro_batches=micro_batches)
    whole = epoch_batches(fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=1,
                                                       micro_batches=micro_batches))
    full_length = len(sampler)
    next(iter(sampler))  # a peek at the first micro-batch, as a check of the loader would take
    consume(sampler, 2)  # two steps of another pass, left unfinished
    assert len(sampler) == full_length
    assert epoch_batches(sampler) == whole, "the next pass is the whole epoch, every sample in it"


@pytest.mark.parametrize("world_size_after", [1, 2])
def test_a_peek_after_a_resume_keeps_the_resume_point(world_size_after):
    tokens, tiles = random_lengths(150, 8)
    kwargs = dict(tokens=tokens, tiles=tiles, micro_batches=2)
    first = fulcrum.BalancedBatchSampler(rank=0, world_size=1, **kwargs)
    head = consume(first, 5)
    state = first.state_dict()
    resumed = [fulcrum.BalancedBatchSampler(rank=r, world_size=world_size_after, **kwargs)
               for r in range(world_size_after)]
    expected = []
    for s in resumed:
        s.load_state_dict(state)
        length = len(s)
        next(iter(s))  # a framework's look at the loader before training
        consume(s, 1)  # and a step of a pass it broke off
        assert len(s) == length
        expected.append(epoch_batches(s))
    seen = [i for _, _, ids in head for i in ids] + [i for rank in expected for _, _, ids in rank for i in ids]
    counts = collections.Counter(seen)
    assert set(counts) == set(range(150)), "every sample in the epoch, the peeks taking none"
    step_samples = 4 * 2 * world_size_after
    assert sum(counts.values()) - 150 < step_samples, "no sample again but a last step's fill"
    # Then a pass to the end of the epoch: the one after it is the next pass over the whole epoch.
    assert len(resumed[0]) == len(fulcrum.BalancedBatchSampler(rank=0, world_size=world_size_after, **kwargs))


def test_a_sample_over_a_cap_is_an_error_naming_it():
    with pytest.raises(fulcrum.InputError, match="sample 1"):
        list(fulcrum.BalancedBatchSampler(tokens=[100, 9000, 200], tiles=[1, 2, 1], token_cap=4096))
    sampler = fulcrum.BalancedBatchSampler(tokens=[100, 9000, 200], tiles=[1, 2, 1], token_cap=4096,
                                           oversize="own-group", batch_size=1, micro_batches=3)
    batches = [list(b) for b in sampler]
    assert sorted(i for b in batches for i in b) == [0, 1, 2]
    assert [1] in batches, "the oversize sample is alone in its micro-batch"


def test_set_epoch_of_the_resumed_epoch_keeps_the_progress():
    tokens, tiles = random_lengths(300, 5)
    kwargs = dict(tokens=tokens, tiles=tiles, rank=1, world_size=2)
    first = fulcrum.BalancedBatchSampler(**kwargs)
    first.set_epoch(3)
    consume(first, 4)
    resumed = fulcrum.BalancedBatchSampler(**kwargs)
    resumed.load_state_dict(first.state_dict())
    resumed.set_epoch(3)  # what a training loop does at the top of every epoch
    rest = epoch_batches(resumed)
    assert rest[0][0] == 4
    full = fulcrum.BalancedBatchSampler(**kwargs)
    full.set_epoch(3)
    assert epoch_batches(full)[4:] == rest


def test_a_resumed_finished_epoch_yields_nothing_until_the_next_epoch():
    tokens, tiles = random_lengths(50, 6)
    first = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles)
    epoch_batches(first)
    state = first.state_dict()
    resumed = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles)
    resumed.load_state_dict(state)
    assert len(resumed) == 0 and epoch_batches(resumed) == []
    resumed.set_epoch(1)
    assert len(epoch_batches(resumed)) == resumed.plan.steps > 0


def test_a_finished_drop_last_epoch_stays_finished_under_other_parameters():
    tokens, tiles = random_lengths(203, 7)
    kwargs = dict(tokens=tokens, tiles=tiles, world_size=2, micro_batches=2, algo="random", drop_last=True)
    first = [fulcrum.BalancedBatchSampler(rank=r, batch_size=4, **kwargs) for r in range(2)]
    all_ranks(first)
    assert first[0].plan.dropped > 0
    state = first[0].state_dict()
    resumed = [fulcrum.BalancedBatchSampler(rank=r, batch_size=1, **kwargs) for r in range(2)]
    for s in resumed:
        s.load_state_dict(state)
    assert all_ranks(resumed) == [[], []], "the dropped samples came back"


def test_resuming_with_the_first_parameters_after_an_unused_change_is_exact():
    tokens, tiles = random_lengths(300, 8)
    a_kwargs = dict(tokens=tokens, tiles=tiles, rank=0, world_size=2)
    full = epoch_batches(fulcrum.BalancedBatchSampler(**a_kwargs))
    a = fulcrum.BalancedBatchSampler(**a_kwargs)
    head = consume(a, 3)
    b = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=3, algo="isf",
                                     vision_cap=1, token_cap=100)  # could not even plan this data
    b.load_state_dict(a.state_dict())
    state = b.state_dict()  # B ran no step: nothing of it is kept
    assert [s["algo"] for s in state["segments"]] == ["fulcrum"]
    again = fulcrum.BalancedBatchSampler(**a_kwargs)
    again.load_state_dict(state)
    assert head + epoch_batches(again) == full


def test_a_state_that_does_not_replay_is_refused():
    tokens, tiles = random_lengths(300, 9)
    a = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=2)
    consume(a, 3)
    state = a.state_dict(steps_done=np.int64(3))
    assert type(state["segments"][0]["steps"]) is int
    tampered = dict(state, segments=[dict(state["segments"][0], digest="0" * 32)])
    b = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=2)
    b.load_state_dict(tampered)
    with pytest.raises(ValueError, match="planned differently"):
        len(b)
    beyond = dict(state, segments=[dict(state["segments"][0], steps=10**6)])
    c = fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, rank=0, world_size=2)
    c.load_state_dict(beyond)
    with pytest.raises(ValueError, match="step"):
        len(c)


def test_bad_seed_and_loss_tokens_are_refused_up_front():
    tokens, tiles = random_lengths(10, 0)
    with pytest.raises(ValueError, match="seed"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, seed=-1)
    with pytest.raises(ValueError, match="loss_tokens"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, loss_tokens=np.full(10, np.nan))
    with pytest.raises(ValueError, match="loss_tokens"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, loss_tokens=np.full(10, 2.5))


def test_counts_past_a_length_files_caps_are_refused():
    # A count as a length file caps it (2^31 - 1), booleans and unsigned values near 2^64 are no counts.
    tokens, tiles = random_lengths(10, 0)
    with pytest.raises(ValueError, match=r"loss_tokens must hold 10 whole counts from 0 to 2147483647"):
        fulcrum.BalancedBatchSampler(tokens=tokens, tiles=tiles, loss_tokens=np.full(10, 2**64 - 1, dtype=np.uint64))
    with pytest.raises(fulcrum.InputError, match=r"tiles\[0\] = 2147483648 is out of range|vision\[0\] = 2147483648"):
        fulcrum.Dataset.from_arrays([10, 10], [2**31, 5], None, "tiles")
    with pytest.raises(fulcrum.InputError, match=r"tokens\[1\] = 18446744073709551615 is out of range"):
        fulcrum.Dataset.from_arrays(np.array([10, 2**64 - 1], dtype=np.uint64), None, None, "tiles")
    with pytest.raises(fulcrum.InputError, match="tokens must hold integers, got dtype bool"):
        fulcrum.Dataset.from_arrays(np.array([True, True]), None, None, "tiles")
    assert list(fulcrum.Dataset.from_arrays([2**31 - 1], [2**31 - 1], None, "tiles").tokens) == [2**31 - 1]


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_an_iterator_the_sampler_has_started_again_since_stops(micro_batches):
    # The progress through the epoch is the sampler's: a second live iterator would share it, each getting some
    # of the steps. The older one refuses to go on, also inside a step; the newer one gives the whole epoch.
    tokens, tiles = random_lengths(60, 2)
    kwargs = dict(tokens=tokens, tiles=tiles, rank=0, world_size=1, micro_batches=micro_batches)
    sampler = fulcrum.BalancedBatchSampler(**kwargs)
    whole = epoch_batches(fulcrum.BalancedBatchSampler(**kwargs))
    older = iter(sampler)
    for _ in range(2 * micro_batches + 1):  # into the third step, part way through it with 2 micro-batches
        next(older)
    newer = iter(sampler)
    first = next(newer)
    with pytest.raises(RuntimeError, match="iterated again since this iterator started"):
        next(older)
    rest = [(b.info.step, b.info.micro_batch, list(b)) for b in newer]
    assert [(first.info.step, first.info.micro_batch, list(first)), *rest] == whole


def test_plan_tails_and_audits_name_what_is_wrong():
    data = fulcrum.Dataset.from_arrays([100] * 8, [1] * 8, None, "tiles")
    plan = fulcrum.plan(data, algo="random", dp=2, samples_per_step=4)
    assert plan.tail(plan.steps).steps == 0 and plan.tail(1).steps == plan.steps - 1
    for step in (-1, plan.steps + 1):
        with pytest.raises(fulcrum.InputError, match=f"step {step} is outside the plan's {plan.steps} steps"):
            plan.tail(step)
    # Audited against fewer samples than it places: the ids past them are counted, which is why it fails.
    audit = plan.audit(fulcrum.Dataset.from_arrays([100] * 4, [1] * 4, None, "tiles"))
    assert not audit["ok"] and audit["out_of_range"] == 4


def test_measure_refuses_a_plan_of_other_data():
    tokens, tiles = random_lengths(500, 1)
    data = fulcrum.Dataset.from_arrays(tokens, tiles)
    plan = fulcrum.plan(data, dp=4)
    assert fulcrum.measure(plan, data)["pad_ratio"] == 0.0
    with pytest.raises(fulcrum.InputError, match="beyond the dataset"):
        fulcrum.measure(plan, fulcrum.Dataset.from_arrays([5]))


def test_empty_length_lists_give_an_empty_epoch():
    # np.asarray([]) is a float array: empty lists are taken as empty integer arrays.
    sampler = fulcrum.BalancedBatchSampler(tokens=[], tiles=[], rank=0, world_size=1)
    assert len(sampler) == 0 and list(sampler) == []


def test_isf_on_patch_tokens_needs_a_vision_cap_or_the_search():
    # Patch tokens have no default cap as tiles have (9): the 9 would be taken for 9 patch tokens.
    rng = np.random.default_rng(3)
    vision = rng.choice([0, 256, 1024, 4096], size=400)
    tokens = rng.integers(100, 3000, size=400)
    data = fulcrum.Dataset.from_arrays(tokens, vision, None, "patch_tokens")
    with pytest.raises(fulcrum.InputError, match=r"needs a vision cap: give vision_cap \(patch tokens a micro-batch "
                                                 r"may hold\) or search=True"):
        fulcrum.plan(data, algo="isf")
    for kwargs in (dict(vision_cap=5000), dict(search=True)):
        plan = fulcrum.plan(data, algo="isf", **kwargs)
        assert plan.audit(data)["ok"], kwargs
    # The sampler refuses it when it is made, not at its first epoch.
    with pytest.raises(ValueError, match=r"needs a vision cap: give vision_cap"):
        fulcrum.BalancedBatchSampler(tokens=tokens, vision_tokens=vision, algo="isf", rank=0, world_size=1)
    for kwargs in (dict(vision_cap=5000), dict(search=True)):
        sampler = fulcrum.BalancedBatchSampler(tokens=tokens, vision_tokens=vision, algo="isf", rank=0, world_size=1,
                                               **kwargs)
        assert sorted(i for batch in sampler for i in batch) == list(range(400)), kwargs


def test_a_meta_indexs_entries_number_the_samples_in_the_files_order(tmp_path):
    # The training code's dataset concatenates the index's entries as the file lists them; the JSON library sorted
    # them by name, which gave every id another sample's lengths, and the loss normalisation another token count.
    (tmp_path / "zeta.jsonl").write_text('{"vit_num": 0, "token_num": 111}\n{"vit_num": 0, "token_num": 112}\n')
    (tmp_path / "alpha.jsonl").write_text('{"vit_num": 0, "token_num": 999}\n')
    (tmp_path / "meta.json").write_text('{"zeta": {"token_lengths": "zeta.jsonl"}, '
                                        '"alpha": {"token_lengths": "alpha.jsonl"}}')
    sampler = fulcrum.BalancedBatchSampler(str(tmp_path / "meta.json"), rank=0, world_size=1, batch_size=1)
    assert [s["name"] for s in sampler.dataset.sources] == ["zeta", "alpha"]
    tokens = {}
    for micro_batch in sampler:
        (sample,) = micro_batch
        tokens[sample] = micro_batch.info.step_tokens
    assert tokens == {0: 111, 1: 112, 2: 999}


def test_a_drop_last_resume_with_fewer_samples_left_than_a_new_step_ends_the_epoch():
    # Resumed on twice the ranks one step before the epoch's end, the samples left fill no step of the new ranks:
    # with drop_last they are the epoch's short last step, dropped, where the core's refusal of an epoch with no
    # step was raised.
    rng = np.random.default_rng(0)
    tiles = rng.integers(0, 7, 203)
    tokens = tiles * 256 + rng.integers(20, 1500, 203)
    common = dict(tokens=tokens, tiles=tiles, drop_last=True, batch_size=8)
    old = make_samplers(tokens, tiles, 2, drop_last=True, batch_size=8)
    seen, state = run_segment(old, old[0].plan.steps - 1)
    new = [fulcrum.BalancedBatchSampler(rank=r, world_size=4, **common) for r in range(4)]
    for s in new:
        s.load_state_dict(state)
    left = len(tokens) - len(set(seen))
    assert 0 < left < 4 * 8  # fewer than one step of the new ranks
    assert [len(s) for s in new] == [0] * 4
    assert all(list(s) == [] for s in new)
    assert new[0].plan.dropped == left


def test_steps_done_outside_what_the_pass_handed_out_is_refused():
    # Steps never handed out would be skipped on resume, and a count of this run's steps (not the epoch's) would
    # train steps again: both were accepted.
    tokens, tiles = random_lengths(300, 4)
    kwargs = dict(tokens=tokens, tiles=tiles, rank=0, world_size=1)
    a = fulcrum.BalancedBatchSampler(**kwargs)
    consume(a, 3)
    with pytest.raises(ValueError, match="steps_done 10 is outside the steps this pass of epoch 0 handed out, 0 to 3"):
        a.state_dict(steps_done=10)
    b = fulcrum.BalancedBatchSampler(**kwargs)
    b.load_state_dict(a.state_dict())
    consume(b, 2)  # resumed at step 3, trained steps 3 and 4
    with pytest.raises(ValueError, match="handed out, 3 to 5"):
        b.state_dict(steps_done=2)
    assert b.state_dict(steps_done=5) == b.state_dict()
    assert b.state_dict(steps_done=3)["segments"][-1]["steps"] == 3
