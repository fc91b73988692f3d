"""specdraft's fix of the CPU rejection sampler (vllm-project/vllm PR #55006) is applied only in
engines whose proposer is specdraft's: another engine in the same environment (here vLLM's
ngram) runs vLLM's sampler unchanged. test_vllm_sampling.py shows the fix still works where it
is applied (temperature > 0 through specdraft matches plain sampling)."""

from __future__ import annotations

import pytest
from conftest import make_llm, spec_config

pytest.importorskip("vllm")


def test_fix_only_where_specdraft_proposes(model_path):
    from specdraft.adapters import vllm_adapter

    adapter = vllm_adapter()
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    with make_llm(model_path, speculative_config=ngram) as llm:
        assert llm.collective_rpc(adapter.SAMPLER_FIX_METHOD) == [
            {"fixed": False, "registered_is_fixed": False}]
    with make_llm(model_path, speculative_config=spec_config(k=4)) as llm:
        assert llm.collective_rpc(adapter.SAMPLER_FIX_METHOD) == [
            {"fixed": True, "registered_is_fixed": True}]
