"""Drafter lifecycle, global cache, budgets, controller behaviour and option errors."""

import random
import tracemalloc

import pytest

from specdraft.proposers import DraftTree, SpecdraftConfigError, make_drafter
from specdraft.proposers.controller import CostModel, DraftLengthController


def replay(drafter, req_id, prompt, truth, budget=8):
    """Greedy verification against a known continuation; returns tokens per target pass."""
    drafter.start(req_id, prompt)
    pos = passes = 0
    while pos < len(truth):
        tree = drafter.draft(req_id, budget)
        assert len(tree) <= budget
        chain = tree.best_path().token_ids if len(tree) else []
        acc = 0
        while acc < len(chain) and pos + acc < len(truth) and chain[acc] == truth[pos + acc]:
            acc += 1
        emitted = truth[pos:pos + acc + 1]
        pos += len(emitted)
        passes += 1
        drafter.extend(req_id, emitted, acc)
    drafter.finish(req_id)
    return pos / passes


@pytest.mark.parametrize("strategy", ["suffix", "tree", "lookup"])
def test_echo_prompt_drafts_long(strategy):
    rng = random.Random(0)
    code = [rng.randrange(1000) for _ in range(300)]
    d = make_drafter({"strategy": strategy, "cost_model": "cpu-bf16"}, chain_only=True)
    tpp = replay(d, "r", code + [1001], code[:200], budget=8)
    assert tpp > 5, tpp
    s = d.counters
    assert s.accepted_tokens <= s.drafted_tokens and s.requests == s.finished == 1


def test_global_cache_helps_the_next_request_and_stays_in_budget():
    rng = random.Random(1)
    answer = [rng.randrange(500) for _ in range(120)]
    d = make_drafter({"global_cache_tokens": 1000})
    replay(d, "first", [1, 2, 3], answer)
    # a new request whose prompt shares nothing, answering the same thing, drafts from the cache
    tpp = replay(d, "second", [7, 8, 9], answer)
    assert tpp > 4, tpp
    for i in range(30):
        replay(d, f"filler{i}", [i], [rng.randrange(500) for _ in range(100)])
        assert d.metrics()["global_cache_tokens"] <= 1000


def test_global_cache_off_and_abort_feeds_nothing():
    d = make_drafter({"global_cache_tokens": 0})
    replay(d, "a", [1], list(range(50)))
    assert d.metrics()["global_cache_tokens"] == 0
    d2 = make_drafter({})
    d2.start("x", [1, 2, 3])
    d2.extend("x", [4, 5, 6])
    d2.abort("x")
    d2.abort("x")  # twice is harmless
    assert d2.metrics()["global_cache_tokens"] == 0 and not d2.has("x")


def test_corpus_is_drafted_from(tmp_path):
    doc = list(range(100, 200))
    f = tmp_path / "c.jsonl"
    f.write_text('{"token_ids": %s}\n' % doc)
    d = make_drafter({"corpus_files": [str(f)], "adaptive": False})
    d.start("q", [5, 100, 101, 102])
    assert d.draft("q", 5).token_ids == [103, 104, 105, 106, 107]


def test_tree_drafts_are_valid_trees_within_budget():
    rng = random.Random(2)
    d = make_drafter({"strategy": "tree", "adaptive": False, "max_children": 3})
    seq = [rng.randrange(6) for _ in range(400)]
    d.start("t", seq)
    for budget in (1, 4, 16, 32):
        t = d.draft("t", budget)
        assert 0 < len(t) <= budget
        assert all(-1 <= p < i for i, p in enumerate(t.parents))
        assert all(0 < p <= 1 for p in t.probs)
        pp = t.path_probs()
        assert pp == sorted(pp, reverse=True)  # best-first
        assert t.best_path().expected_accepted() <= t.expected_accepted() + 1e-12
    assert not t.is_chain()


def test_best_path_maximises_expected_accepted():
    t = DraftTree([1, 2, 3, 4, 5], [-1, 0, 0, 2, -1], [0.9, 0.9, 0.5, 0.9, 0.95])
    # paths: 1-2 (0.9+0.81), 1-3-4 (0.9+0.45+0.405), 5 (0.95)
    assert t.best_path().token_ids == [1, 3, 4]


