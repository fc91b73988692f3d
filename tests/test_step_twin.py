"""The engine step (``SpecDrafter.step``) and the draft-length controller: native against Python.

The native step (proposers/native/step.h) and controller (proposers/native/controller.h) have
plain-Python twins (``SpecDrafter._step_python``, proposers/controller.py) that are their
specification. Random engine runs drive both with the same flat arrays: requests arrive, emit
tokens, are accepted or not, are reordered, preempted, finished, aborted and restarted (their
history shrinks), with small global caches so eviction happens; every step both must return the
same drafts and the same chosen lengths, and the same counters at the end. The controller is
compared the same way through the step over its settings (cost models, floors, waste caps,
priors), with random acceptances, step timings and per-request drafts. The step is also
checked against the per-request API (start/extend/draft/finish/abort).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from request_sync import RequestSync, Row
from streams import markov_stream
from specdraft.proposers import make_drafter
from specdraft.proposers.controller import COST_MODELS

# The native extension is part of what specdraft ships: its absence is a failure, not a skip.
from specdraft.proposers import _suffix_native as native  # noqa: E402, F401

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# custom cost models: a curve of points, the seven GPU parameters
CUSTOM = {"custom-curve": [(1, 1.0), (3, 1.2), (40, 2.5), (100, 9.0)],
          "custom-params": {"fixed": 1.0, "kv": 1e-4, "kv_min_batch": 3.0, "attention": 1e-6,
                            "slope": 0.05, "knee": 20.0, "width": 0.0}}


# ----------------------------------------------------------------------- engine simulation
STREAM = dict(repeat=0.35, span=10, mul=5, add=1)


class Engine:
    """A toy engine's batch state, as an adapter would describe it to ``SpecDrafter.step``."""

    def __init__(self, rng: random.Random, vocab: int, max_len: int = 160):
        self.rng, self.vocab, self.max_len = rng, vocab, max_len
        self.next_id = 0
        self.live: dict[str, dict] = {}   # req_id -> {"tokens", "prompt", "n"}
        self.ended: list[str] = []
        self.dropped: list[str] = []
        self.shared = markov_stream(rng, 200, vocab, **STREAM)  # text every request may quote

    def admit(self) -> None:
        rid = f"r{self.next_id}"
        self.next_id += 1
        r = self.rng
        prompt = (self.shared[r.randrange(150):][:r.randint(1, 30)]
                  + markov_stream(r, r.randint(0, 20), self.vocab, **STREAM))
        full = prompt + markov_stream(r, self.max_len, self.vocab, **STREAM)
        for _ in range(r.randint(0, 3)):  # the answer quotes shared text
            a = r.randrange(len(prompt), len(full) - 1)
            q = self.shared[r.randrange(180):][:r.randint(3, 20)]
            full[a:a + len(q)] = q
        self.live[rid] = {"tokens": full[:self.max_len], "prompt": len(prompt), "n": len(prompt)}

    def step_input(self, layout: str, budget: int):
        r = self.rng
        while len(self.live) < 2 or (len(self.live) < 7 and r.random() < 0.3):
            self.admit()
        ids = [i for i in self.live if r.random() < 0.85]  # the rest are preempted this step
        r.shuffle(ids)                                       # rows are reordered between steps
        emitted, accepted = [], []
        for rid in ids:
            q = self.live[rid]
            if r.random() < 0.05 and q["n"] > q["prompt"] + 2:  # history discarded: restart
                q["n"] = r.randint(q["prompt"], q["n"] - 1)
                emitted.append(-1)
                accepted.append(-1)
                continue
            k = r.randint(1, budget + 1)
            q["n"] = min(self.max_len - 1, q["n"] + k)
            emitted.append(k if r.random() < 0.9 else -1)
            accepted.append(r.choice([-1, k - 1, r.randint(0, budget)]))
        n = np.array([self.live[i]["n"] for i in ids], dtype=np.int64)
        budgets = np.array([r.choice([budget, budget, r.randint(-1, budget)]) for _ in ids])
        if r.random() < 0.3:
            budgets = budget  # one cap for every row
        kw = dict(num_accepted=np.array(accepted), num_emitted=emitted,
                  finished=list(self.ended), aborted=list(self.dropped),
                  max_len=r.choice([None, self.max_len - 1, self.max_len - 3]))
        self.ended, self.dropped = [], []
        if layout == "buffer":
            rows = list(range(len(ids)))
            r.shuffle(rows)
            buf = np.zeros((max(len(ids), 1) + 1, self.max_len), dtype=np.int32)
            for j, rid in zip(rows, ids):
                q = self.live[rid]
                buf[j, :q["n"]] = q["tokens"][:q["n"]]
            kw["rows"] = np.array(rows)
            tokens = buf
        else:  # flat: each row gives the whole history, or only its tail when that is enough
            parts, off = [], [0]
            for rid, nn in zip(ids, n.tolist()):
                q = self.live[rid]
                seen = q.get("seen")  # what the drafter holds (None: nothing, or restarting)
                tail = r.choice([nn, nn - seen]) if seen is not None and seen <= nn else nn
                parts.extend(q["tokens"][nn - tail:nn])
                off.append(len(parts))
            tokens = np.array(parts, dtype=np.int64)
            kw["token_offsets"] = np.array(off)
        prompts = np.array([self.live[i]["prompt"] for i in ids])
        return ids, tokens, n, prompts, budgets, kw

    def after_step(self, ids) -> None:
        for rid in ids:
            self.live[rid]["seen"] = self.live[rid]["n"]
        for rid in list(self.live):
            q = self.live[rid]
            u = self.rng.random()
            if q["n"] >= self.max_len - 1 or u < 0.06:
                del self.live[rid]
                self.ended.append(rid)
            elif u < 0.09:
                del self.live[rid]
                self.dropped.append(rid)
                q.pop("seen", None)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), model=st.sampled_from(sorted(COST_MODELS) + sorted(CUSTOM)),
       min_gain=st.sampled_from([0.0, 0.1, 0.4]), max_waste=st.sampled_from([0.3, 2.0, 64.0]),
       strategy=st.sampled_from(["suffix", "tree"]), trees=st.booleans(),
       match_prior=st.sampled_from([0.0, 0.5, 2.0]), calibration_prior=st.sampled_from([1.0, 8.0]),
       idle_decay=st.sampled_from([0.5, 0.8, 1.0]))
