"""The native suffix index / SuffixCore (proposers/native) against their Python twins.

Random token streams over small vocabularies (so grams repeat and branch), random interleavings of
start / extend / draft / finish / abort / load_corpus over several handles, small global budgets
so eviction happens. After every draft the two drafts must be identical: tokens, parents, match
length, and the probabilities bit for bit. The index alone is compared on what a caller sees:
node count, every walk's and longest match's state (found or not, its depth, its continuations
with their counts, two levels down) and, after each run, the whole trie enumerated through
continuations. Node ids are private to each index and never compared. A brute-force n-gram count
checks that the index counts what it should.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdraft.proposers.base import DraftTree
from specdraft.proposers.suffix_core import SuffixCore as PySuffixCore
from streams import markov_stream
from specdraft.proposers.suffix_index import SuffixIndex as PySuffixIndex

# The native index ships with the package: a missing build is a failure, not a skip.
from specdraft.proposers import _suffix_native as native  # noqa: E402

@pytest.fixture(autouse=True, scope="module")
def _native_debug_checks():
    """The native core cross-checks its fast match paths (window lookup, memoised binary search)
    against the plain walk on every draft while these tests run."""
    old = native._set_debug_checks(True)
    yield
    native._set_debug_checks(old)


SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------- helpers
def grams_upto(seqs: list[list[int]], d: int) -> Counter:
    c: Counter = Counter()
    for s in seqs:
        for i in range(len(s)):
            for k in range(1, d + 1):
                if i + k > len(s):
                    break
                c[tuple(s[i:i + k])] += 1
    return c


def same_answers(py: PySuffixIndex, py_st, nat, nat_st, levels: int = 2) -> None:
    """Two states, one from each index, answer alike: both None, or the same extra (tokens past a
    closed node), the same depth and the same continuations (token, count) in the same order,
    and so on for each continuation's state, ``levels`` deep."""
    assert (nat_st is None) == (py_st is None), (nat_st, py_st)
    if py_st is None:
        return
    assert nat_st[1] == py_st[1]
    assert nat.state_depth(nat_st) == py.state_depth(py_st)
    pc, nc = py.continuations(py_st), nat.continuations(nat_st)
    assert [c[:2] for c in nc] == [c[:2] for c in pc], (nc, pc)
    if levels > 0:
        for (_, _, a), (_, _, b) in zip(pc, nc):
            same_answers(py, a, nat, b, levels - 1)


def same_trie(py: PySuffixIndex, nat) -> None:
    """Every gram reachable from the root (through continuations, up to max_depth tokens) has the
    same count, extra, depth and continuation order in both indexes."""
    stack = [(py.walk([]), nat.walk([]), 0)]
    while stack:
        a, b, depth = stack.pop()
        same_answers(py, a, nat, b, levels=0)
        if depth < py.max_depth:
            for (_, _, an), (_, _, bn) in zip(py.continuations(a), nat.continuations(b)):
                stack.append((an, bn, depth + 1))


def compare_index(py: PySuffixIndex, nat, rng: random.Random, vocab: int, probes: int = 30) -> None:
    assert nat.num_nodes() == py.num_nodes()
    assert nat.num_tokens == py.num_tokens
    nat.check()
    py.check()
    seqs = [s for s in py.seqs.values() if s]
    for _ in range(probes):
        if seqs and rng.random() < 0.7:
            s = rng.choice(seqs)
            a = rng.randrange(len(s))
            g = s[a:a + rng.randint(0, py.max_depth + 2)]
            if rng.random() < 0.3 and g:
                g = g[:-1] + [rng.randrange(vocab)]
        else:
            g = [rng.randrange(vocab) for _ in range(rng.randint(0, py.max_depth + 1))]
        same_answers(py, py.walk(g), nat, nat.walk(g))
        hi = rng.randint(0, py.max_depth + 2)
        (ps, pl), (ns, nl) = py.longest_match(g, hi), nat.longest_match(g, hi)
        assert nl == pl, (g, hi)
        same_answers(py, ps, nat, ns)


def check_counts(idx, seqs: list[list[int]], d: int, vocab: int) -> None:
    """Every gram of length < d: continuations(walk(g)) are the brute-force n-gram counts."""
    counts = grams_upto(seqs, d)
    assert idx.num_tokens == sum(len(s) for s in seqs)
    grams = [()] + [g for g in counts if len(g) < d]
    for g in grams:
        stt = idx.walk(list(g))
        assert stt is not None, g
        got = [(t, c) for t, c, _ in idx.continuations(stt)]
        want = sorted(((t, counts[g + (t,)]) for t in range(vocab) if counts[g + (t,)]),
                      key=lambda x: (-x[1], x[0]))
        assert got == want, (g, got, want)
    # grams that never occurred are not found
    rng = random.Random(len(grams))
    for _ in range(50):
        g = tuple(rng.randrange(vocab) for _ in range(rng.randint(1, d)))
        assert (idx.walk(list(g)) is not None) == (counts[g] > 0), g


