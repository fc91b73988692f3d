"""The cores' export of finished requests (``enable_export`` / ``drain_finished``), native
against its plain-Python twin and both against what a request holds.

The shared cache publishes what the drafter's core exports, so the export must not depend on the
backend: random interleavings of start / extend / finish / abort / restart over several scopes,
with ``cache_prompts`` and ``live_outputs`` either way, small outbox budgets so the oldest are
dropped, and sequences added as learned elsewhere (``finish(export=False)``). At random points
both outboxes are drained: the same (scope, tokens) pairs in the same order, each exactly what the
request finished with (its output, or prompt + output with ``cache_prompts``), and the same count
of dropped tokens.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdraft.proposers import _suffix_native as native
from specdraft.proposers.lookup import PromptLookupCore
from specdraft.proposers.suffix_core import SuffixCore as PySuffixCore

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SCOPES = [None, "a", "b"]


def drained(core) -> list[tuple]:
    out = core.drain_finished()
    for _, toks in out:
        assert isinstance(toks, np.ndarray) and toks.dtype == np.int32
    return [(k, toks.tolist()) for k, toks in out]


def keep_within(expected: list, budget: int) -> int:
    """The outbox rule on the test's own list: oldest dropped past the budget, newest kept."""
    dropped = 0
    while sum(len(t) for _, t in expected) > budget and len(expected) > 1:
        dropped += len(expected.pop(0)[1])
    return dropped


@SETTINGS
@given(data=st.data(), cache_prompts=st.booleans(), live_outputs=st.booleans(),
       cache=st.sampled_from([0, 30, 10_000]), budget=st.sampled_from([1, 12, 40, 10_000]))
def test_export_twin_random_interleavings(data, cache_prompts, live_outputs, cache, budget):
    params = dict(max_depth=6, global_cache_tokens=cache, cache_prompts=cache_prompts,
                  live_outputs=live_outputs, max_scopes=2)
    py, nat = PySuffixCore(**params), native.SuffixCore(**params)
    for c in (py, nat):
        c.enable_export(budget)
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    toks = st.lists(st.integers(0, 5), max_size=8)
    live: dict[int, tuple] = {}  # handle -> (scope, prompt length, tokens)
    expected: list[tuple] = []
    dropped = 0
    next_h = 0
    for _ in range(data.draw(st.integers(1, 60), label="ops")):
        op = data.draw(st.sampled_from(["start", "start", "extend", "extend", "finish", "finish",
                                        "abort", "restart", "learned", "drain"]))
        if op == "start" or (not live and op != "drain"):
            scope, prompt = data.draw(st.sampled_from(SCOPES)), data.draw(toks)
            for c in (py, nat):
                c.set_scope(next_h, scope)
                c.start(next_h, prompt)
            live[next_h] = (scope, len(prompt), list(prompt))
            next_h += 1
        elif op == "extend":
            h = rng.choice(list(live))
            t = data.draw(toks)
            for c in (py, nat):
                c.extend(h, t)
            live[h][2].extend(t)
        elif op == "finish":
            h = rng.choice(list(live))
            scope, n_prompt, all_toks = live.pop(h)
            for c in (py, nat):
                c.finish(h)
            out = all_toks if cache_prompts else all_toks[n_prompt:]
            if out:
                expected.append((scope, out))
                dropped += keep_within(expected, budget)
        elif op == "abort":  # aborted requests export nothing
            h = rng.choice(list(live))
            del live[h]
            for c in (py, nat):
                c.abort(h)
        elif op == "restart":  # a step's restart: abort keeping the scope, start again
            h = rng.choice(list(live))
            prompt = data.draw(toks)
            for c in (py, nat):
                c.abort(h, keep_scope=True)
                c.start(h, prompt)
            live[h] = (live[h][0], len(prompt), list(prompt))
        elif op == "learned":  # what add_to_global_cache does with a pulled sequence
            h = -1 - next_h
            next_h += 1
            scope, t = data.draw(st.sampled_from(SCOPES)), data.draw(toks)
            for c in (py, nat):
                c.set_scope(h, scope)
                c.start(h, [])
                c.extend(h, t)
                c.finish(h, export=False)
        else:
            got = drained(nat)
            assert drained(py) == got == expected
            expected = []
        assert nat.export_dropped_tokens() == py.export_dropped_tokens() == dropped
    assert drained(py) == drained(nat) == expected
    assert drained(nat) == drained(py) == []


def test_export_is_off_until_enabled_and_turning_it_off_empties_it():
    for core in (PySuffixCore(), native.SuffixCore(), PromptLookupCore()):
        core.start(0, [1, 2])
        core.extend(0, [3])
        core.finish(0)
        assert core.drain_finished() == []
        core.enable_export(100)
        core.start(1, [1, 2])
        core.extend(1, [3, 4])
        core.finish(1)
        core.enable_export(0)
        assert core.drain_finished() == [] and core.export_dropped_tokens() == 0


def test_the_lookup_core_exports_what_the_suffix_core_does():
    for cache_prompts in (False, True):
        cores = [make(cache_prompts=cache_prompts)
                 for make in (PySuffixCore, native.SuffixCore, PromptLookupCore)]
        requests = [([1, 2], [3, 4, 5]), ([6], [7, 8, 9, 1]), ([2], [])]
        for core in cores:
            core.enable_export(5)
            for h, (prompt, out) in enumerate(requests):
                core.start(h, prompt)
                core.extend(h, out)
                core.finish(h)
        got = [drained(c) for c in cores]
        assert got[0] == got[1] == got[2]
        assert [c.export_dropped_tokens() for c in cores] == [10 if cache_prompts else 3] * 3
