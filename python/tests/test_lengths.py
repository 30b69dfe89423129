"""Lengths from files and meta indexes, as the sampler reads them."""

import collections
import json
import warnings

import numpy as np
import pytest
from conftest import epoch_batches

import fulcrum


def write_index(tmp_path, entries):
    (tmp_path / "index.json").write_text(json.dumps(entries))
    return tmp_path / "index.json"


@pytest.fixture
def two_files(tmp_path):
    a = [{"vit_num": 1, "token_num": 300 + k, "image_flags": 1} for k in range(3)]
    b = [{"vit_num": 0, "token_num": 50 + k, "image_flags": 0} for k in range(5)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in a) + "\n")
    (tmp_path / "b.json").write_text(json.dumps(b))
    return tmp_path, [r["token_num"] for r in a], [r["token_num"] for r in b]


def test_repeat_time_up_and_down_samples_in_index_order(two_files):
    folder, a, b = two_files
    index = write_index(folder, {"a": {"token_lengths": "a.jsonl", "repeat_time": 2},
                                 "b": {"token_lengths": "b.json", "repeat_time": 0.5}})
    sampler = fulcrum.BalancedBatchSampler(index, rank=0, world_size=1, batch_size=2)
    # InternVL's loader: ×2 repeats the file, ×0.5 keeps the first ⌊5·0.5⌋ = 2 records; ids follow the index.
    assert np.asarray(sampler.dataset.tokens).tolist() == a + a + b[:2]
    counts = collections.Counter(i for _, _, ids in epoch_batches(sampler) for i in ids)
    assert sorted(counts) == list(range(8)) and sum(counts.values()) == 8 + sampler.plan.repeated
    sources = sampler.dataset.sources
    assert [(s["name"], s["samples"], s["repeat_time"]) for s in sources] == [("a", 6, 2.0), ("b", 2, 0.5)]


def test_a_missing_entry_is_an_error_for_the_sampler_and_skipped_with_a_warning_when_not_strict(two_files):
    folder, a, _ = two_files
    index = write_index(folder, {"gone": {"token_lengths": "nope.json"}, "a": {"token_lengths": "a.jsonl"}})
    # Skipped, the entry after it would take its ids: a dataset built from the whole index would get other samples.
    with pytest.raises(fulcrum.InputError, match="nope.json"):
        fulcrum.BalancedBatchSampler(index)
    with pytest.warns(UserWarning, match="'gone'.*not found"):
        sampler = fulcrum.BalancedBatchSampler(index, strict=False)
    assert np.asarray(sampler.dataset.tokens).tolist() == a
    with pytest.warns(UserWarning, match="'gone'.*not found") as caught:
        assert len(fulcrum.Dataset.load(str(index))) == len(a)  # the core loader stays lenient, as the CLI
    assert caught[0].filename == __file__  # the caller's line, not one above it
    # A pathlib path, as os.fspath takes it, for the file and the root.
    with pytest.warns(UserWarning, match="'gone'.*not found"):
        assert len(fulcrum.Dataset.load(index, root=folder)) == len(a)


def test_a_bad_record_names_the_file_and_the_record(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"vit_num": 1, "token_num": 10}\n{"vit_num": -1, "token_num": 10}\n')
    with pytest.raises(fulcrum.InputError, match=r"bad.jsonl.*line 2"):
        fulcrum.BalancedBatchSampler(bad)


def test_vision_tokens_arrays_make_a_patch_token_dataset():
    sampler = fulcrum.BalancedBatchSampler(tokens=[900, 400, 1200], vision_tokens=[640, 0, 1024])
    assert sampler.dataset.vision_unit == "patch_tokens"
    assert np.asarray(sampler.dataset.images).tolist() == [1, 0, 1]


def test_bundled_index_sizes(bundled_index):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = fulcrum.Dataset.load(str(bundled_index))
    # data/PROVENANCE.md: three of the index's nine files are bundled, 60,495 samples in all.
    assert len(data) == 60495
    assert [s["name"] for s in data.sources] == [s["name"] for s in sorted(data.sources, key=lambda s: s["first_id"])]
