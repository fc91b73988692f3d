"""specdraft's changes to the CPU rejection sampler (the expand-kernel fix of
vllm-project/vllm PR #55006, and the lean forward that skips the logits copies no one reads) are
applied only in engines whose proposer is specdraft's: another engine in the same environment
(here vLLM's ngram) runs vLLM's sampler unchanged. test_vllm_sampling.py shows the fix still
works where it is applied (temperature > 0 through specdraft matches plain sampling); the greedy
identity tests run the lean forward on every step; here a request that asks for logprobs, which
takes vLLM's own forward, gets the same tokens and logprobs as under vLLM's ngram."""

from __future__ import annotations

import pytest
from conftest import make_llm, spec_config

pytest.importorskip("vllm")

PROMPT = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
          "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")


def _generate(llm, logprobs):
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=24, logprobs=logprobs)
    out = llm.generate([PROMPT], params, use_tqdm=False)[0].outputs[0]
    return list(out.token_ids), out.logprobs


def test_changes_only_where_specdraft_proposes_and_logprobs_still_come(model_path):
    from specdraft.adapters import vllm_adapter

    adapter = vllm_adapter()
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    with make_llm(model_path, speculative_config=ngram) as llm:
        assert llm.collective_rpc(adapter.SAMPLER_FIX_METHOD) == [
            {"fixed": False, "registered_is_fixed": False, "lean": False}]
        ngram_tokens, ngram_logprobs = _generate(llm, 2)
    with make_llm(model_path, speculative_config=spec_config(k=4)) as llm:
        assert llm.collective_rpc(adapter.SAMPLER_FIX_METHOD) == [
            {"fixed": True, "registered_is_fixed": True, "lean": True}]
        tokens, logprobs = _generate(llm, 2)
        lean_tokens, none = _generate(llm, None)
    assert tokens == lean_tokens == ngram_tokens
    assert none is None and len(logprobs) == len(tokens)
    for token, mine, theirs in zip(tokens, logprobs, ngram_logprobs):
        assert mine[token].rank == 1 and set(mine) == set(theirs)
        for t in mine:
            assert mine[t].logprob == pytest.approx(theirs[t].logprob, abs=1e-3)