# -------------------------------------------------------------------------- index twin
@SETTINGS
@given(st.data())
def test_index_twin_random_ops(data):
    with heavy_threshold(data.draw(st.sampled_from([0, 1, 2, 24]), label="heavy")):
        _index_twin_random_ops(data)


def _index_twin_random_ops(data):
    d = data.draw(st.integers(1, 6), label="max_depth")
    vocab = data.draw(st.integers(2, 5), label="vocab")
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    py, nat = PySuffixIndex(d), native.SuffixIndex(d)
    live: set[int] = set()     # appendable
    present: set[int] = set()  # indexed
    next_id = 0
    for _ in range(data.draw(st.integers(1, 30), label="ops")):
        op = data.draw(st.sampled_from(["add", "extend", "extend", "extend", "close", "remove"]))
        if op == "add" or not present:
            py.add_sequence(next_id)
            nat.add_sequence(next_id)
            live.add(next_id)
            present.add(next_id)
            next_id += 1
        elif op == "extend" and live:
            s = rng.choice(sorted(live))
            toks = data.draw(st.lists(st.integers(0, vocab - 1), max_size=12))
            py.extend(s, toks)
            nat.extend(s, toks)
        elif op == "close" and live:
            s = rng.choice(sorted(live))
            py.close(s)
            nat.close(s)
            live.discard(s)
        elif op == "remove":
            s = rng.choice(sorted(present))
            py.remove(s)
            nat.remove(s)
            present.discard(s)
            live.discard(s)
        compare_index(py, nat, rng, vocab, probes=10)
    same_trie(py, nat)
    check_counts(nat, [nat.sequence(s) for s in sorted(present)], d, vocab)


