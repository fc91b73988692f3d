"""The lookup and tree proposers are token-identical to plain greedy decoding too.

(test_vllm_greedy.py covers the suffix proposer under preemption, aborts and max_model_len.)
One engine per proposer class, one after the other.
"""

from __future__ import annotations

import pytest
from conftest import NUM_SPEC_TOKENS, make_llm, spec_config
from live_prompts import PROMPTS


def generate(llm, prompts):
    from vllm import SamplingParams

    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=48), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def reference(plain_llm):
    return generate(plain_llm, list(PROMPTS.values()))


@pytest.fixture(scope="module", params=["LookupProposer", "TreeProposer"])
def spec_llm(request, model_path):
    with make_llm(model_path, speculative_config=spec_config(
            f"specdraft.plugins.vllm.{request.param}")) as llm:
        yield llm


def test_greedy_outputs_identical(spec_llm, reference):
    from specdraft.plugins.vllm import engine_metrics

    assert generate(spec_llm, list(PROMPTS.values())) == reference
    counters = engine_metrics(spec_llm, wait_for=lambda s: s["drafts"] > 0)
    assert counters["tracked"] and counters["errors"] == 0
    assert counters["drafts"] > 0 and counters["accepted_tokens"] > 0
    assert max(k for k, c in enumerate(counters["draft_length_counts"]) if c) <= NUM_SPEC_TOKENS