def test_controller_drafts_nothing_when_compute_bound():
    c = DraftLengthController(CostModel("gpu"))
    good = (list(range(-1, 15)), [0.7] * 16)
    small = c.choose(list(range(2)), [good] * 2)
    assert all(k > 4 for k in small)
    big = c.choose(list(range(512)), [good] * 512)
    assert sum(big) == 0  # 512 requests already fill a compute-bound pass


def test_controller_stops_a_failing_request_until_evidence_returns():
    c = DraftLengthController(CostModel("cpu-bf16"), max_waste=64.0)
    draft = (list(range(-1, 7)), [0.8] * 8)
    assert c.choose(["r"], [draft]) == [8]
    for _ in range(10):  # every draft rejected at the first token
        c.sent("r", draft[1])
        c.observe("r", 0)
    assert c.choose(["r"], [draft]) == [0]
    steps = 0
    while (k := c.choose(["r"], [draft])) == [0]:
        steps += 1
        assert steps < 200
    assert steps >= 1 and k[0] <= 2  # off for 2+ steps, then a short probe


def test_controller_caps_the_expected_waste_of_a_draft():
    # a weak first node followed by nodes that are near-certain once it holds: the path gains
    # stay around 0.5, so every node drafted is rejected half the time
    draft = (list(range(-1, 15)), [0.5] + [0.999] * 15)
    loose = DraftLengthController(CostModel("gpu"), max_waste=64.0)
    assert loose.choose(["r"], [draft]) == [16]
    capped = DraftLengthController(CostModel("gpu"), max_waste=2.0)
    (k,) = capped.choose(["r"], [draft])
    gains = capped.path_gains("r", *draft)
    assert 1 <= k < 16 and sum(1 - g for g in gains[:k]) <= 2.0 < sum(1 - g for g in gains[:k + 1])
    sure = (list(range(-1, 15)), [0.999] * 16)  # a confident draft is cut much later
    assert capped.choose(["s"], [sure])[0] >= k + 6
    tree = ([-1, -1] + list(range(0, 14)), [0.5, 0.4] + [0.999] * 14)  # trees are not capped
    assert capped.choose(["t"], [tree]) == loose.choose(["t"], [tree]) == [16]


def test_controller_is_deterministic():
    def run():
        c = DraftLengthController(CostModel("cpu-fp32"))
        rng = random.Random(5)
        out = []
        for step in range(200):
            keys = list(range(rng.randint(1, 8)))
            drafts = [(list(range(-1, 9)), [rng.random() for _ in range(10)]) for _ in keys]
            ks = c.choose(keys, drafts)
            for key, k, (_, p) in zip(keys, ks, drafts):
                c.sent(key, p[:k])
                c.observe(key, rng.randint(0, k))
            c.cost_model.observe(sum(ks) + len(keys), 0.01 * (1 + sum(ks) / 50))
            out.append(ks)
        return out
    assert run() == run()


def test_cost_model_learns_from_step_timings():
    cm = CostModel([(1, 1.0), (1024, 1.0)])  # claims: flat
    for _ in range(50):
        cm.observe(1, 0.01)
        cm.observe(64, 0.04)  # measured: 4x slower at 64 tokens
    assert 3.0 < cm.cost(64) / cm.cost(1) < 4.1


def test_draft_length_follows_the_cost_curve():
    """The controller's draft length is the cost curve's to decide: the same drafts get longer
    drafts under a flat curve than under a planted steep one, and the engine's pass timings
    (flat, as measured, reported after each sizing) correct the steep one back to long drafts."""
    chain = list(range(-1, 15))              # a 16-token chain, parents in node order
    drafts = [(chain, [0.9] * 16) for _ in range(4)]
    keys = [0, 1, 2, 3]
    flat = DraftLengthController(CostModel([(1, 1.0), (1024, 1.0)])).choose(keys, drafts)
    planted = DraftLengthController(CostModel([(1, 1.0), (1024, 200.0)]))  # +0.2 pass a token
    steep = planted.choose(keys, drafts)
    assert sum(steep) < sum(flat), (steep, flat)
    for _ in range(100):                     # passes of 4 and 64 tokens cost the same
        planted.choose(keys, drafts)
        planted.observe_pass(4, 0.05)
        planted.choose(keys, drafts)
        planted.observe_pass(64, 0.051)
    assert planted.choose(keys, drafts) == flat


