"""vLLM 0.34's suffix drafting rule as a replay peer (``vllm034-suffix``), and fixed-width
pricing (every decoding row verified K wide), on handmade traces."""

import pytest

from specdraft.replay import (
    METHODS,
    Method,
    NoDraftMethod,
    Vllm034SuffixMethod,
    fixed_width_draft,
    replay_batched,
)


def _run(m, prompt, output=()):
    k = m.new_key()
    m.start(k, list(prompt))
    if output:
        m.extend(k, list(output), None)
    return k


def test_repeated_phrase_drafts_its_continuation():
    m = Vllm034SuffixMethod()
    k = _run(m, [1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3])
    assert m.draft(k, 4) == ([4, 5, 6, 7], [-1, 0, 1, 2])
    # up to the end of the history, never past it
    assert m.draft(k, 16)[0] == [4, 5, 6, 7, 8, 9, 1, 2, 3]
    # the longest match wins over a later, shorter one
    k2 = _run(m, [7, 1, 2, 40, 9, 2, 41, 1, 2])
    assert m.draft(k2, 2)[0] == [40, 9]
    # equal matches: the latest occurrence
    k3 = _run(m, [5, 10, 5, 11, 5])
    assert m.draft(k3, 1)[0] == [11]
    # no match at all: no draft (vLLM pads the row with its last token)
    k4 = _run(m, [1, 2, 3])
    assert m.draft(k4, 8) == ([], [])


def test_corpus_hit_after_a_finished_request():
    m = Vllm034SuffixMethod()
    k = _run(m, [100, 101, 7, 8, 9], [1, 2, 3, 4])
    other = _run(m, [60, 61, 8, 9], [1])
    assert m.draft(other, 8) == ([], [])  # the first request is not finished: not in the corpus
    m.finish(k)
    # the response with the prompt's last 3 tokens before it: 8 9 1 matches 3 tokens
    assert m.draft(other, 8)[0] == [2, 3, 4]
    # a match needs the 2 tokens of the shorter key: "9 5" is not in the corpus
    late = _run(m, [70, 9, 5])
    assert m.draft(late, 8) == ([], [])
    # the local match wins ties: "8 9 1" twice in the own history and once in the corpus
    own = _run(m, [8, 9, 1, 50, 8, 9, 1])
    assert m.draft(own, 2)[0] == [50, 8]


def test_corpus_votes_for_the_most_frequent_continuation():
    m = Vllm034SuffixMethod()
    for cont in ([5, 6], [5, 7], [5, 7]):
        m.finish(_run(m, [0, 1], [2, 3] + cont))  # documents "0 1 2 3 5 x"
    k = _run(m, [9, 2, 3])
    toks, parents = m.draft(k, 4)
    # 3 candidates vote 5, then 7 beats 6 two to one
    assert toks == [5, 7] and parents == [-1, 0]


def test_corpus_off_without_the_two_token_key():
    m = Vllm034SuffixMethod(max_depth=1)
    m.finish(_run(m, [0, 1], [2, 3, 4]))
    assert m.cap == 0 and m.draft(_run(m, [2, 3]), 4) == ([], [])


def test_registered_as_a_peer():
    m = METHODS["vllm034-suffix"]()
    assert isinstance(m, Vllm034SuffixMethod) and m.name == "vllm034-suffix"


def test_fixed_width_pads_chains_with_the_last_token():
    assert fixed_width_draft([4, 5], [-1, 0], 4, 9) == ([4, 5, 9, 9], [-1, 0, 1, 2])
    assert fixed_width_draft([], [], 3, 9) == ([9, 9, 9], [-1, 0, 1])
    assert fixed_width_draft([4, 5], [-1, -1], 4, 9) == ([4, 5], [-1, -1])  # a tree: unpadded


class _Const(Method):
    """Drafts ``n`` tokens that are never right (token -5)."""
    name = "const"

    def __init__(self, n):
        self.n = n

    def draft(self, key, budget):
        toks = [-5] * min(self.n, budget)
        return toks, list(range(-1, len(toks) - 1))


