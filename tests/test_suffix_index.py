"""The Python suffix index against brute-force n-gram counting on random streams."""

from collections import Counter

from hypothesis import given, settings, strategies as st

from specdraft.proposers.suffix_index import SuffixIndex


def brute(seqs, gram):
    occ, nxt = 0, Counter()
    k = len(gram)
    for s in seqs.values():
        for e in range(k - 1, len(s)):
            if s[e - k + 1:e + 1] == gram:
                occ += 1
                if e + 1 < len(s):
                    nxt[s[e + 1]] += 1
    return occ, nxt


ops = st.lists(st.tuples(st.sampled_from("nnaaaaaaaaaaacr"), st.integers(0, 3), st.integers(0, 99)),
               min_size=1, max_size=150)


@settings(max_examples=150, deadline=None)
@given(depth=st.integers(1, 6), ops=ops)
def test_index_matches_brute_force(depth, ops):
    idx = SuffixIndex(depth)
    seqs: dict[int, list[int]] = {}
    live: list[int] = []
    next_id = 0
    for op, tok, pick in ops:
        if op == "n" or not live:
            idx.add_sequence(next_id)
            seqs[next_id] = []
            live.append(next_id)
            next_id += 1
        elif op == "a":
            sid = live[pick % len(live)]
            idx.append(sid, tok)
            seqs[sid].append(tok)
        elif op == "c":
            sid = live.pop(pick % len(live))
            idx.close(sid)
        elif op == "r" and seqs:
            sid = sorted(seqs)[pick % len(seqs)]
            idx.remove(sid)
            del seqs[sid]
            if sid in live:
                live.remove(sid)
    idx.check()
    assert idx.num_tokens == sum(map(len, seqs.values()))
    for s in seqs.values():
        for e in range(len(s)):
            for k in range(1, min(depth, e + 1) + 1):
                gram = s[e - k + 1:e + 1]
                state = idx.walk(gram)
                assert state is not None
                occ, nxt = brute(seqs, gram)
                node, extra = state
                got = {t: c for t, c, _ in idx.continuations(state)}
                if idx.is_open[node] and extra == 0:
                    assert idx.cnt[node] == occ
                    if k < depth:
                        assert got == dict(nxt)
                else:
                    assert occ == 1 and got == dict(nxt)
    for gram in ([0, 1, 2], [3, 3], [1], [2, 0, 1, 3]):
        gram = gram[:depth]
        assert (idx.walk(gram) is not None) == (brute(seqs, gram)[0] > 0)
    for sid in list(seqs):
        idx.remove(sid)
    assert idx.num_nodes() == 1 and idx.num_tokens == 0 and idx.cnt[0] == 0


def test_longest_match_prefers_longest_with_continuation():
    idx = SuffixIndex(8)
    idx.add_sequence(0)
    idx.extend(0, [1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3])
    state, length = idx.longest_match([1, 2, 3], 8)
    assert length == 3
    assert [t for t, _, _ in idx.continuations(state)] == [9]
    # the tail [5, 1] never occurred before the end: only [1] matches (followed by 2 twice)
    state, length = idx.longest_match([5, 1], 8)
    assert length == 1 and idx.continuations(state)[0][:2] == (2, 2)


def test_errors_name_the_problem():
    import pytest
    with pytest.raises(ValueError, match="max_depth"):
        SuffixIndex(0)
    idx = SuffixIndex(4)
    idx.add_sequence(1)
    with pytest.raises(KeyError, match="already"):
        idx.add_sequence(1)