@pytest.mark.parametrize("heavy", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_index_twin_long_streams(seed, heavy):
    """High-fanout nodes (zombie children, top-k buffers) at heavy=1, plain nodes mostly at 4."""
    with heavy_threshold(heavy):
        _index_twin_long_streams(seed)


def _index_twin_long_streams(seed):
    rng = random.Random(seed)
    d = [2, 3, 4, 6, 8, 24][seed]
    vocab = [2, 3, 4, 6, 9, 12][seed]
    py, nat = PySuffixIndex(d), native.SuffixIndex(d)
    present: list[int] = []
    for sid in range(12):
        py.add_sequence(sid)
        nat.add_sequence(sid)
        present.append(sid)
        toks = markov_stream(rng, rng.randint(20, 300), vocab)
        # interleave with another live sequence to exercise windows of other sequences
        for i in range(0, len(toks), 7):
            py.extend(sid, toks[i:i + 7])
            nat.extend(sid, toks[i:i + 7])
            if sid > 0 and sid - 1 in present and rng.random() < 0.5:
                extra = markov_stream(rng, 3, vocab)
                if (sid - 1) in py.windows:
                    py.extend(sid - 1, extra)
                    nat.extend(sid - 1, extra)
        if rng.random() < 0.5:
            py.close(sid - 1) if sid else None
            nat.close(sid - 1) if sid else None
        if len(present) > 4 and rng.random() < 0.6:
            victim = present.pop(rng.randrange(len(present)))
            py.remove(victim)
            nat.remove(victim)
        compare_index(py, nat, rng, vocab, probes=60)
        same_trie(py, nat)
    check_counts(nat, [py.seqs[s] for s in present], d, vocab)
    check_counts(py, [py.seqs[s] for s in present], d, vocab)


def test_index_twin_past_65536_nodes():
    """The child table keeps a tag of the key beside each child id, in the bits the ids leave
    free; once node ids pass what those bits hold (65,536 at first) the table is rebuilt with
    more id bits and fewer tag bits. Both indexes agree across several such rebuilds, and after
    removals (backward-shift deletion reads the ids and the home distances back out of
    the slots)."""
    rng = random.Random(7)
    py, nat = PySuffixIndex(24), native.SuffixIndex(24)
    sids = []
    for sid in range(20):
        toks = markov_stream(rng, 8000, 400, repeat=0.2)
        py.add_sequence(sid)
        nat.add_sequence(sid)
        py.extend(sid, toks)
        nat.extend(sid, toks)
        py.close(sid)
        nat.close(sid)
        sids.append(sid)
    assert nat.num_nodes() > 4 * 65536  # ids past 2**16, then 2**18: two rebuilds for id bits
    compare_index(py, nat, rng, 400, probes=200)
    for sid in sids[::2]:
        py.remove(sid)
        nat.remove(sid)
    compare_index(py, nat, rng, 400, probes=200)
    same_trie(py, nat)


def test_core_twin_long_prompt_past_65536_nodes():
    """A request's own index is sized for its prompt up front, so a long prompt's node ids pass
    what the tag layout's id bits hold before the table ever grows: the insert that passes them
    must rebuild. Drafts (the request's own index and the global one) match the Python twin."""
    rng = random.Random(11)
    prompt = markov_stream(rng, 40000, 400, repeat=0.2)
    drafts = []
    for cls in (PySuffixCore, native.SuffixCore):
        c = cls(max_depth=24, global_cache_tokens=100000, live_outputs=True)
        c.start(0, prompt)
        out = []
        r = random.Random(3)
        for _ in range(40):
            at = r.randrange(100, len(prompt) - 50)
            c.extend(0, prompt[at:at + r.randint(1, 12)])  # quote the prompt: long matches
            out.append(c.draft(0, 16))
        drafts.append(out)
    assert drafts[0] == drafts[1]
    assert sum(len(d[0]) for d in drafts[1]) > 40


def test_index_errors_match():
    for cls in (PySuffixIndex, native.SuffixIndex):
        idx = cls(3)
        idx.add_sequence(1)
        with pytest.raises(KeyError, match="already in the index"):
            idx.add_sequence(1)
        with pytest.raises(KeyError):
            idx.append(2, 5)
        idx.extend(1, [1, 2, 3])
        idx.close(1)
        with pytest.raises(KeyError):
            idx.append(1, 4)
        with pytest.raises(KeyError):
            idx.remove(7)
        with pytest.raises(ValueError):
            cls(0)


# --------------------------------------------------------------------------- core twin
CORE_PARAMS = st.fixed_dictionaries({
    "max_depth": st.integers(1, 8),
    "global_cache_tokens": st.integers(0, 80),
    "max_children": st.integers(1, 5),
    "min_path_prob": st.sampled_from([0.0, 0.02, 0.1, 0.3]),
    "kappa": st.sampled_from([0.0, 0.5, 1.0, 2.5]),
    "cache_prompts": st.booleans(),
    "local_weight": st.sampled_from([1, 2, 6]),
    "live_outputs": st.booleans(),
})


class heavy_threshold:
    """Lower the native high-fanout threshold so the cached-top-list and zombie paths run on
    small vocabularies (default: more than 4 children, ``heavy_threshold()`` in heavy_topk.h)."""

    def __init__(self, children: int):
        self.children = children

    def __enter__(self):
        self.old = native._set_heavy_threshold(self.children)

    def __exit__(self, *exc):
        native._set_heavy_threshold(self.old)


def same_state(py: PySuffixCore, nat) -> None:
    assert nat.num_requests() == py.num_requests()
    assert nat.global_tokens() == py.global_tokens()
    assert nat.global_nodes() == py.global_nodes()
    assert nat.cached_tokens == py.cached_tokens
    assert nat.corpus_tokens == py.corpus_tokens


def step_twin(py: PySuffixCore, nat, hs: list[int], news: list[list[int]], budgets: list[int], tree: bool,
              prompts: dict[int, list[int]] | None = None) -> None:
    """One engine step through the native core's ``step`` (flat token_ids, each row's tokens the
    tail of its request's history: its new tokens, behind its prompt for a request the step
    starts) against the Python core driven request by request: start, extend every row, then
    draft every row. Each row's draft (the best chain of a tree draft) and the step's counts must
    be the Python core's; so must each whole draft (parents, probabilities, match length) drafted
    again afterwards."""
    prompts = prompts or {}
    flat, offsets, num_tokens, num_prompt = [], [0], [], []
    for h, t in zip(hs, news):
        p = prompts.get(h, [])
        if h in prompts:
            py.start(h, p)
        if t:
            py.extend(h, t)
        flat += p + t
        offsets.append(len(flat))
        num_tokens.append(py.num_tokens(h))
        num_prompt.append(len(p))
    want = []
    for h, c in zip(hs, budgets):
        if c <= 0:
            want.append([])
            continue
        d = py.draft(h, c, tree)
        want.append(DraftTree(*d).best_path().token_ids if tree else d[0])
    toks, lens, counts = nat.step(hs, flat, num_tokens, num_prompt, budgets, token_offsets=offsets, tree=tree)
    bounds = [0]
    for k in lens.tolist():
        bounds.append(bounds[-1] + k)
    got = [toks[a:b].tolist() for a, b in zip(bounds, bounds[1:])]
    assert got == want
    drafts = sum(1 for w in want if w)
    assert tuple(counts) == (len(prompts), 0, 0, 0, drafts, bounds[-1])
    for h, c in zip(hs, budgets):
        if c > 0:
            assert nat.draft(h, c, tree) == py.draft(h, c, tree)


@SETTINGS
@given(params=CORE_PARAMS, data=st.data())
def test_core_twin_random_interleavings(params, data):
    with heavy_threshold(data.draw(st.sampled_from([0, 1, 2, 24]), label="heavy")):
        _core_twin_random_interleavings(params, data)


def _core_twin_random_interleavings(params, data):
    vocab = data.draw(st.integers(2, 5), label="vocab")
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    py, nat = PySuffixCore(**params), native.SuffixCore(**params)
    live: list[int] = []
    next_h = 0
    toks = st.lists(st.integers(0, vocab - 1), max_size=10)
    for _ in range(data.draw(st.integers(1, 40), label="ops")):
        op = data.draw(st.sampled_from(
            ["start", "extend", "extend", "draft", "draft", "draft", "step", "finish", "abort", "corpus"]))
        if op == "start" or not live:
            prompt = data.draw(toks)
            py.start(next_h, prompt)
            nat.start(next_h, prompt)
            live.append(next_h)
            next_h += 1
        elif op == "extend":
            h = rng.choice(live)
            t = data.draw(toks)
            py.extend(h, t)
            nat.extend(h, t)
            assert nat.num_tokens(h) == py.num_tokens(h)
        elif op == "draft":
            h = rng.choice(live)
            budget = data.draw(st.integers(-1, 12))
            tree = data.draw(st.booleans())
            assert nat.draft(h, budget, tree) == py.draft(h, budget, tree)
        elif op == "step":  # a few rows through the core's engine step, perhaps one it starts
            hs = rng.sample(live, k=rng.randint(1, min(4, len(live))))
            prompts = {}
            if data.draw(st.booleans(), label="arrival"):
                prompts[next_h] = data.draw(toks)
                hs.insert(rng.randint(0, len(hs)), next_h)
                live.append(next_h)
                next_h += 1
            news = [data.draw(toks) for _ in hs]
            budgets = [rng.randint(-1, 10) for _ in hs]
            step_twin(py, nat, hs, news, budgets, data.draw(st.booleans()), prompts)
        elif op in ("finish", "abort"):
            h = live.pop(rng.randrange(len(live)))
            getattr(py, op)(h)
            getattr(nat, op)(h)
        elif op == "corpus":
            c = data.draw(toks)
            py.load_corpus(c)
            nat.load_corpus(c)
        same_state(py, nat)
    for h in live:
        for tree in (False, True):
            assert nat.draft(h, 16, tree) == py.draft(h, 16, tree)
    nat.check_global()
    nat.check_requests()


@pytest.mark.parametrize("heavy", [1, 4, 24])
@pytest.mark.parametrize("seed", range(8))
def test_core_twin_long_sessions(seed, heavy):
    """Longer streams, deeper tries, tree drafts, the engine step, steady eviction."""
    with heavy_threshold(heavy):
        _core_twin_long_sessions(seed)


def _core_twin_long_sessions(seed):
    rng = random.Random(1000 + seed)
    vocab = [3, 4, 6, 8, 12, 16, 5, 7][seed]
    params = dict(max_depth=[3, 4, 6, 8, 12, 24, 2, 5][seed],
                  global_cache_tokens=[50, 120, 300, 600, 1000, 2000, 80, 400][seed],
                  max_children=[1, 2, 3, 4, 4, 6, 2, 3][seed],
                  min_path_prob=[0.0, 0.02, 0.02, 0.05, 0.02, 0.01, 0.1, 0.0][seed],
                  kappa=[1.0, 0.5, 1.0, 2.0, 1.0, 1.0, 0.25, 3.0][seed],
                  cache_prompts=bool(seed % 2), local_weight=[1, 6, 2, 1, 6, 3, 1, 6][seed],
                  live_outputs=seed % 4 < 2)
    py, nat = PySuffixCore(**params), native.SuffixCore(**params)
    if seed % 3 == 0:
        c = markov_stream(rng, 200, vocab)
        py.load_corpus(c)
        nat.load_corpus(c)
    truth: dict[int, list[int]] = {}
    live: list[int] = []
    next_h = 0
    for step in range(400):
        if len(live) < 4 or rng.random() < 0.03:
            prompt = markov_stream(rng, rng.randint(0, 60), vocab)
            truth[next_h] = markov_stream(rng, rng.randint(10, 150), vocab)
            py.start(next_h, prompt)
            nat.start(next_h, prompt)
            live.append(next_h)
            next_h += 1
        hs = rng.sample(live, k=rng.randint(1, len(live)))
        budgets = [rng.randint(0, 16) for _ in hs]
        tree = rng.random() < 0.4
        tls = []
        for h in hs:
            k = rng.randint(1, 4)
            tls.append(truth[h][:k])
            truth[h] = truth[h][k:]
        if step % 3 == 0:  # the core's engine step: every request's tokens first, then the drafts
            step_twin(py, nat, hs, tls, budgets, tree)
        elif step % 3 == 1:  # the same order through the per-request API
            for h, t in zip(hs, tls):
                py.extend(h, t)
                nat.extend(h, t)
            for h, b in zip(hs, budgets):
                assert nat.draft(h, b, tree) == py.draft(h, b, tree), step
        else:  # request by request
            for h, t, b in zip(hs, tls, budgets):
                py.extend(h, t)
                nat.extend(h, t)
                assert nat.draft(h, b, tree) == py.draft(h, b, tree), step
        if step % 50 == 0:
            nat.check_global()
            nat.check_requests()
        for h in list(live):
            if not truth[h]:
                live.remove(h)
                if rng.random() < 0.85:
                    py.finish(h)
                    nat.finish(h)
                else:
                    py.abort(h)
                    nat.abort(h)
        same_state(py, nat)
    nat.check_global()


def test_core_errors_match():
    for cls in (PySuffixCore, native.SuffixCore):
        c = cls(max_depth=4)
        c.start(1, [1, 2, 3])
        with pytest.raises(KeyError, match="request handle 1 already started"):
            c.start(1, [1])
        for call in (lambda: c.extend(2, [1]), lambda: c.draft(2, 4), lambda: c.finish(2),
                     lambda: c.abort(2), lambda: c.num_tokens(2)):
            with pytest.raises(KeyError) as ei:
                call()
            assert ei.value.args == (2,)
        assert c.has(1) and not c.has(2)
    # the engine step checks its arguments before it applies anything
    nat = native.SuffixCore(max_depth=4)
    nat.start(1, [1, 2])
    with pytest.raises(ValueError, match=r"budgets must have one entry per row \(2\), got 1"):
        nat.step([1, 9], [3, 5], [3, 1], [2, 1], [4], token_offsets=[0, 1, 2])
    with pytest.raises(ValueError, match=r"token_offsets must have one entry per row \(3\), got 2"):
        nat.step([1, 9], [3, 5], [3, 1], [2, 1], [4, 4], token_offsets=[0, 1])
    with pytest.raises(ValueError, match=r"rows must lie in 0\.\.0"):
        nat.step([1, 9], [[3, 5, 0]], [3, 1], [2, 1], [4, 4], rows=[0, 1])
    assert nat.num_tokens(1) == 2 and not nat.has(9)


def test_token_inputs_numpy_and_tuples():
    np = pytest.importorskip("numpy")
    rng = random.Random(5)
    prompt = markov_stream(rng, 300, 7)
    py, nat = PySuffixCore(max_depth=6), native.SuffixCore(max_depth=6)
    py.start(0, prompt)
    nat.start(0, np.asarray(prompt, dtype=np.int64))
    for dtype in (np.int32, np.int64, np.uint16):
        t = markov_stream(rng, 5, 7)
        py.extend(0, t)
        nat.extend(0, np.asarray(t, dtype=dtype)[::1])
        assert nat.draft(0, 8, True) == py.draft(0, 8, True)
    t = markov_stream(rng, 6, 7)
    py.extend(0, t)
    nat.extend(0, tuple(np.int64(x) for x in t))
    assert nat.draft(0, 8) == py.draft(0, 8)
    arr = np.asarray(markov_stream(rng, 12, 7), dtype=np.int32)[::2]  # strided view
    py.extend(0, arr.tolist())
    nat.extend(0, arr)
    assert nat.draft(0, 8) == py.draft(0, 8)

    for big in ([1, 2**31], np.asarray([1, 2**31], dtype=np.int64)):
        with pytest.raises(OverflowError, match="token 2147483648 does not fit in int32"):
            nat.extend(0, big)


def test_integer_arrays_name_their_argument():
    """Per-row integers: lists, tuples or 1-D integer arrays of any width (read in place). A
    wrong one is named in the error."""
    np = pytest.importorskip("numpy")
    buf = np.zeros((2, 4), dtype=np.int32)
    for num_tokens in ([2, 2], (2, 2), np.array([2, 2], dtype=np.uint8), np.array([2, 2, 2], np.int64)[::2]):
        toks, lens, counts = native.SuffixCore(max_depth=4).step([0, 1], buf, num_tokens, [1, 1], 0)
        assert counts[0] == 2
    with pytest.raises(ValueError, match=r"num_prompt_tokens must have one entry per row \(2\), got 3"):
        native.SuffixCore(max_depth=4).step([0, 1], buf, [2, 2], np.array([1, 1, 1]), 0)


# ------------------------------------------------------------------------------ memory
def test_memory_returns_to_baseline():
    rng = random.Random(11)
    nat = native.SuffixCore(max_depth=8, global_cache_tokens=3000)
    empty = nat.memory_bytes()
    assert nat.global_nodes() == 1
    for h in range(60):
        nat.start(h, markov_stream(rng, 100, 50))
        nat.extend(h, markov_stream(rng, rng.randint(50, 400), 50))
        nat.draft(h, 8)
        (nat.finish if h % 5 else nat.abort)(h)
    assert nat.num_requests() == 0
    assert 0 < nat.cached_tokens <= 3000
    assert nat.memory_bytes() > empty
    nat.check_global()
    evicted = nat.evict_global(0)
    assert evicted > 0 and nat.cached_tokens == 0 and nat.global_tokens() == 0
    assert nat.global_nodes() == 1
    assert nat.memory_bytes() == empty  # an empty global index gives all its memory back
    # and it keeps working afterwards
    nat.start(0, [1, 2, 3, 1, 2])
    nat.extend(0, [3])
    nat.finish(0)
    assert nat.global_nodes() > 1


def test_memory_bounded_under_churn():
    """Steady FIFO eviction: nodes are reused, memory stays bounded by the live cache."""
    rng = random.Random(3)
    nat = native.SuffixCore(max_depth=12, global_cache_tokens=5000)
    sizes = []
    for h in range(120):
        nat.start(h, [])
        nat.extend(h, markov_stream(rng, rng.randint(100, 300), 200))
        nat.finish(h)
        if h >= 40:
            sizes.append(nat.memory_bytes())
    assert max(sizes) < 2.5 * min(sizes)
    # a fresh core holding about the same cached tokens is not much smaller
    per_tok = sizes[-1] / nat.global_tokens()
    assert per_tok < 400, per_tok
    nat.check_global()


def test_compaction_preserves_drafts():
    rng = random.Random(8)
    a = native.SuffixCore(max_depth=10, global_cache_tokens=4000)
    b = PySuffixCore(max_depth=10, global_cache_tokens=4000)
    for h in range(30):
        s = markov_stream(rng, 200, 20)
        for c in (a, b):
            c.start(h, s[:50])
            c.extend(h, s[50:])
            c.finish(h)
    a.compact_global()
    a.check_global()
    assert a.global_nodes() == b.global_nodes()
    q = markov_stream(rng, 300, 20)
    for c in (a, b):
        c.start(999, q[:100])
    for i in range(100, 300, 3):
        for c in (a, b):
            c.extend(999, q[i:i + 3])
        assert a.draft(999, 12, True) == b.draft(999, 12, True)


@pytest.mark.parametrize("max_children", [-2, -1, 0, 9, 12])
def test_core_twin_unusual_max_children(max_children):
    """Python slice semantics for max_children (negative, zero) and more than the native index
    buffers per high-fanout node (8), which takes the full-scan path."""
    rng = random.Random(max_children + 100)
    params = dict(max_depth=6, global_cache_tokens=400, max_children=max_children, min_path_prob=0.0)
    py, nat = PySuffixCore(**params), native.SuffixCore(**params)
    for h in range(30):
        s = markov_stream(rng, 80, 14)
        for c in (py, nat):
            c.start(h, s[:20])
        for i in range(20, 80, 3):
            for c in (py, nat):
                c.extend(h, s[i:i + 3])
            tree = i % 2 == 0
            assert nat.draft(h, 10, tree) == py.draft(h, 10, tree)
        for c in (py, nat):
            c.finish(h)
    nat.check_global()


def test_index_compact_keeps_answers():
    rng = random.Random(21)
    idx, ref = native.SuffixIndex(5), PySuffixIndex(5)
    for sid in range(8):
        toks = markov_stream(rng, 150, 6)
        for x in (idx, ref):
            x.add_sequence(sid)
            x.extend(sid, toks)
            x.close(sid)
    for x in (idx, ref):
        x.remove(2)
        x.remove(5)
    idx.compact()
    idx.check()
    assert idx.num_nodes() == ref.num_nodes()
    seqs = [ref.seqs[s] for s in sorted(ref.seqs)]
    check_counts(idx, seqs, 5, 6)
    for _ in range(200):
        g = markov_stream(rng, rng.randint(0, 7), 6)
        got, want = idx.longest_match(g, 6), ref.longest_match(g, 6)
        assert got[1] == want[1] and (got[0] is None) == (want[0] is None)
        if want[0] is not None:
            assert [c[:2] for c in idx.continuations(got[0])] == [c[:2] for c in ref.continuations(want[0])]


def test_core_live_outputs_reopened_match():
    """A request's global match runs past a closed node (one occurrence); a live request then
    writes the same gram, opening the node; the first request drafts again without new tokens.
    The remembered match must be walked again: the probabilities now count both occurrences."""
    drafts = []
    for cls in (PySuffixCore, native.SuffixCore):
        c = cls(max_depth=8, global_cache_tokens=1000, live_outputs=True)
        c.start(0, [9])
        c.extend(0, [1, 2, 3, 4, 5, 6, 7])
        c.finish(0)
        c.start(1, [8, 8, 2, 3, 4])  # context ends "2 3 4": inside node "2"'s single occurrence
        first = c.draft(1, 4)
        c.start(2, [0])
        c.extend(2, [2, 3, 4, 9, 9])  # live: "2 3 4" again, then a different continuation
        drafts.append((first, c.draft(1, 4)))
    (py_first, py_again), (nat_first, nat_again) = drafts
    assert nat_first == py_first and nat_again == py_again
    assert py_again[0] == [5, 6, 7] and py_again[2][0] < py_first[2][0]  # 5 is now one of two


def test_core_twin_live_outputs_between_drafts():
    """Live requests' tokens enter the global index while another request's last global match
    is remembered: a match that ran past a closed node which then opened must be walked again.
    Requests draft several times between other requests' extends (the remembered-match path)."""
    for seed in range(6):
        rng = random.Random(300 + seed)
        vocab = [3, 5, 8, 12, 20, 40][seed]
        params = dict(max_depth=[4, 6, 8, 12, 16, 24][seed], global_cache_tokens=3000,
                      max_children=[1, 3][seed % 2], live_outputs=True)
        py, nat = PySuffixCore(**params), native.SuffixCore(**params)
        source = markov_stream(rng, 400, vocab)
        for h in range(3):  # finished requests: long closed paths in the global index
            for c in (py, nat):
                c.start(h, source[:5])
                c.extend(h, source[40 * h: 40 * h + 120])
                c.finish(h)
        live = {}
        for h in range(3, 9):
            p = source[rng.randrange(300):][:rng.randint(3, 30)]
            live[h] = source[rng.randrange(300):][:150] if rng.random() < 0.7 else markov_stream(rng, 150, vocab)
            for c in (py, nat):
                c.start(h, p)
        for step in range(600):
            h = rng.choice(list(live))
            if rng.random() < 0.5 and live[h]:
                k = rng.randint(1, 3)
                t, live[h] = live[h][:k], live[h][k:]
                for c in (py, nat):
                    c.extend(h, t)
            tree = rng.random() < 0.3
            assert nat.draft(h, 8, tree) == py.draft(h, 8, tree), (seed, step)
        same_state(py, nat)
        nat.check_global()


# ------------------------------------------------------------------------------ scopes
SCOPE_NAMES = [None, "a", "b", "c", "d"]


def same_scopes(py: PySuffixCore, nat) -> None:
    same_state(py, nat)
    assert nat.num_scopes() == py.num_scopes()
    assert nat.scope_tokens(8) == py.scope_tokens(8)


@SETTINGS
@given(params=CORE_PARAMS, data=st.data())
def test_core_twin_scoped_interleavings(params, data):
    """Random interleavings over requests of several scopes, with per-scope budgets, a total cap
    that makes scopes evict each other, few enough scope slots that whole scopes are evicted,
    corpora for some scopes, and requests restarted in their scope."""
    total = params["global_cache_tokens"]
    params = dict(params, scope_cache_tokens=data.draw(st.integers(-1, total), label="scope_cap"),
                  max_scopes=data.draw(st.integers(1, 4), label="max_scopes"))
    vocab = data.draw(st.integers(2, 4), label="vocab")
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    py, nat = PySuffixCore(**params), native.SuffixCore(**params)
    assert nat.scope_cache_tokens == py.scope_cache_tokens
    live: list[int] = []
    next_h = 0
    most_live = 0
    toks = st.lists(st.integers(0, vocab - 1), max_size=10)
    for _ in range(data.draw(st.integers(1, 50), label="ops")):
        op = data.draw(st.sampled_from(
            ["start", "start", "extend", "extend", "draft", "draft", "draft", "finish", "abort",
             "restart", "corpus"]))
        if op == "start" or not live:
            scope = data.draw(st.sampled_from(SCOPE_NAMES), label="scope")
            prompt = data.draw(toks)
            for c in (py, nat):
                c.set_scope(next_h, scope)
                c.start(next_h, prompt)
            assert nat.scope_of(next_h) == py.scope_of(next_h) == scope
            live.append(next_h)
            next_h += 1
        elif op == "extend":
            h = rng.choice(live)
            t = data.draw(toks)
            py.extend(h, t)
            nat.extend(h, t)
        elif op == "draft":
            h = rng.choice(live)
            budget = data.draw(st.integers(0, 12))
            tree = data.draw(st.booleans())
            assert nat.draft(h, budget, tree) == py.draft(h, budget, tree)
        elif op == "restart":  # what a step does when the engine discarded tokens
            h = rng.choice(live)
            prompt = data.draw(toks)
            for c in (py, nat):
                c.abort(h, keep_scope=True)
                c.start(h, prompt)
        elif op in ("finish", "abort"):
            h = live.pop(rng.randrange(len(live)))
            getattr(py, op)(h)
            getattr(nat, op)(h)
            assert nat.scope_of(h) is None and py.scope_of(h) is None
        elif op == "corpus":
            c = data.draw(toks)
            serves = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(SCOPE_NAMES),
                                                             max_size=3)), label="serves")
            py.load_corpus(c, serves)
            nat.load_corpus(c, serves)
        same_scopes(py, nat)
        assert nat.cached_tokens <= max(total, 0)
        live_scopes = len({py.scope_of(h) for h in live} - {None})
        most_live = max(most_live, live_scopes)
        assert nat.num_scopes() <= max(params["max_scopes"], most_live)
    for h in live:
        for tree in (False, True):
            assert nat.draft(h, 16, tree) == py.draft(h, 16, tree)
    nat.check_global()
    nat.check_scopes()
    nat.check_requests()


