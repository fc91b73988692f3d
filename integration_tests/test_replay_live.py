"""Replay is exact: on a small trace, its accepted counts equal what vLLM reports live.

The trace is recorded greedy in float32 with ``--lookahead`` (so replay can judge a request's last
draft as the engine did); then vLLM's ``ngram`` and specdraft (fixed draft length, so no timing
feedback is involved) run the same prompts one at a time, and vLLM's own counters for every
request are compared with replay's.
"""

import gc

import pytest

from specdraft import live, workloads
from specdraft.record import record
from specdraft.replay import SpecdraftMethod, VllmNgramMethod, load_trace, replay_request

K = 6
MAX_MODEL_LEN = 2048

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def model():
    from specdraft.models import model_path
    return str(model_path("smollm2-135m"))


@pytest.fixture(scope="module")
def trace(model, tmp_path_factory):
    records = workloads.generate("code_edit", 3, seed=1) + workloads.generate("summarization", 2, seed=1)
    for r in records:
        r["max_tokens"] = 40
    path = str(tmp_path_factory.mktemp("trace") / "trace.jsonl")
    llm = live.make_llm(model, None, max_model_len=MAX_MODEL_LEN, max_num_seqs=4)
    res = record(records, llm, "smollm2-135m", path, lookahead=K, max_model_len=MAX_MODEL_LEN,
                 progress=lambda m: None)
    assert res["written"] == len(records)
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    return load_trace(path)


def live_counts(model, spec_config, trace):
    llm = live.make_llm(model, spec_config, max_model_len=MAX_MODEL_LEN, max_num_seqs=4)
    try:
        out = []
        for rec in trace:
            res = live.generate(llm, [rec["prompt_token_ids"]], rec["max_tokens"], ignore_eos=True)
            assert res.outputs[0] == rec["output_token_ids"][: rec["max_tokens"]]
            out.append((res.counters["drafts"], res.counters["drafted_tokens"],
                        res.counters["accepted_tokens"]))
        return out
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def replay_counts(method, trace):
    out = []
    for rec in trace:
        r = replay_request(method, rec["prompt_token_ids"], rec["output_token_ids"], K,
                           rec["max_tokens"])
        out.append((r["drafts"], r["drafted_tokens"], r["accepted_tokens"]))
    return out


def test_replay_equals_live_for_vllm_ngram(model, trace):
    cfg = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2,
           "prompt_lookup_max": 5}
    live_c = live_counts(model, cfg, trace)
    rep = replay_counts(VllmNgramMethod("vllm-ngram", 2, 5, MAX_MODEL_LEN), trace)
    assert sum(c[2] for c in live_c) > 0, "the trace should give ngram something to accept"
    assert rep == live_c


def test_replay_equals_live_for_specdraft(model, trace):
    options = {"strategy": "suffix", "adaptive": False}
    cfg = {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
           "num_speculative_tokens": K, "specdraft": options}
    live_c = live_counts(model, cfg, trace)
    rep = replay_counts(SpecdraftMethod("specdraft", options), trace)
    assert sum(c[2] for c in live_c) > 0
    assert rep == live_c