@pytest.mark.parametrize("options, words", [
    ({"strategy": "magic"}, ["strategy", "'suffix'", "'tree'", "'lookup'"]),
    ({"global_cache_tokens": -1}, ["global_cache_tokens", "integer in [0, "]),
    ({"max_depth": 0}, ["max_depth", "[1, 64]"]),
    ({"colour": 1}, ["unknown", "'colour'", "accepted options", "strategy"]),
    ({"cost_model": "tpu"}, ["cost_model", "'small'", "'medium'", "'large'", "'gpu'"]),
    ({"cost_model": {"fixed": 1.0}}, ["cost_model", "an object with the numbers fixed, kv"]),
    ({"adaptive": "yes"}, ["adaptive", "true or false"]),
    ({"max_waste": 0}, ["max_waste", "a number > 0"]),
    ({"corpus_files": ["/nonexistent/file.jsonl"]}, ["corpus_files", "not a file"]),
])
def test_bad_options_name_the_option_and_accepted_values(options, words):
    with pytest.raises(SpecdraftConfigError) as e:
        make_drafter(options)
    for w in words:
        assert w in str(e.value)


def test_bad_calls_raise_clear_errors():
    d = make_drafter({}, vocab_size=100)
    with pytest.raises(KeyError, match="unknown request id 'nope'"):
        d.extend("nope", [1])
    with pytest.raises(ValueError, match="out of range"):
        d.start("a", [1, 100])
    with pytest.raises(ValueError, match="out of range"):
        d.start("a", [-1])
    d.start("a", [1, 2])
    with pytest.raises(KeyError, match="already started"):
        d.start("a", [1])
    with pytest.raises(ValueError, match="budget"):
        d.draft("a", -1)
    with pytest.raises(KeyError, match="unknown request id 'nope'"):
        d.draft("nope", 4)
    d.set_scope("scoped", "tenant")  # a scope, no history yet: nothing to draft from
    with pytest.raises(KeyError, match="unknown request id 'scoped'"):
        d.draft("scoped", 4)


@pytest.mark.parametrize("native", [True, False])
def test_memory_returns_to_baseline(native):
    """Memory is bounded by the global budget, not by traffic. The native core allocates outside
    Python's view, so it is measured by its own byte counters (every vector's capacity); the
    Python twin by tracemalloc."""
    d = make_drafter({"global_cache_tokens": 2000, "native": native})
    assert d.native is native
    rng = random.Random(3)

    def burst():  # 10 finished requests (1,000 tokens into the global cache), 10 aborted
        for i in range(20):
            d.start(i, [rng.randrange(50) for _ in range(200)])
            d.extend(i, [rng.randrange(50) for _ in range(100)])
            d.draft(i, 8)
            (d.finish if i % 2 else d.abort)(i)

    def used() -> int:
        if native:
            return d.core.memory_bytes() + d.core.requests_memory_bytes()
        return tracemalloc.get_traced_memory()[0]

    for _ in range(3):  # warm-up: the global cache fills to its budget (then evicts)
        burst()
    if not native:
        tracemalloc.start()
    base = used()
    try:
        for _ in range(5):
            burst()
        grown = used() - base
    finally:
        tracemalloc.stop()
    assert d.metrics()["live_requests"] == 0 and d.metrics()["global_cache_tokens"] == 2000
    if native:
        assert d.core.requests_memory_bytes() == 0  # aborted and finished requests freed
        assert grown < base // 4, (base, grown)     # a node leak would add ~50 KB per burst
    else:
        assert grown < 2_000_000, grown


def test_controller_learns_per_request_which_match_lengths_hold():
    # one request whose drafts after a short match always fail and after a long match always
    # hold (chat that quotes a long passage now and then): with calibration by match length it
    # expects little of a draft after a short match and much after a long one, and drafts
    # accordingly; one factor per request cannot tell them apart
    draft = (list(range(-1, 7)), [0.8] * 8)

    def trained(match_prior):
        c = DraftLengthController(CostModel("medium"), max_waste=4.0, match_prior=match_prior)
        for _ in range(12):
            for m, ok in ((1, False), (20, True)):
                (k,) = c.choose(["r"], [draft], match_lens=[m])
                c.sent("r", draft[1][:max(k, 1)], m)
                c.observe("r", max(k, 1) if ok else 0)
        gains = [c.path_gains("r", *draft, m)[0] for m in (1, 20)]
        return gains, [c.choose(["r"], [draft], match_lens=[m])[0] for m in (1, 20)]

    (g_short, g_long), (short, long) = trained(2.0)
    (f_short, f_long), (flat_short, flat_long) = trained(0.0)
    assert g_short < 0.3 < 0.9 < g_long and f_short == f_long
    assert short < flat_short == flat_long <= long == 8