def _isolation_run(make, seed: int) -> None:
    """Requests of several scopes through one core, and each scope's requests alone through a
    core of its own: every draft of the shared core must equal the lone core's (per-scope budgets
    only, so no scope's budget depends on another's)."""
    rng = random.Random(seed)
    vocab = 4
    mixed = make()
    solo = {k: make() for k in SCOPE_NAMES}
    scope_of: dict[int, object] = {}
    truth: dict[int, list[int]] = {}
    next_h = 0
    for step in range(250):
        if len(scope_of) < 3 or rng.random() < 0.05:
            k = rng.choice(SCOPE_NAMES)
            prompt = markov_stream(rng, rng.randint(0, 20), vocab)
            truth[next_h] = markov_stream(rng, rng.randint(5, 60), vocab)
            for c in (mixed, solo[k]):
                c.set_scope(next_h, k)
                c.start(next_h, prompt)
            scope_of[next_h] = k
            next_h += 1
        if step % 40 == 7:
            corpus = markov_stream(rng, 30, vocab)
            serves = rng.sample(SCOPE_NAMES, 2)
            mixed.load_corpus(corpus, serves)
            for k in serves:
                solo[k].load_corpus(corpus, [k])
        h = rng.choice(list(scope_of))
        t, truth[h] = truth[h][:3], truth[h][3:]
        k = scope_of[h]
        mixed.extend(h, t)
        solo[k].extend(h, t)
        tree = rng.random() < 0.3
        assert mixed.draft(h, 12, tree) == solo[k].draft(h, 12, tree), (step, k)
        if not truth[h]:
            del scope_of[h]
            end = "finish" if rng.random() < 0.8 else "abort"
            getattr(mixed, end)(h)
            getattr(solo[k], end)(h)


