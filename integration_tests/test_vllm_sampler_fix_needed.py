"""Without specdraft's CPU sampler fix, vLLM 0.32 CPU speculative sampling is wrong.

test_vllm_sampling.py with the fix switched off (SPECDRAFT_VLLM_SAMPLER_FIX=0): the engine dies
on a garbage top-k, or the outcomes depart from plain sampling. Either way test_vllm_sampling.py
would fail, which is why the plugin installs the fix.
"""

from __future__ import annotations

import pytest
from conftest import WIDE, make_llm, spec_config
from sampling import chi_square_p, sample_outcomes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def unfixed_llm(model_path):
    from specdraft.adapters import vllm_adapter

    adapter = vllm_adapter()
    with make_llm(model_path, env={adapter.SAMPLER_FIX_ENV: "0"},
                  speculative_config=spec_config(k=4), **WIDE) as llm:
        yield llm


def test_without_fix_speculative_sampling_is_wrong(unfixed_llm, plain_samples):
    from vllm.v1.engine.exceptions import EngineDeadError

    try:
        speculative = sample_outcomes(unfixed_llm)
    except EngineDeadError:
        # A garbage top-k from the unwritten buffer crashed the sampler (index out of bounds).
        return
    ps = [chi_square_p(plain, spec) for plain, spec in zip(plain_samples, speculative)]
    print(f"without the fix: chi-square p = {ps}")
    assert min(ps) <= 1e-3 or speculative[0] != plain_samples[0]
