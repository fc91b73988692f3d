"""specdraft's SGLang corpus without SGLang: request lifecycle, failures, the padded layout.

The adapter module imports no SGLang at module level. ``Req`` below carries the fields of
SGLang's ``Req`` the corpus reads; finish reasons are told apart by class name, as SGLang's
``FINISH_ABORT`` / ``FINISH_LENGTH`` are.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdraft.adapters.sglang_v0_5 import SpecdraftCorpus, pack_tree
from specdraft.proposers import make_drafter
from specdraft.proposers.base import DraftTree, SpecdraftConfigError

N = 6


class FINISH_LENGTH:
    pass


class FINISH_ABORT:
    pass


class Req:
    def __init__(self, rid, prompt, output=()):
        self.rid, self.origin_input_ids_unpadded, self.output_ids = rid, list(prompt), list(output)
        self.finished_reason = None

    def finished(self):
        return self.finished_reason is not None


def step(corpus, reqs, depth=8):
    corpus.bind_requests(reqs)
    corpus.synchronize()
    tails = [(r.origin_input_ids_unpadded + r.output_ids)[-depth:] for r in reqs]
    totals = [len(r.origin_input_ids_unpadded) + len(r.output_ids) for r in reqs]
    tokens, mask = corpus.batch_get([r.rid for r in reqs], tails, totals)
    assert tokens.shape == (len(reqs) * N,) and mask.shape == (len(reqs) * N * N,)
    return tokens.reshape(len(reqs), N), mask.reshape(len(reqs), N, N)


def corpus_and_drafter():
    drafter = make_drafter({"strategy": "tree", "adaptive": False, "global_cache_tokens": 10000})
    return SpecdraftCorpus(drafter, N), drafter


REPEAT = [5, 6, 7, 8, 9] * 6


def test_drafts_from_the_whole_prompt_not_just_the_tail():
    corpus, drafter = corpus_and_drafter()
    req = Req("a", [1, 2, 3, 40, 41, 42, 43] + [11] * 20 + [3], [40])
    tokens, mask = step(corpus, [req])
    # only the full prompt (bound Req) holds "40 41 42 43": the tail is twenty 11s
    assert tokens[0, 0] == 40 and list(tokens[0, 1:4]) == [41, 42, 43]
    assert drafter.num_tokens("a") == len(req.origin_input_ids_unpadded) + 1


def test_finish_feeds_the_global_cache_abort_does_not():
    corpus, drafter = corpus_and_drafter()
    a, b = Req("a", [1, 2, 3], REPEAT[:3]), Req("b", [1, 2, 3], [9])
    step(corpus, [a, b])
    a.output_ids += REPEAT[3:]  # its last pass, seen only at finish
    a.finished_reason, b.finished_reason = FINISH_LENGTH(), FINISH_ABORT()
    corpus.erase_match_state(["a", "b"])
    assert drafter.counters.finished == 1 and drafter.counters.aborted == 1
    assert not drafter.has("a") and not drafter.has("b")
    # a later request continues from what "a" taught the global cache
    tokens, _ = step(corpus, [Req("c", [0, 5, 6, 7], [8])])
    assert list(tokens[0, 1:3]) == [9, 5]


def test_retracted_request_resumes_without_restart_or_finish():
    corpus, drafter = corpus_and_drafter()
    a = Req("a", [1, 2, 3], [4])
    step(corpus, [a])
    corpus.erase_match_state(["a"])  # left the batch, not finished: retracted
    assert drafter.has("a") and drafter.counters.finished == drafter.counters.aborted == 0
    a.output_ids += [5, 6]  # re-prefilled and decoded on return
    step(corpus, [a])
    assert drafter.counters.requests == 1 and drafter.num_tokens("a") == 6


def test_a_shrunk_history_restarts_the_request():
    corpus, drafter = corpus_and_drafter()
    a = Req("a", [1, 2, 3], [4, 5, 6])
    step(corpus, [a])
    a.output_ids = [4]
    step(corpus, [a])
    assert drafter.counters.requests == 2 and drafter.counters.aborted == 1
    assert drafter.num_tokens("a") == 4


def test_a_drafter_failure_gives_a_step_without_drafts_and_recovers(caplog):
    corpus, drafter = corpus_and_drafter()
    a = Req("a", REPEAT, [5])
    original = drafter.step
    drafter.step = lambda *args, **kwargs: 1 / 0
    for _ in range(2):
        tokens, mask = step(corpus, [a])
        assert (mask[0] == np.eye(N, dtype=np.int64)).all()  # root + unreachable padding
    assert drafter.counters.errors == 2
    assert sum("drafter failed" in r.getMessage() for r in caplog.records) == 1  # logged once
    drafter.step = original
    tokens, mask = step(corpus, [a])
    assert mask[0, 1:, 0].sum() > 0  # drafting again, restarted from the engine's history


def test_pack_tree_layout_and_errors():
    tree = DraftTree([10, 11, 12], [-1, 0, -1], [0.9, 0.8, 0.5])
    tokens, mask = pack_tree(7, tree, 5)
    assert tokens.tolist() == [7, 10, 11, 12, 7]
    assert mask.tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0],
                             [1, 0, 0, 1, 0], [0, 0, 0, 0, 1]]
    with pytest.raises(ValueError, match="does not fit 3 verification nodes"):
        pack_tree(7, tree, 3)
    with pytest.raises(SpecdraftConfigError, match="accepted an integer >= 2"):
        SpecdraftCorpus(None, 1)


def test_requests_draft_only_within_their_cache_salt():
    corpus, drafter = corpus_and_drafter()
    answer = [20 + i for i in range(30)]

    def run(rid, salt):
        req = Req(rid, [1, 2, 3], answer[:3])
        req.cache_salt = salt
        tokens, _ = step(corpus, [req])
        req.finished_reason = FINISH_LENGTH()
        req.output_ids = list(answer)
        corpus.erase_match_state([rid])
        step(corpus, [Req("probe-" + rid, [99])])  # a later step settles the departure
        return list(tokens[0, 1:4])

    assert run("a1", "tenant-a") != answer[3:6]  # cold
    assert run("b1", "tenant-b") != answer[3:6]  # another tenant: nothing of a1's answer
    assert run("u1", None) != answer[3:6]        # no salt: the unsalted pool only
    assert run("a2", "tenant-a") == answer[3:6]  # its own earlier answer


def test_one_engine_step_per_batch_and_no_per_request_calls():
    corpus, drafter = corpus_and_drafter()
    calls = []
    for name in ("step", "start", "extend", "finish", "abort", "draft"):
        original = getattr(drafter, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        setattr(drafter, name, spy)
    a, b = Req("a", [1, 2, 3], REPEAT[:4]), Req("b", REPEAT, [5])
    for _ in range(3):
        step(corpus, [a, b])
        a.output_ids.append(REPEAT[len(a.output_ids) % 5])
        b.output_ids.append(6)
    assert calls == ["step"] * 3
    b.finished_reason = FINISH_ABORT()
    corpus.erase_match_state(["b"])
    assert calls[3:] == ["step"] and not drafter.has("b")


def test_without_a_bound_req_the_tail_is_the_history():
    corpus, drafter = corpus_and_drafter()
    history = [1, 2, 3, 4] + REPEAT
    for total in range(8, 20):
        tail = history[max(0, total - 4):total]
        tokens, mask = corpus.batch_get(["x"], [tail], [total])
        assert tokens[0] == tail[-1]
    assert drafter.counters.errors == 0 and drafter.counters.requests == 1
    assert drafter.num_tokens("x") == 4 + (19 - 8)