@pytest.mark.parametrize("impl", ["python", "native"])
@pytest.mark.parametrize("seed", range(4))
def test_scopes_isolated(impl, seed):
    cls = PySuffixCore if impl == "python" else native.SuffixCore
    for live_outputs in (False, True):
        _isolation_run(lambda: cls(max_depth=6, global_cache_tokens=10_000,
                                   scope_cache_tokens=200 + 100 * seed, max_children=3,
                                   local_weight=2, live_outputs=live_outputs), seed)


def test_planted_cross_scope_leak_is_caught(monkeypatch):
    """A core that files every scope's requests in the unscoped pool fails the isolation check."""
    monkeypatch.setattr(PySuffixCore, "_scope_for", lambda self, key: self._default)
    with pytest.raises(AssertionError):
        _isolation_run(lambda: PySuffixCore(max_depth=6, global_cache_tokens=10_000,
                                            scope_cache_tokens=300, max_children=3), 0)
    # the plainest probe: "a" answered [1..8]; "b" asking the same prefix drafts nothing
    leaky = PySuffixCore(max_depth=6, global_cache_tokens=1000)
    leaky.set_scope(0, "a")
    leaky.start(0, [])
    leaky.extend(0, [1, 2, 3, 4, 5, 6, 7, 8])
    leaky.finish(0)
    leaky.set_scope(1, "b")
    leaky.start(1, [1, 2, 3])
    assert leaky.draft(1, 4)[0] == [4, 5, 6, 7]  # the plant leaks
    monkeypatch.undo()
    for cls in (PySuffixCore, native.SuffixCore):
        core = cls(max_depth=6, global_cache_tokens=1000)
        core.set_scope(0, "a")
        core.start(0, [])
        core.extend(0, [1, 2, 3, 4, 5, 6, 7, 8])
        core.finish(0)
        for h, scope in ((1, "b"), (2, None)):
            core.set_scope(h, scope)
            core.start(h, [1, 2, 3])
            assert core.draft(h, 4)[0] == []
        core.set_scope(3, "a")
        core.start(3, [1, 2, 3])
        assert core.draft(3, 4)[0] == [4, 5, 6, 7]