def test_native_controller_sizes_what_the_python_controller_sizes(
        seed, model, min_gain, max_waste, strategy, trees, match_prior, calibration_prior,
        idle_decay):
    """The controller twins through the step on both cores, over the controller's settings: every
    cost model (presets, curves, custom parameters), floors, waste caps, match priors, calibration
    priors and idle decays; random accepted counts (the per-request ``extend`` too), step timings
    (``report_step``) and ``draft``. Every step sizes the same drafts; the chosen lengths and
    the calibration tables agree."""
    rng = random.Random(seed)
    vocab, budget = rng.choice([4, 9, 30]), rng.randint(1, 12)
    opts = {"strategy": strategy, "global_cache_tokens": rng.choice([60, 400, 100_000]),
            "max_depth": 6, "cost_model": CUSTOM.get(model, model), "min_gain": min_gain,
            "max_waste": max_waste, "match_prior": match_prior,
            "calibration_prior": calibration_prior, "idle_decay": idle_decay,
            "request_decay": rng.choice([0.5, 0.9])}
    nat, py = _pair(opts, vocab, trees)
    engine = Engine(rng, vocab)
    for step in range(25):
        ids, tokens, n, prompts, budgets, kw = engine.step_input("flat", budget)
        _step_both(nat, py, step, ids, tokens, n, prompts, budgets, trees, kw)
        engine.after_step(ids)
        for _ in range(rng.randint(0, 2)):  # passes of several sizes and shapes
            t, s = rng.randint(0, 300), rng.choice([0.0, rng.random(), 10 * rng.random()])
            nat.report_step(t, s)
            py.report_step(t, s)
        if ids and rng.random() < 0.3:  # the per-request path: an accepted count, one draft
            rid = rng.choice([i for i in ids if i in engine.live] or [None])
            if rid is not None and nat.num_tokens(rid) >= 0:
                a = rng.randint(-1, budget)
                for d in (nat, py):
                    d.extend(rid, [], None if a < 0 else a)
                dn, dp = nat.draft(rid, budget), py.draft(rid, budget)
                assert (dn.token_ids, dn.parents, dn.probs, dn.match_len) == (
                    dp.token_ids, dp.parents, dp.probs, dp.match_len), step
    assert nat.metrics()["chosen_draft_lengths"] == py.metrics()["chosen_draft_lengths"]
    for p in (0.0, 0.049, 0.05, 0.5, 0.95, 0.999, 1.0):
        assert nat.controller.calibrated(p) == py.controller.calibrated(p)
    for field in ("drafts", "drafted_tokens", "accepted_tokens"):
        assert getattr(nat.counters, field) == getattr(py.counters, field), field


