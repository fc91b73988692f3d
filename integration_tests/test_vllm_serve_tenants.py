"""Tenant scopes through vLLM's OpenAI server: ``cache_salt`` in the request body.

The probe of test_vllm_tenants.py over HTTP: tenant A's requests cold, then tenant B's (another
salt) and unsalted ones with the same prompts, then A's again, one request at a time; accepted
draft tokens read from vLLM's own counters between requests. Fixed draft length (see
test_vllm_tenants.py for why); outputs identical to plain decoding.
"""

from __future__ import annotations

import pytest
from live_prompts import PROMPTS
from test_vllm_serve import post, serving, settled

NAMES = ("echo_sentence", "code_repeat", "chat_capital", "story")
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve-tenants") / "server.log"
    config = {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
              "num_speculative_tokens": 8,
              "specdraft": {"global_cache_tokens": 100_000, "adaptive": False}}
    with serving(model_path, config, log_path) as base:
        yield base


def run(base: str, salt: str | None) -> tuple[float, list[str]]:
    """(accepted draft tokens, texts) of the prompts sent one at a time with this salt."""
    kw = {} if salt is None else {"cache_salt": salt}
    before = settled(base).get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    texts = []
    for name in NAMES:
        r = post(base, PROMPTS[name], max_tokens=MAX_TOKENS, **kw)
        r.raise_for_status()
        texts.append(r.json()["choices"][0]["text"])
    after = settled(base).get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    return after - before, texts


def test_cache_salt_in_the_request_body_scopes_the_global_cache(server, plain_llm):
    from vllm import SamplingParams

    reference = [o.outputs[0].text for o in plain_llm.generate(
        [PROMPTS[n] for n in NAMES], SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
        use_tqdm=False)]
    runs = {label: run(server, salt) for label, salt in (
        ("a_cold", "tenant-a"), ("b", "tenant-b"), ("unsalted", None), ("a_repeat", "tenant-a"))}
    accepted = {k: v[0] for k, v in runs.items()}
    print("\naccepted draft tokens (OpenAI server):", accepted)
    for label, (_, texts) in runs.items():
        assert texts == reference, label
    assert accepted["b"] <= accepted["a_cold"], accepted
    assert accepted["unsalted"] <= accepted["a_cold"], accepted
    assert accepted["a_repeat"] > accepted["a_cold"], accepted
