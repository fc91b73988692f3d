"""Target-logit recycling: the top-k table, the replay that feeds it, and traces that carry top-k."""

from __future__ import annotations

import json
from collections import namedtuple

import pytest

from specdraft.proposers import SpecdraftConfigError
from specdraft.proposers.recycle import RecycleTable
from specdraft.record import topk_ids
from specdraft.replay import METHODS, load_trace, replay_batched


def test_the_table_keeps_each_inputs_successors():
    t = RecycleTable(top_k=3)
    # a pass scored inputs 5 and 7; the target's top-3 after 5 was (7, 8, 9), after 7 (2, 4)
    t.update([5, 7], [[7, 8, 9], [2, 4]])
    assert t.successors(5) == [7, 8, 9]
    assert t.successors(7) == [2, 4]
    assert t.successors(9) == [] and t.successors(10**6) == []
    t.update([7], [[9, 2, 1, 0]])  # the last pass wins; rows are cut to top_k
    assert t.successors(7) == [9, 2, 1]
    assert t.nbytes >= 8 * 3 * 4


def test_chain_and_tree_follow_the_first_choices():
    t = RecycleTable(top_k=4)
    t.update([1, 2, 3, 4], [[2, 5], [3, 6], [4], [1, 7]])
    assert t.chain(1, 3).token_ids == [2, 3, 4]
    assert t.chain(1, 3).parents == [-1, 0, 1]
    assert t.chain(9, 3).token_ids == []  # never scored: nothing to recycle
    tree = t.tree(1, branching=(2, 1), budget=16)
    assert tree.token_ids == [2, 5, 3] and tree.parents == [-1, -1, 0]  # 5 has no successors
    assert len(t.tree(1, branching=(2, 2, 2), budget=3)) == 3


def test_a_table_that_files_rows_under_the_wrong_token_is_caught():
    class Planted(RecycleTable):  # writes the top-k under the predicted token, not the input
        def update(self, inputs, topk):
            super().update([row[0] for row in topk], topk)

    for cls, want in ((RecycleTable, [2, 3, 4]), (Planted, None)):
        t = cls(top_k=2)
        t.update([1, 2, 3], [[2], [3], [4]])
        got = t.chain(1, 3).token_ids
        if want is None:
            assert got != [2, 3, 4]
        else:
            assert got == want


def test_top_k_is_validated():
    for bad in (0, 21, 2.5, True):
        with pytest.raises(SpecdraftConfigError, match="recycle_top_k"):
            RecycleTable(bad)


def test_record_keeps_the_ranked_ids():
    Logprob = namedtuple("Logprob", "logprob rank decoded_token")
    # vLLM's dict for one position: the top 3 and the sampled token (rank 5 here)
    pos = {11: Logprob(-3.0, 3, "c"), 10: Logprob(-0.1, 1, "a"), 12: Logprob(-2.0, 2, "b"),
           99: Logprob(-6.0, 5, "z")}
    assert topk_ids(pos, 3) == [10, 12, 11]
    assert topk_ids(pos, 2) == [10, 12]


def _trace(tmp_path, with_topk=True):
    """Request A teaches the table 10 -> 11 -> 12 -> 13; request B, with a prompt that holds
    none of those tokens and no global cache, emits the same run: only recycling drafts it."""
    run = [10, 11, 12, 13, 14, 15]

    def rec(i, prompt):
        r = {"id": str(i), "workload": "chat", "prompt_token_ids": prompt,
             "output_token_ids": run}
        if with_topk:  # greedy: each position's first choice is the token emitted there
            r["output_topk"] = [[t, t + 100] for t in run]
        return r
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (rec(0, [1, 2, 3]), rec(1, [4, 5, 9]))))
    return load_trace(str(path))


def test_the_replay_feeds_the_table_and_recycled_drafts_are_accepted(tmp_path):
    recs = _trace(tmp_path)
    off = {"global_cache_tokens": 0, "adaptive": False}
    plain = replay_batched(METHODS["specdraft-suffix"](None, off), recs, 4, 1, None)
    recycled = replay_batched(METHODS["specdraft-recycle"](None, off), recs, 4, 1, None)
    assert plain["accepted_tokens"] == 0  # nothing to copy
    # A taught 10 -> 11 -> ... -> 15. B: prefill emits 10; the chain 11 12 (depth 2) is accepted
    # and the pass adds 13; then 14 15, of which 14 is accepted (15, the last token, is the
    # target's own): 3 accepted, B in 3 passes instead of 6
    assert recycled["accepted_tokens"] == 3
    assert recycled["target_passes"] == plain["target_passes"] - 3
    # a trace without top-k gives the table nothing: the same as no recycling
    bare = replay_batched(METHODS["specdraft-recycle"](None, off), _trace(tmp_path, False), 4, 1,
                          None)
    assert bare["accepted_tokens"] == 0


def test_traces_with_a_bad_top_k_are_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "0", "prompt_token_ids": [1], "output_token_ids": [2, 3],
                                "output_topk": [[2]]}) + "\n")
    with pytest.raises(ValueError, match="output_topk"):
        load_trace(str(path))
