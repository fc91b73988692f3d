"""Greedy speculative decoding with specdraft inside vLLM is token-identical to plain decoding.

Several requests in flight (max_num_seqs=8), prefix caching and chunked prefill on, a KV cache
small enough to force preemption and resumption, one request aborted mid-flight, one request
that runs into max_model_len.
"""

from __future__ import annotations

import pytest
from conftest import MAX_MODEL_LEN, NUM_SPEC_TOKENS, make_llm, spec_config
from live_prompts import PROMPTS

ABORTED = "aborted"
LENGTH_CAPPED = "length_capped"


def counter(llm, name: str) -> float:
    return sum(m.value for m in llm.get_metrics() if m.name == name and hasattr(m, "value"))


def requests(tokenizer) -> dict[str, tuple[dict, object]]:
    from vllm import SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=48)
    reqs = {name: ({"prompt": text}, greedy) for name, text in PROMPTS.items()}
    reqs[ABORTED] = ({"prompt": PROMPTS["story"] + " loved"}, SamplingParams(temperature=0.0,
                                                                             max_tokens=200))
    long_ids = tokenizer.encode(PROMPTS["code_repeat"] + PROMPTS["code_edit"])
    reqs[LENGTH_CAPPED] = ({"prompt_token_ids": long_ids[: MAX_MODEL_LEN - 40]},
                           SamplingParams(temperature=0.0, max_tokens=200))
    return reqs


def run(llm, reqs, abort_after_steps: int | None = None) -> dict:
    """All requests in flight at once; optionally abort one after some engine steps."""
    engine = llm.llm_engine
    for name, (prompt, params) in reqs.items():
        engine.add_request(name, prompt, params)
    outputs, steps = {}, 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = out
        steps += 1
        if steps == abort_after_steps:
            engine.abort_request([ABORTED])
    return outputs


@pytest.fixture(scope="module")
def spec_llm(model_path):
    with make_llm(model_path, disable_log_stats=False,
                  speculative_config=spec_config(global_cache_tokens=200_000)) as llm:
        yield llm


@pytest.fixture(scope="module")
def results(spec_llm, plain_llm):
    reqs = requests(plain_llm.get_tokenizer())
    reference = run(plain_llm, {k: v for k, v in reqs.items() if k != ABORTED})
    preempted_before = counter(spec_llm, "vllm:num_preemptions")
    speculative = run(spec_llm, reqs, abort_after_steps=6)
    return reference, speculative, counter(spec_llm, "vllm:num_preemptions") - preempted_before


def test_greedy_outputs_identical(results):
    reference, speculative, _ = results
    assert len(reference) >= 20
    for name, ref in reference.items():
        assert name in speculative, f"{name} has no output"
        assert speculative[name].outputs[0].token_ids == ref.outputs[0].token_ids, name


def test_aborted_request_left_the_batch(results):
    _, speculative, _ = results
    out = speculative.get(ABORTED)
    assert out is None or out.outputs[0].finish_reason == "abort" or len(
        out.outputs[0].token_ids) < 200


def test_request_runs_into_max_model_len(results):
    reference, speculative, _ = results
    out = speculative[LENGTH_CAPPED]
    assert out.outputs[0].finish_reason == "length"
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == MAX_MODEL_LEN
    assert out.outputs[0].token_ids == reference[LENGTH_CAPPED].outputs[0].token_ids


def test_preemption_happened(results):
    # The KV cache is sized so that the batch cannot all fit: requests were preempted and resumed
    # (and their outputs still matched above).
    _, _, preemptions = results
    assert preemptions > 0


def test_specdraft_tracked_requests_and_vllm_counted_drafts(spec_llm, results):
    from specdraft.plugins.vllm import engine_metrics

    figures = engine_metrics(spec_llm, wait_for=lambda s: s["requests_finished"] >= 20)
    assert figures["tracked"], "the proposer did not see vLLM's request ids"
    assert figures["errors"] == 0
    assert figures["drafts"] > 0 and figures["accepted_tokens"] > 0
    assert figures["requests_finished"] >= 20  # last finishes arrive with the next step
    assert max(k for k, c in enumerate(figures["draft_length_counts"]) if c) <= NUM_SPEC_TOKENS
    assert counter(spec_llm, "vllm:spec_decode_num_drafts") > 0
    assert counter(spec_llm, "vllm:spec_decode_num_accepted_tokens") > 0


def test_offline_opt_out_and_bad_request_keys(spec_llm, results):
    """The offline forms of the per-request opt-out (the server's is in test_vllm_serve)."""
    from vllm import SamplingParams

    prompt = PROMPTS["echo_list"]

    def drafts(extra_args):
        before = counter(spec_llm, "vllm:spec_decode_num_drafts")
        out = spec_llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=32,
                                                         extra_args=extra_args))
        return counter(spec_llm, "vllm:spec_decode_num_drafts") - before, out[0].outputs[0].text

    drafted, reference = drafts(None)
    assert drafted > 0
    for extra_args in ({"specdraft": {"speculate": False}}, {"specdraft_speculate": False}):
        assert drafts(extra_args) == (0, reference), extra_args
    with pytest.raises(Exception, match="unknown per-request specdraft option 'specdraft.speculat'"):
        drafts({"specdraft": {"speculat": False}})