def _pair(opts: dict, vocab: int, trees: bool):
    """The same drafter on the native core and on the Python core."""
    nat = make_drafter({**opts, "native": True}, chain_only=not trees, vocab_size=vocab)
    py = make_drafter({**opts, "native": False}, chain_only=not trees, vocab_size=vocab)
    assert nat.native and not py.native
    return nat, py


def _step_both(nat, py, step: int, ids, tokens, n, prompts, budgets, trees: bool, kw: dict):
    """One step on the native and the Python drafter: the same drafts (and tree parents)."""
    got = nat.step(ids, tokens, n, prompts, budgets, trees=trees, **kw)
    want = py.step(ids, tokens, n, prompts, budgets, trees=trees, **kw)
    assert got.lengths.tolist() == want.lengths.tolist(), step
    assert got.tokens.tolist() == want.tokens.tolist(), step
    if trees:
        assert got.parents.tolist() == want.parents.tolist(), step
    return got, want


def _drafters(strategy: str, cache: int, vocab: int, adaptive: bool, cost_model: str = "cpu-fp32",
              max_scopes: int = 1024, trees: bool = False):
    opts = {"strategy": strategy, "global_cache_tokens": cache, "max_depth": 6,
            "adaptive": adaptive, "cost_model": cost_model, "min_gain": 0.05,
            "max_scopes": max_scopes}
    return _pair(opts, vocab, trees)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), strategy=st.sampled_from(["suffix", "tree"]),
       cache=st.sampled_from([0, 60, 400, 100_000]), layout=st.sampled_from(["buffer", "flat"]),
       adaptive=st.booleans(), budget=st.integers(1, 10),
       cost_model=st.sampled_from(["cpu-fp32", "small", "medium", "large"]),
       scoped=st.booleans(), trees=st.booleans())
def test_native_step_equals_python_step(seed, strategy, cache, layout, adaptive, budget, cost_model,
                                        scoped, trees):
    """... with requests of several tenant scopes (scoped: 2 scope slots for 3 salts, so scopes'
    pools and calibrations are evicted and made anew), and with whole tree drafts (trees)."""
    rng = random.Random(seed)
    vocab = rng.choice([4, 9, 30])
    nat, py = _drafters(strategy, cache, vocab, adaptive, cost_model, 2 if scoped else 1024, trees)
    engine = Engine(rng, vocab)
    placed: set = set()
    for step in range(25):
        ids, tokens, n, prompts, budgets, kw = engine.step_input(layout, budget)
        for rid in ids:
            if scoped and rid not in placed:
                placed.add(rid)
                scope = rng.choice([None, "s0", "s1", "s2"])
                nat.set_scope(rid, scope)
                py.set_scope(rid, scope)
        got, want = _step_both(nat, py, step, ids, tokens, n, prompts, budgets, trees, kw)
        if trees:
            for t in got.trees():
                assert all(-1 <= p < i for i, p in enumerate(t.parents))
        else:
            assert got.parents is None and want.parents is None
        assert (got.lengths <= np.maximum(budgets, 0)).all()
        if kw["max_len"] is not None:
            assert (got.lengths <= np.maximum(kw["max_len"] - n, 0)).all()
        assert got.rows() == want.rows()
        if rng.random() < 0.3:
            t, s = rng.randint(1, 80), rng.random()
            nat.report_step(t, s)
            py.report_step(t, s)
        engine.after_step(ids)
    for field in ("requests", "finished", "aborted", "drafts", "drafted_tokens", "accepted_tokens"):
        assert getattr(nat.counters, field) == getattr(py.counters, field), field
    assert nat.metrics()["chosen_draft_lengths"] == py.metrics()["chosen_draft_lengths"]
    assert sorted(nat.req_ids()) == sorted(py.req_ids())
    nat.core.check_requests()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), strategy=st.sampled_from(["suffix", "lookup", "tree"]),
       native_core=st.booleans(), trees=st.booleans(), adaptive=st.booleans())