def test_a_wrong_cost_curve_changes_the_draft_length():
    # the same draft under the engine's curve (flat to 16 tokens, as bf16 on CPU at batch 1)
    # and under a planted one that says every scored token costs as much as the pass
    draft = (list(range(-1, 15)), [0.9] * 16)
    flat = DraftLengthController(CostModel([(1, 1.0), (16, 1.0), (64, 2.0)]), max_waste=64.0)
    steep = DraftLengthController(CostModel([(1, 1.0), (64, 64.0)]), max_waste=64.0)
    (k_flat,), (k_steep,) = flat.choose(["r"], [draft]), steep.choose(["r"], [draft])
    assert k_flat >= 8 and k_steep <= 1, (k_flat, k_steep)


@pytest.mark.parametrize("native", [True, False])
def test_measured_step_timings_shorten_drafts_the_prior_thought_free(native):
    # a request echoing its prompt drafts long under a flat prior; step timings that say each
    # token scored costs two one-token passes make the drafter send short drafts instead (the correction
    # is relative: it needs passes of more than one size)
    prompt = list(range(40)) * 3
    def lengths(report):
        d = make_drafter({"cost_model": [[1, 1.0], [64, 1.0]], "native": native})
        d.start("r", prompt)
        d.extend("r", [0], None)
        out = []
        for step in range(30):
            tree = d.draft("r", 16)
            k = len(tree.best_path().token_ids)
            out.append(k)
            d.extend("r", prompt[(step * 17 + 1) % 40:][:k + 1] or [1], k)
            if report:  # this pass, and a pass without a draft (what the engine also runs)
                d.report_step(1 + k, 0.02 * (1 + k))
                d.report_step(1, 0.01)
        return out
    free, measured = lengths(False), lengths(True)
    assert min(free[5:]) >= 8, free
    assert sum(measured[-15:]) < sum(free[-15:]) / 2, (free, measured)


@pytest.mark.parametrize("strategy", ["suffix", "tree", "lookup"])
@pytest.mark.parametrize("chain_only", [False, True])
def test_draft_is_a_one_row_step_on_both_cores(strategy, chain_only):
    """``draft`` is a one-row ``step`` that brings no new tokens: the same tree (whole for the
    tree strategy unless chain_only; node probabilities and root match length included) on the
    native and the Python core, with the controller's state moving alike, and the same as that
    step's own drafts."""
    rng = random.Random(3)
    seq = [rng.randrange(6) for _ in range(300)]
    got = []
    for native in (True, False):
        d = make_drafter({"strategy": strategy, "native": native, "max_children": 3,
                          "cost_model": "cpu-bf16"}, chain_only=chain_only)
        d.start("t", seq[:200])
        out = []
        for i, budget in enumerate((1, 4, 16, 32, 8, 8)):
            t = d.draft("t", budget)
            assert len(t) <= budget and len(t.probs) == len(t) and t.match_len >= 0
            assert all(-1 <= p < j for j, p in enumerate(t.parents))
            out.append((t.token_ids, t.parents, t.probs, t.match_len))
            d.extend("t", seq[200 + 3 * i:203 + 3 * i], min(2, len(t)))
        n = d.num_tokens("t")
        step = d.step(["t"], [], [n], [n], [8], token_offsets=[0, 0], trees=True)
        out.append((step.tokens.tolist(), step.parents.tolist()))
        out.append(d.metrics()["chosen_draft_lengths"])
        got.append(out)
        if strategy == "tree" and not chain_only:
            assert any(tp != list(range(-1, len(tp) - 1)) for _, tp, _, _ in out[:-2])
        elif strategy != "lookup":
            assert all(tp == list(range(-1, len(tp) - 1)) for _, tp, _, _ in out[:-2])
    if strategy != "lookup":  # lookup has one core
        assert got[0] == got[1]
