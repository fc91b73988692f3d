"""Tenant scopes through the drafter: per-request and per-step paths (native and Python twin),
budgets and option errors, restarts and resets keeping a request's scope, and the vLLM adapter's
transport of cache_salt (process 0 -> workers), which no client value can override."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from specdraft.adapters import vllm_v0_32 as adapter
from specdraft.proposers import SpecdraftConfigError, make_drafter

_RNG = random.Random(26)
ANSWER = [_RNG.randrange(1000) for _ in range(80)]
PROMPT = [5, 6, 7, 8]


def _step(d, req_ids, histories, budgets=8, num_accepted=None):
    """One engine step over these rows (histories: each row's whole token history)."""
    L = max(len(h) for h in histories) + 16
    buf = np.zeros((len(histories), L), dtype=np.int32)
    for i, h in enumerate(histories):
        buf[i, :len(h)] = h
    return d.step(req_ids, buf, [len(h) for h in histories], [len(PROMPT)] * len(histories),
                  budgets, num_accepted=num_accepted).rows()


def _accepted_by_step(d, req_id, scope, lengths=None, timed=False):
    """Runs a request answering ANSWER greedily through the step path; accepted draft tokens
    (the length of each draft is appended to ``lengths``; ``timed``: each pass's time is
    reported, as the engine's step does: a pass of T tokens takes 10 ms x T^1.5, far from the prior)."""
    if scope is not None:
        d.set_scope(req_id, scope)
    hist = list(PROMPT) + ANSWER[:1]
    accepted, last = 0, -1
    while len(hist) - len(PROMPT) < len(ANSWER):
        draft = _step(d, [req_id], [hist], num_accepted=[last])[0]
        if lengths is not None:
            lengths.append(len(draft))
        if timed:
            d.report_step(1 + len(draft), 0.010 * (1 + len(draft)) ** 1.5)
        pos = len(hist) - len(PROMPT)
        acc = 0
        while acc < len(draft) and pos + acc < len(ANSWER) and draft[acc] == ANSWER[pos + acc]:
            acc += 1
        accepted += acc
        last = acc if draft else -1  # what the engine reports for the draft it verified (-1: none)
        hist += ANSWER[pos:pos + acc + 1]
    d.step([], np.zeros((0, 1), dtype=np.int32), [], [], 0, finished=[req_id])
    return accepted


@pytest.mark.parametrize("native", [True, False])
def test_step_path_drafts_only_from_the_request_scope(native):
    d = make_drafter({"native": native, "adaptive": False, "live_outputs": False})
    cold = _accepted_by_step(d, "a1", "tenant-a")
    other = _accepted_by_step(d, "b1", "tenant-b")
    unsalted = _accepted_by_step(d, "u1", None)
    repeat = _accepted_by_step(d, "a2", "tenant-a")
    assert other <= cold and unsalted <= cold, (cold, other, unsalted)
    assert repeat > cold + 40, (cold, repeat)
    m = d.metrics()
    assert m["cache_scopes"] == 2
    assert len(m["scope_cache_tokens_top"]) == 2


def _sizes_after_a_warm_tenant(d):
    """Draft lengths of tenant A cold, then of tenant B and of an unsalted request after A's
    repeat has taught the controller that A's drafts are accepted."""
    cold, other, unsalted = [], [], []
    _accepted_by_step(d, "a1", "tenant-a", cold, timed=True)
    for i in range(3):
        _accepted_by_step(d, f"a{i + 2}", "tenant-a", timed=True)
    _accepted_by_step(d, "b1", "tenant-b", other, timed=True)
    _accepted_by_step(d, "u1", None, unsalted, timed=True)
    return cold, other, unsalted


@pytest.mark.parametrize("native", [True, False])
def test_the_controller_sizes_each_scope_from_its_own_acceptance(native):
    """With the adaptive controller on and step times reported, another tenant's request (and an
    unsalted one) is sized exactly as a cold request of the first tenant: its calibration, and
    the timings of passes it had to itself, are its scope's."""
    d = make_drafter({"native": native, "live_outputs": False})
    cold, other, unsalted = _sizes_after_a_warm_tenant(d)
    assert other == cold and unsalted == cold
    c = d.controller
    def table(scope):
        return [c.calibrated((b + 0.5) / 20, scope) for b in range(20)]
    assert table("tenant-a") != table("never-seen")  # A's acceptance is A's alone
    if not native:  # the planted leak: one calibration for all scopes sizes B from A's evidence
        leaky = make_drafter({"native": False, "live_outputs": False})
        leaky.controller.scope_of = None
        cold, other, _ = _sizes_after_a_warm_tenant(leaky)
        assert other != cold, "the test cannot see a shared calibration"


def test_a_batch_of_one_scope_is_priced_by_that_scope_s_pass_times(monkeypatch):
    """The planted leak for step timings: pricing every batch by all passes' times (the
    calibration still per scope) sizes B from A's passes, which the test above must see."""
    from specdraft.proposers import controller

    shared = controller.CostModel.cost
    monkeypatch.setattr(controller.CostModel, "cost",
                        lambda self, t, r=1, c=0.0, longest=None, timing=None:
                        shared(self, t, r, c, longest, None))
    cold, other, _ = _sizes_after_a_warm_tenant(make_drafter({"native": False,
                                                              "live_outputs": False}))
    assert other != cold, "the test cannot see shared step timings"


def test_the_controller_keeps_at_most_max_scopes_calibrations():
    d = make_drafter({"native": False, "live_outputs": False, "max_scopes": 4})
    for i in range(10):
        _accepted_by_step(d, f"r{i}", f"salt-{i}")
    assert len(d.controller._scoped) == 4


@pytest.mark.parametrize("native", [True, False])
def test_per_request_path_and_restart_keep_the_scope(native):
    d = make_drafter({"native": native, "adaptive": False})
    d.start("a1", PROMPT, scope="tenant-a")
    d.extend("a1", ANSWER)
    d.finish("a1")
    d.start("b1", PROMPT + ANSWER[:5], scope="tenant-b")
    assert len(d.draft("b1", 8)) == 0
    d.start("a2", PROMPT + ANSWER[:5], scope="tenant-a")
    assert d.draft("a2", 8).token_ids == ANSWER[5:13]
    # the engine discards tokens: the step restarts the row, in its scope
    hist = PROMPT + ANSWER[:3]
    assert _step(d, ["a2"], [hist])[0][:4] == ANSWER[3:7]
    # after a failure the drafter forgets everything but each live request's scope
    d.reset()
    assert _step(d, ["a2"], [hist])[0][:4] == ANSWER[3:7]
    assert _step(d, ["b1"], [hist])[0] == []


def test_scope_budgets_and_options():
    d = make_drafter({"global_cache_tokens": 300, "scope_cache_tokens": 100, "max_scopes": 3,
                      "adaptive": False})
    rng = random.Random(1)
    for i in range(20):
        d.start(i, [1], scope=f"s{i % 5}")
        d.extend(i, [rng.randrange(1000) for _ in range(rng.randint(20, 90))])
        d.finish(i)
        m = d.metrics()
        assert m["cache_scopes"] <= 3
        assert m["global_cache_tokens"] <= 300
        assert all(t <= 100 for t in m["scope_cache_tokens_top"])
    for bad, words in (({"scope_cache_tokens": 2_000_000}, "scope_cache_tokens"),
                       ({"scope_cache_tokens": -1}, "scope_cache_tokens"),
                       ({"max_scopes": 0}, "max_scopes"),
                       ({"max_scopes": "many"}, "max_scopes")):
        with pytest.raises(SpecdraftConfigError, match=words):
            make_drafter(bad)
    with pytest.raises(TypeError):
        d.set_scope("x", 3)


def test_vllm_scope_transport_overrides_what_a_client_sends():
    def request(salt, extra):
        return SimpleNamespace(cache_salt=salt, sampling_params=SimpleNamespace(extra_args=extra))

    shared = {"specdraft_speculate": 0, adapter.SCOPE_ARG: "someone-else"}
    r = request("tenant-a", shared)
    adapter.set_request_scope(r)
    assert adapter.request_scope(r.sampling_params) == "tenant-a"
    assert shared[adapter.SCOPE_ARG] == "someone-else"  # the caller's dict is not touched
    r = request(None, shared)
    adapter.set_request_scope(r)
    assert adapter.request_scope(r.sampling_params) is None
    assert r.sampling_params.extra_args == {"specdraft_speculate": 0}
    r = request(None, None)
    adapter.set_request_scope(r)
    assert r.sampling_params.extra_args is None


def test_scope_counters_are_ranks_not_names():
    from specdraft.plugins.vllm_metrics import SCOPE_RANKS, prometheus_families

    fams = {f.name: f for f in prometheus_families(
        {"cache_scopes": 2, "scope_cache_tokens_top": [120, 40]}, {"model_name": "m"})}
    assert fams["specdraft:cache_scopes"].samples[0].value == 2
    samples = fams["specdraft:scope_cache_tokens"].samples
    assert [(s.labels["rank"], s.value) for s in samples] == (
        [("1", 120), ("2", 40)] + [(str(r), 0) for r in range(3, SCOPE_RANKS + 1)])
    assert all(set(s.labels) == {"model_name", "rank"} for s in samples)


@pytest.mark.parametrize("native", [True, False])
def test_corpora_serve_the_scopes_they_name(tmp_path, native):
    import json

    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"token_ids": PROMPT + ANSWER}) + "\n")
    d = make_drafter({"native": native, "adaptive": False, "corpus_files": [
        {"path": str(path), "scopes": ["tenant-a", None]}]})
    for req, scope, drafts in (("a", "tenant-a", True), ("u", None, True), ("b", "tenant-b", False)):
        d.start(req, PROMPT + ANSWER[:4], scope=scope)
        assert (d.draft(req, 4).token_ids == ANSWER[4:8]) is drafts, scope
    # a plain path serves every scope
    d = make_drafter({"native": native, "adaptive": False, "corpus_files": [str(path)]})
    d.start("b", PROMPT + ANSWER[:4], scope="tenant-b")
    assert d.draft("b", 4).token_ids == ANSWER[4:8]
    for bad in ({"path": str(path), "scopes": "tenant-a"}, {"file": str(path)},
                {"path": str(path), "scopes": [3]}):
        with pytest.raises(SpecdraftConfigError, match="corpus_files"):
            make_drafter({"corpus_files": [bad]})


def test_thousands_of_salts_through_the_step_path_stay_bounded():
    d = make_drafter({"max_scopes": 32, "global_cache_tokens": 20_000,
                      "scope_cache_tokens": 1_000, "adaptive": False})
    rng = random.Random(5)
    sizes = []
    for i in range(2000):
        req = f"r{i}"
        d.set_scope(req, f"salt-{i}")
        hist = PROMPT + [rng.randrange(1000) for _ in range(40)]
        _step(d, [req], [hist[:len(PROMPT) + 1]])
        _step(d, [req], [hist])
        d.step([], np.zeros((0, 1), dtype=np.int32), [], [], 0, finished=[req])
        m = d.metrics()
        assert m["cache_scopes"] <= 32 and m["global_cache_tokens"] <= 20_000
        if i >= 200 and i % 100 == 0:
            sizes.append(m["global_cache_bytes"])
    assert max(sizes) < 1.3 * min(sizes), sizes
    assert d.metrics()["live_requests"] == 0
