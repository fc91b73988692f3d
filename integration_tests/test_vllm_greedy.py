"""Greedy speculative decoding with specdraft inside vLLM is token-identical to plain decoding.

Several requests in flight (max_num_seqs=8), prefix caching and chunked prefill on, a KV cache
small enough to force preemption and resumption, one request aborted mid-flight, one request
that runs into max_model_len.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from conftest import MAX_MODEL_LEN, NUM_SPEC_TOKENS, make_llm, spec_config
from live_prompts import PROMPTS

ABORTED = "aborted"
ABORT_AFTER_STEPS = 24  # the aborted request has generated tens of tokens by then
LENGTH_CAPPED = "length_capped"


def counter(llm, name: str) -> float:
    return sum(m.value for m in llm.get_metrics() if m.name == name and hasattr(m, "value"))


def requests(tokenizer) -> dict[str, tuple[dict, object]]:
    from vllm import SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=48)
    # added first, so that it is running (and known to the drafter) when it is aborted
    reqs = {ABORTED: ({"prompt": PROMPTS["story"] + " loved"},
                      SamplingParams(temperature=0.0, max_tokens=200))}
    reqs.update((name, ({"prompt": text}, greedy)) for name, text in PROMPTS.items())
    long_ids = tokenizer.encode(PROMPTS["code_repeat"] + PROMPTS["code_edit"])
    reqs[LENGTH_CAPPED] = ({"prompt_token_ids": long_ids[: MAX_MODEL_LEN - 40]},
                           SamplingParams(temperature=0.0, max_tokens=200))
    return reqs


def run(llm, reqs, abort_after_steps: int | None = None) -> tuple[dict, int]:
    """All requests in flight at once; optionally abort one after some engine steps. Returns
    the finished requests' outputs and how many tokens the aborted one had when aborted."""
    engine = llm.llm_engine
    for name, (prompt, params) in reqs.items():
        engine.add_request(name, prompt, params)
    outputs, steps, aborted_tokens = {}, 0, 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = out
            elif out.request_id == ABORTED:
                aborted_tokens = len(out.outputs[0].token_ids)
        steps += 1
        if steps == abort_after_steps:
            engine.abort_request([ABORTED])
    return outputs, aborted_tokens


@pytest.fixture(scope="module")
def spec_llm(model_path):
    with make_llm(model_path, disable_log_stats=False,
                  speculative_config=spec_config(global_cache_tokens=200_000)) as llm:
        yield llm


@dataclass
class Results:
    reference: dict        # request name -> plain decoding's output
    speculative: dict      # request name -> specdraft's output (finished requests only)
    aborted_tokens: int    # output tokens the aborted request had when it was aborted
    preemptions: float     # vLLM preemptions during the speculative run
    drafter: dict          # the worker's SpecDrafter.metrics() right after the speculative run


@pytest.fixture(scope="module")
def results(spec_llm, plain_llm):
    from specdraft.adapters import vllm_adapter

    reqs = requests(plain_llm.get_tokenizer())
    reference, _ = run(plain_llm, {k: v for k, v in reqs.items() if k != ABORTED})
    preempted_before = counter(spec_llm, "vllm:num_preemptions")
    speculative, aborted_tokens = run(spec_llm, reqs, abort_after_steps=ABORT_AFTER_STEPS)
    preemptions = counter(spec_llm, "vllm:num_preemptions") - preempted_before
    [drafter] = vllm_adapter().drafter_metrics(spec_llm)
    return Results(reference, speculative, aborted_tokens, preemptions, drafter)


def test_greedy_outputs_identical(results):
    assert len(results.reference) >= 20
    for name, ref in results.reference.items():
        assert name in results.speculative, f"{name} has no output"
        assert results.speculative[name].outputs[0].token_ids == ref.outputs[0].token_ids, name


def test_aborted_request_reached_the_drafter_and_stayed_out_of_the_global_cache(results):
    out = results.speculative.get(ABORTED)
    assert out is None or out.outputs[0].finish_reason == "abort"
    drafter = results.drafter
    # every request left the drafter: the aborted one (which never finished) by its abort
    assert drafter["requests"] >= len(results.reference) + 1  # the aborted one started
    assert drafter["live_requests"] == 0 and drafter["aborted"] >= 1
    # finishing is the only way into the global cache: the finished requests, not the aborted one
    finished = [o for name, o in results.speculative.items() if name != ABORTED]
    assert drafter["finished"] == len(finished)
    assert results.aborted_tokens >= ABORT_AFTER_STEPS // 2  # it was aborted mid-flight
    # the cache holds the finished outputs (cache_prompts is off); a request that stops inside a
    # step's accepted run (max_tokens, EOS) may leave up to k tokens past its stop there (vLLM
    # trims them from the output only)
    finished_tokens = sum(len(o.outputs[0].token_ids) for o in finished)
    assert 0 <= drafter["global_cache_tokens"] - finished_tokens <= NUM_SPEC_TOKENS * len(finished)


def test_request_runs_into_max_model_len(results):
    out = results.speculative[LENGTH_CAPPED]
    assert out.outputs[0].finish_reason == "length"
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == MAX_MODEL_LEN
    assert out.outputs[0].token_ids == results.reference[LENGTH_CAPPED].outputs[0].token_ids


def test_preemption_happened(results):
    # The KV cache is sized so that the batch cannot all fit: requests were preempted and resumed
    # (and their outputs still matched above).
    assert results.preemptions > 0


def test_specdraft_tracked_requests_and_vllm_counted_drafts(spec_llm, results):
    from specdraft.plugins.vllm import engine_metrics

    counters = engine_metrics(spec_llm, wait_for=lambda s: s["requests_finished"] >= 20)
    assert counters["tracked"], "the proposer did not see vLLM's request ids"
    assert counters["errors"] == 0
    assert counters["drafts"] > 0 and counters["accepted_tokens"] > 0
    assert counters["requests_finished"] >= 20  # last finishes arrive with the next step
    assert max(k for k, c in enumerate(counters["draft_length_counts"]) if c) <= NUM_SPEC_TOKENS
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