def test_scope_errors_match():
    for cls in (PySuffixCore, native.SuffixCore):
        core = cls(max_depth=4, global_cache_tokens=100)
        with pytest.raises(TypeError):
            core.set_scope(0, 5)
        core.set_scope(0, "x")
        core.set_scope(0, None)
        assert core.scope_of(0) is None


def test_memory_bounded_under_many_scopes():
    """Thousands of distinct scopes, each a few requests: at most max_scopes scoped pools are
    held, the cached tokens stay under the total, and memory levels off."""
    rng = random.Random(26)
    nat = native.SuffixCore(max_depth=12, global_cache_tokens=40_000, scope_cache_tokens=2_000,
                            max_scopes=64, live_outputs=True)
    py = PySuffixCore(max_depth=12, global_cache_tokens=40_000, scope_cache_tokens=2_000,
                      max_scopes=64, live_outputs=True)
    sizes = []
    for h in range(3000):
        scope = f"tenant-{h}" if h % 3 else f"tenant-{h - 1}"  # some scopes get two requests
        prompt = markov_stream(rng, 20, 300)
        out = markov_stream(rng, rng.randint(20, 80), 300)
        for c in ((nat, py) if h < 400 else (nat,)):
            c.set_scope(h, scope)
            c.start(h, prompt)
            c.extend(h, out)
            c.finish(h)
        if h == 399:
            same_scopes(py, nat)
        assert nat.num_scopes() <= 64
        assert nat.cached_tokens <= 40_000
        if h >= 500 and h % 50 == 0:
            sizes.append(nat.memory_bytes())
    assert max(sizes) < 1.3 * min(sizes), (min(sizes), max(sizes))
    assert max(sizes) < 64 * 1024 * 1024
    nat.check_global()
    nat.check_scopes()
