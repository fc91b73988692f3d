"""Temperature > 0: speculative sampling through specdraft matches plain sampling.

vLLM verifies model-free drafts as one-hot proposals (q = 1), which is lossless: the sampled
sequence distribution must equal plain sampling. On the CPU build this holds only with specdraft's
fix of the rejection sampler's expand kernel (test_vllm_sampler_fix_needed.py shows the bug).
"""

from __future__ import annotations

import pytest
from conftest import WIDE, make_llm, spec_config
from sampling import GROUPS, NUM_SAMPLES, chi_square_p, sample_outcomes


def counter(llm, name: str) -> float:
    return sum(m.value for m in llm.get_metrics() if m.name == name and hasattr(m, "value"))


@pytest.fixture(scope="module")
def spec_llm(model_path):
    with make_llm(model_path, disable_log_stats=False, speculative_config=spec_config(k=4),
                  **WIDE) as llm:
        yield llm


def test_speculative_sampling_matches_plain(spec_llm, plain_samples):
    drafts_before = counter(spec_llm, "vllm:spec_decode_num_drafts")
    accepted_before = counter(spec_llm, "vllm:spec_decode_num_accepted_tokens")
    speculative = sample_outcomes(spec_llm)
    drafts = counter(spec_llm, "vllm:spec_decode_num_drafts") - drafts_before
    accepted = counter(spec_llm, "vllm:spec_decode_num_accepted_tokens") - accepted_before
    # The samples went through verification, and drafts were accepted at temperature > 0.
    assert drafts > NUM_SAMPLES / 2 and accepted > 0
    for group, plain, spec in zip(GROUPS, plain_samples, speculative):
        p = chi_square_p(plain, spec)
        print(f"{group}: chi-square p = {p:.3g}; plain {plain.most_common(3)}, "
              f"speculative {spec.most_common(3)}")
        assert p > 1e-3, group
    # top_k=1 is deterministic: speculation must give exactly plain's single outcome.
    assert len(speculative[0]) == 1 and speculative[0] == plain_samples[0]
