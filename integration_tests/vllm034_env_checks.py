"""specdraft's vLLM 0.34 speculator against vLLM 0.34's own code: run by
integration_tests/test_vllm034.py as ``pytest`` with vLLM 0.34's Python files first on
``PYTHONPATH`` (its name keeps the main test run, on vLLM 0.32, from collecting it).

The speculator is driven the way vLLM 0.34's model runner drives it: the runner's real
``add_requests`` (patched by specdraft, with the rest of the runner standing in), vLLM's
``RequestState``/``InputBatch`` on CPU tensors, ``propose`` with the runner's arguments,
``on_requests_finished`` before the slots are freed, ``reset_state`` after warm-up. vLLM's two
Triton-only kernels (staged writes, ``post_update``) are written in torch
(integration_tests/adapter_replay.py).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from adapter_replay import K, Driver034, Params, Request  # noqa: I001 - same folder

PHRASE = [101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112]


class Engine:
    """A few requests stepped by hand through Driver034 (no trace)."""

    def __init__(self, options: dict | None = None, adaptive_verification: bool = False):
        self.driver = Driver034(dict(options or {"cost_model": "gpu"}), 512)
        spec = self.driver.spec
        if adaptive_verification:  # as vLLM's config would have it
            spec.adaptive_verification = True
        self.spec = spec
        self.n = 0
        self.live: list[Request] = []
        self.finished: list[str] = []

    def request(self, prompt, output, *, speculate=True, scope=None) -> Request:
        req = Request(f"q{self.n}", {"prompt_token_ids": prompt, "output_token_ids": output}, 0)
        req.sampling_params = Params(len(output), speculate, scope)
        req.scope = scope
        self.n += 1
        return req

    def step(self, new=(), emit=None):
        """One step: ``new`` requests prefill (emitting their first output token), the others
        emit ``emit[req_id]`` (default: their next recorded token). Returns the drafts tensor."""
        emit = emit or {}
        emitted, verified = [], []
        for req in self.live:
            pos = len(req.output_token_ids)
            toks = emit.get(req.req_id, req.truth[pos:pos + 1])
            req.output_token_ids.extend(toks)
            emitted.append(toks)
            verified.append(req.draft)
        for req in new:
            req.output_token_ids.append(req.truth[0])
            emitted.append([req.truth[0]])
            verified.append([])
        batch = self.live + list(new)
        finished, self.finished = self.finished, []
        drafts = self.driver.step(1, list(new), [(r, False) for r in finished], batch, emitted,
                                  verified, sum(map(len, emitted)), K)
        self.live = batch
        for req, d in zip(batch, drafts):
            req.draft = d
        self.last = self.driver.spec.drafts[:len(batch)].clone()
        return drafts

    def end(self, req):
        self.live.remove(req)
        self.finished.append(req.req_id)


def test_fixed_width_rows_padding_and_confidences():
    eng = Engine({"cost_model": "gpu", "adaptive": False}, adaptive_verification=True)
    prompt = PHRASE + [7, 8] + PHRASE[:3]
    a = eng.request(prompt, PHRASE[3:] + [9] * 10)
    b = eng.request([1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11])
    drafts = eng.step(new=[a, b])
    assert tuple(eng.last.shape) == (2, K)
    assert drafts[0] == PHRASE[4:4 + K]  # the phrase continued, the budget filled
    conf = eng.spec.draft_token_confidence_probs[:2]
    assert conf[0].tolist() == [1.0] * K
    row = eng.last[1].tolist()
    n = len(drafts[1])
    assert row[n:] == [b.truth[0]] * (K - n)  # padding: the last sampled token
    assert conf[1].tolist() == [1.0] * n + [0.0] * (K - n)


def test_opted_out_request_gets_padding_only():
    eng = Engine(adaptive_verification=True)
    a = eng.request(PHRASE + PHRASE[:4], PHRASE[4:], speculate=False)
    drafts = eng.step(new=[a])
    assert drafts == [[]]
    assert eng.last[0].tolist() == [PHRASE[4]] * K
    assert eng.spec.draft_token_confidence_probs[0].tolist() == [0.0] * K
    assert not eng.spec.speculates[eng.driver.states.req_id_to_index[a.req_id]]


def test_finished_requests_feed_the_global_cache_and_reset_state_forgets_them():
    eng = Engine({"cost_model": "gpu", "adaptive": False})
    a = eng.request([1, 2, 3], PHRASE)
    eng.step(new=[a])
    while len(a.output_token_ids) < len(a.truth):
        eng.step()
    eng.end(a)
    b = eng.request([4, 5] + PHRASE[:4], PHRASE[4:])
    drafts = eng.step(new=[b])
    assert drafts[0][:4] == PHRASE[5:9]  # copied from the finished request's output
    assert eng.spec.drafter.metrics()["global_cache_tokens"] > 0
    eng.spec.reset_state()  # what vLLM does after warm-up
    assert eng.spec.drafter.metrics()["global_cache_tokens"] == 0
    assert not eng.spec.sent.any() and (eng.spec.held == -1).all()


def test_an_aborted_request_does_not_enter_the_global_cache():
    eng = Engine({"cost_model": "gpu", "adaptive": False, "live_outputs": False})
    a = eng.request([1, 2, 3], PHRASE + [0] * 20)
    eng.step(new=[a])
    for _ in range(len(PHRASE)):
        eng.step()
    eng.end(a)  # before its max_tokens: an abort (a client cancel, a stop string)
    b = eng.request([4, 5] + PHRASE[:4], PHRASE[4:])
    assert eng.step(new=[b])[0] == []
    assert eng.spec.drafter.counters.aborted == 1


def test_tenant_scopes_do_not_share_drafts():
    eng = Engine({"cost_model": "gpu", "adaptive": False, "live_outputs": False})
    a = eng.request([1, 2, 3], PHRASE, scope="tenant-a")
    eng.step(new=[a])
    while len(a.output_token_ids) < len(a.truth):
        eng.step()
    eng.end(a)
    other = eng.request([4, 5] + PHRASE[:4], PHRASE[4:], scope="tenant-b")
    same = eng.request([4, 5] + PHRASE[:4], PHRASE[4:], scope="tenant-a")
    drafts = eng.step(new=[other, same])
    assert drafts[0] == [] and drafts[1][:4] == PHRASE[5:9]


def test_accepted_counts_stop_at_the_real_draft():
    """A padded slot that happens to match is accepted by vLLM; the controller learns only
    from what specdraft drafted."""
    eng = Engine({"cost_model": "gpu", "adaptive": False})
    a = eng.request([5, 6, 7, 50, 5, 6], [7, 50, 5, 6, 7] + [7] * 30)
    drafts = eng.step(new=[a])
    n = len(drafts[0])
    assert 0 < n < K
    accepted = eng.spec.read_counters()["accepted_tokens"]
    assert eng.last[0].tolist()[n:] == [7] * (K - n)  # padding, and the target repeats it
    pos = len(a.output_token_ids)
    assert a.truth[pos:pos + K] == eng.last[0].tolist()
    eng.step(emit={a.req_id: a.truth[pos:pos + K + 1]})  # every slot accepted, plus one
    assert eng.spec.read_counters()["accepted_tokens"] - accepted == n


def test_a_failing_step_costs_one_step_of_drafts_not_the_engine(caplog, monkeypatch):
    eng = Engine({"cost_model": "gpu", "adaptive": False})
    a = eng.request(PHRASE + PHRASE[:4], PHRASE[4:] + [1] * 8)
    eng.step(new=[a])
    calls = {"n": 0}
    real = type(eng.spec.drafter).step

    def broken(self, *args, **kwargs):
        calls["n"] += 1
        raise RuntimeError("planted drafter failure")

    monkeypatch.setattr(type(eng.spec.drafter), "step", broken)
    eng.driver.strict = False
    with caplog.at_level(logging.ERROR):
        eng.step()
        eng.step()
    assert calls["n"] == 2 and eng.spec.counters["errors"] == 2
    assert sum("speculator failed" in r.getMessage() for r in caplog.records) == 1
    assert eng.spec.draft_token_confidence_probs.abs().sum() == 0
    monkeypatch.setattr(type(eng.spec.drafter), "step", real)
    assert eng.step()[0]  # drafting again, history rebuilt from vLLM's


def test_the_runner_patch_wraps_vllms_own_add_requests():
    import vllm.v1.worker.gpu.model_runner as model_runner

    from specdraft.adapters.vllm_v0_34.runner import PATCHED_ATTR, install_request_params

    assert install_request_params() is None
    method = model_runner.GPUModelRunner.add_requests
    assert getattr(method, PATCHED_ATTR, False)
    seen = []
    fake = SimpleNamespace(speculator=SimpleNamespace(new_request=lambda r, sp: seen.append(r)))
    out = SimpleNamespace(scheduled_new_reqs=[SimpleNamespace(req_id="x", sampling_params=None)])
    with pytest.raises(AttributeError):  # the rest of the runner is not here
        method(fake, out)
    assert seen == ["x"]


def test_propose_arguments_as_the_runner_passes_them():
    """The runner's call is positional up to ``seeds``: the speculator reads num_sampled and
    the batch from those positions (contract.PROPOSE_CALL is checked against the source)."""
    eng = Engine()
    a = eng.request(PHRASE + PHRASE[:4], PHRASE[4:])
    eng.step(new=[a])
    assert eng.spec.counters["rows"] == 1 and eng.spec.counters["steps"] == 1
    out = eng.spec.propose(SimpleNamespace(num_reqs=1), None, None, None, None, torch.zeros(1),
                           None, None, None, None, None, dummy_run=True)
    assert out.shape[1] == K
    assert np.isfinite(eng.spec.counters["proposer_seconds"])