def test_step_drafts_what_the_per_request_api_drafts(seed, strategy, native_core, trees, adaptive):
    """Same events through start/extend/finish/abort (RequestSync), then a step that brings no
    new tokens (and, without the controller, ``draft`` of each row: a one-row step), against
    one step that syncs the rows itself (trees: whole tree drafts from both, as a tree verifier
    takes them)."""
    rng = random.Random(seed)
    vocab, budget = 12, 6
    opts = {"strategy": strategy, "global_cache_tokens": 500, "max_depth": 6,
            "native": native_core and strategy != "lookup", "adaptive": adaptive}
    a = make_drafter(opts, chain_only=not trees, vocab_size=vocab)
    b = make_drafter(opts, chain_only=not trees, vocab_size=vocab)
    sync = RequestSync(a)
    engine = Engine(rng, vocab)
    for _ in range(20):
        ids, tokens, n, prompts, budgets, kw = engine.step_input("buffer", budget)
        budgets = budget
        kw["max_len"] = None
        rows = kw["rows"]
        for rid in kw["finished"]:
            sync.drop(rid, aborted=False)
        for rid in kw["aborted"]:
            sync.drop(rid, aborted=True)
        e, acc = np.array(kw["num_emitted"]), kw["num_accepted"]
        use = (acc >= 0) & (e >= 0)
        for j, rid in enumerate(ids):
            sync.sync(Row(rid, tokens[rows[j]], int(prompts[j]), int(n[j]),
                          num_drafted=budget if use[j] else 0, num_emitted=int(e[j])))
        # RequestSync derives the accepted count from what was emitted; step is given it
        kw["num_accepted"] = np.where(use, np.clip(e - 1, 0, budget), -1)
        if not adaptive:  # without the controller a row's draft does not depend on the batch
            one = [a.draft(rid, budget) for rid in ids]
        held = [a.num_tokens(rid) for rid in ids]
        assert held == n.tolist()
        want = a.step(ids, np.zeros(0, dtype=np.int32), held, held, budgets,
                      token_offsets=np.zeros(len(ids) + 1, dtype=np.int64), trees=trees)
        got = b.step(ids, tokens, n, prompts, budgets, trees=trees, **kw)
        assert got.rows() == want.rows()
        if trees:
            assert got.parents.tolist() == want.parents.tolist()
        if not adaptive:
            assert [t.token_ids for t in one] == got.rows()
            if trees:
                assert [t.parents for t in one] == [t.parents for t in got.trees()]
        engine.after_step(ids)
    assert a.counters.accepted_tokens == b.counters.accepted_tokens
    assert a.counters.finished == b.counters.finished


# ------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("native_core", [True, False])
def test_step_errors_name_the_row(native_core):
    d = make_drafter({"native": native_core}, chain_only=True, vocab_size=10)
    buf = np.array([[1, 2, 3, 4, 0], [1, 2, 12, 4, 0]], dtype=np.int32)
    with pytest.raises(ValueError, match=r"row 1 .*token id 12 out of range; accepted 0 <= id < 10"):
        d.step(["a", "b"], buf, [4, 4], [2, 2], [3, 3])
    d = make_drafter({"native": native_core}, chain_only=True, vocab_size=10)
    # a tail that does not reach back to what a new request needs (its prompt)
    with pytest.raises(ValueError, match=r"row 0 .*needs the history from position 0 but the "
                                         r"row's tokens start at position 2"):
        d.step(["a"], np.array([3, 4]), [4], [2], [3], token_offsets=[0, 2])
    with pytest.raises(ValueError, match=r"budgets must have one entry per row \(1\), got 2"):
        d.step(["a"], buf, [4], [2], [3, 3])
    with pytest.raises(ValueError, match=r"token_ids must be an \(N, L\) array"):
        d.step(["a"], np.array([1, 2, 3]), [3], [2], [3])


def test_step_finishes_feed_the_global_cache_and_unknown_ids_are_ignored():
    d = make_drafter({"native": True}, chain_only=True, vocab_size=50)
    buf = np.zeros((1, 40), dtype=np.int32)
    answer = [7, 8, 9, 10, 11, 12, 13, 14]
    buf[0, :10] = [1, 2] + answer
    d.step(["a"], buf, [10], [2], [0])
    out = d.step([], buf[:0], [], [], [], finished=["a", "never-seen"])
    assert out.lengths.shape == (0,) and d.counters.finished == 1 and not d.has("a")
    buf[0, :4] = [3, 7, 8, 9]                    # a new request quoting the finished answer
    out = d.step(["b"], buf, [4], [1], [5])
    row = out.rows()[0]
    assert row and row == [10, 11, 12, 13, 14][:len(row)]