class _Recorder:
    """A cost that records the tokens of each pass and charges one per token."""

    def __init__(self):
        self.passes = []

    def base_cost(self, tokens, requests=1, context=0.0, longest=None):
        self.passes.append((tokens, requests))
        return float(tokens)


RECS = [{"workload": "w", "prompt_token_ids": [1, 2, 3], "output_token_ids": [10, 11, 12, 13]},
        {"workload": "w", "prompt_token_ids": [4, 5], "output_token_ids": [20, 21, 22]}]


@pytest.mark.parametrize("n", [0, 1, 3])
def test_fixed_width_charges_k_plus_one_per_decoding_row(n):
    K = 4
    cost = _Recorder()
    r = replay_batched(_Const(n), RECS, K, 2, cost, baseline=1.0, fixed_width=True)
    # pass 1: both prefill (1 token each); then 2 decoding rows, then 1 (the shorter finished)
    assert cost.passes == [(2, 2), (2 * (K + 1), 2), (2 * (K + 1), 2), (K + 1, 1)]
    assert r["drafted_tokens"] == n * 5 and r["draft_slots"] == K * 5
    assert r["drafts"] == 5 and r["accepted_tokens"] == 0
    # the same drafts priced by their length (the default)
    cost = _Recorder()
    r = replay_batched(_Const(n), RECS, K, 2, cost, baseline=1.0)
    assert [t for t, _ in cost.passes] == [2, 2 * (1 + n), 2 * (1 + n), 1 + n]
    assert r["draft_slots"] == r["drafted_tokens"] == n * 5


def test_fixed_width_fillers_are_accepted_where_the_target_repeats():
    recs = [{"workload": "w", "prompt_token_ids": [1], "output_token_ids": [7, 7, 7, 7, 8]}]
    r = replay_batched(NoDraftMethod(), recs, 3, 1, _Recorder(), baseline=1.0, fixed_width=True)
    # after the prefill's 7 the row verifies 7 7 7: all accepted, and the target adds its 8
    assert r["accepted_tokens"] == r["filler_accepted"] == 3 and r["drafted_tokens"] == 0
    assert r["steps"] == 2
    r = replay_batched(NoDraftMethod(), recs, 3, 1, _Recorder(), baseline=1.0)
    assert r["accepted_tokens"] == 0 and r["steps"] == 5


def test_measured_h200_pricing_of_the_small_shape():
    from specdraft.replay.pricing import h200
    cost = h200("qwen2.5-0.5b")
    assert cost.decode_error < 0.05  # the q = 1 cells, fitted
    # a pass without drafts runs the decode kernel: cheaper than any verification pass
    for B in (1, 4, 16, 64):
        one, two, wide = (cost.base_cost(B * q, B, B * 2048.0, 2048.0) for q in (1, 2, 17))
        assert one < two <= wide
    # the measured cells: B = 64, L = 2048 costs 2.10 ms at q = 1, 4.36 ms at q = 16
    assert cost.base_cost(64, 64, 64 * 2048.0, 2048.0) == pytest.approx(2.0965, rel=0.05)
    assert cost.base_cost(64 * 16, 64, 64 * 2048.0, 2048.0) == pytest.approx(4.3611, rel=0.05)


def test_sweep_passes_fixed_width_on():
    from specdraft.replay import replay
    recs = [dict(r, model="qwen2.5-coder-0.5b") for r in RECS]
    out = [replay(recs, ["vllm034-suffix"], 4, "small", (1,), fixed_width=fw) for fw in (False, True)]
    assert out[1]["settings"]["fixed_width"] and not out[0]["settings"]["fixed_width"]
    fast, wide = (o["results"]["w"]["vllm034-suffix"]["batch"]["1"]["est_speedup"] for o in out)
    assert wide < fast  # the same drafts, every row priced 5 wide
