"""A proposer that raises inside vLLM: the engine keeps serving, outputs are unchanged, and the
failures are counted (and logged once)."""

from __future__ import annotations

import pytest
from conftest import NUM_SPEC_TOKENS, make_llm, spec_config
from live_prompts import PROMPTS


@pytest.fixture(scope="module")
def faulty_llm(model_path):
    with make_llm(model_path, disable_log_stats=False,
                  speculative_config=spec_config("faulty_proposer.FaultySuffixProposer")) as llm:
        yield llm


def generate(llm, prompts):
    from vllm import SamplingParams

    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=48), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def test_failures_do_not_change_outputs_and_are_counted(faulty_llm, plain_llm):
    from specdraft.plugins.vllm import engine_metrics

    prompts = list(PROMPTS.values())[:12]
    assert generate(faulty_llm, prompts) == generate(plain_llm, prompts)
    counters = engine_metrics(faulty_llm, wait_for=lambda s: s["errors"] > 0)
    assert counters["errors"] > 0
    assert counters["drafts"] > 0  # between failures, drafting went on
    assert max(k for k, c in enumerate(counters["draft_length_counts"]) if c) <= NUM_SPEC_TOKENS
    # The engine keeps serving after the failures.
    more = list(PROMPTS.values())[12:16]
    assert generate(faulty_llm, more) == generate(plain_llm, more)
