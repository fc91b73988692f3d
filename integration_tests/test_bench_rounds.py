"""Live benchmark rounds see the traffic as new.

A round that sends the same prompts again could copy each request's whole greedy output from the
global cache the previous round filled (vLLM ``suffix`` and specdraft) and reuse the prefix cache.
The benchmark clears that state before every run; these tests show the state matters (without the
reset the second pass accepts far more) and that with it the rounds agree.
"""

from __future__ import annotations

import pytest
from conftest import NUM_SPEC_TOKENS, make_llm, spec_config

from specdraft import bench, live
from specdraft.replay import load_trace

TRACE = "benchmarks/traces/smollm2-135m.jsonl"
MAX_TOKENS = 40
# accepted tokens of a repeated, reset run may differ from the first by batching effects and the
# controller's timing-driven lengths; a run that copies from the previous round gains far more
NOISE = 0.05
SLACK = 8

SPEC = {"vllm-suffix": {"method": "suffix", "num_speculative_tokens": NUM_SPEC_TOKENS},
        "specdraft": spec_config()}


@pytest.fixture(scope="module")
def prompts():
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    records = load_trace(os.path.join(here, "..", TRACE))
    return [r["prompt_token_ids"] for r in records[:4]]


@pytest.fixture(scope="module")
def engines(model_path):
    # with stats: the requests' scheduling stamps say how many the first step admitted
    with make_llm(model_path, speculative_config=SPEC["vllm-suffix"], disable_log_stats=False,
                  per_request_spec_decode_metrics="summary") as suffix, \
         make_llm(model_path, speculative_config=SPEC["specdraft"], disable_log_stats=False,
                  per_request_spec_decode_metrics="summary") as specdraft:
        yield {"vllm-suffix": suffix, "specdraft": specdraft}


@pytest.mark.parametrize("method", list(SPEC))
def test_reset_clears_what_a_repeat_would_copy(engines, prompts, method):
    llm = engines[method]
    live.generate(llm, [prompts[0][:16]], 4)
    live.reset_cross_request_state(llm)
    first = live.generate(llm, prompts, MAX_TOKENS)
    carried = live.generate(llm, prompts, MAX_TOKENS)         # the old benchmark's second round
    reset = live.reset_cross_request_state(llm)
    again = live.generate(llm, prompts, MAX_TOKENS)
    a1, a2, a3 = (r.counters["accepted_tokens"] for r in (first, carried, again))
    assert first.outputs == carried.outputs == again.outputs
    assert a2 > 1.3 * a1, (a1, a2)                            # the state does inflate a repeat
    assert a3 <= a1 * (1 + NOISE) + SLACK, (a1, a3)           # and the reset removes it
    assert reset["prefix_cache_reset"]
    (worker,) = reset["workers"]
    dropped = worker.get("dropped_cache_tokens", worker.get("evicted", 0))
    assert dropped > 0, worker


def test_bench_rounds_agree(engines, plain_llm, prompts):
    loaded = bench.LoadedEngines.of({"none": plain_llm, **engines})
    messages = []
    runs = bench.run_interleaved(loaded, prompts, MAX_TOKENS, 2, messages.append)
    table = bench.summarize(runs, k=NUM_SPEC_TOKENS)
    for method in SPEC:
        r1, r2 = (r["accepted_tokens"] for r in table[method]["rounds"])
        assert r1 > 0 and r2 <= r1 * (1 + NOISE) + SLACK, (method, r1, r2)
        assert table[method]["identical_to_no_spec"]
        assert table[method]["cold_speedup"] == table[method]["rounds"][0]["speedup"]
    assert table["none"]["mean_acceptance_length"] is None  # no drafts: no MAL
    # specdraft's own time in propose, read from its worker between runs; the peers have none
    share = table["specdraft"]["proposer_share"]
    assert share is not None and 0 < share < 1, share
    assert all(p["proposer_us_per_step"] > 0 for p in table["specdraft"]["rounds"])
    assert table["none"]["proposer_share"] is None and table["vllm-suffix"]["proposer_share"] is None
    assert len(messages) == 2 * 3
    text = bench.format_live_table(table)
    assert "cold" in text and text.count("tok/s") >= 2 * 3
    # every engine's steps are timed, whatever its method: the run's time, step by step
    for method, t in table.items():
        for p, run in zip(t["rounds"], runs[method]):
            st = p["steps"]
            assert st["steps"] > 0 and st["decode_steps"] > 0, (method, st)
            assert 0.5 * run.seconds < st["seconds"] < 1.05 * run.seconds, (method, st, run.seconds)
    # a request emits at least one token a decode step: no speculation takes the most steps
    assert table["none"]["steps"]["decode_steps"] > table["specdraft"]["steps"]["decode_steps"]
    assert "ms/step" in bench.format_steps_table(table)


def test_the_replay_predicts_the_live_counts(engines, plain_llm, prompts):
    """The bench's replay of a live run (the engine's schedule, its measured pass times, the
    target's tokens past each limit) gives the drafted and accepted tokens the engine counted."""
    loaded = bench.LoadedEngines.of({"none": plain_llm, **engines})
    runs = bench.run_interleaved(loaded, prompts, MAX_TOKENS, 1, lambda msg: None)
    lookahead = bench.lookahead_outputs(loaded, prompts, [MAX_TOKENS] * len(prompts),
                                        NUM_SPEC_TOKENS)
    assert all(la[:MAX_TOKENS] == o for la, o in zip(lookahead, runs["none"][0].outputs))
    table = bench.summarize(runs, k=NUM_SPEC_TOKENS)
    for m, rs in runs.items():  # the schedule each engine ran with
        assert rs[0].counters["schedule"]["max_num_batched_tokens"] > 0, m
        # every request is in the engine before its first step (live.generate hands them over
        # in one burst; before, the first step admitted one or all by race), read from the stamps
        assert rs[0].counters["schedule"]["first_step"] == len(prompts), m
    def schedule(run):
        return bench.run_schedule(run, run.counters["schedule"]["max_num_seqs"])
    replayed = bench.replay_live(runs, prompts, NUM_SPEC_TOKENS, schedule, "cpu-fp32",
                                 lookahead=lookahead)
    bench.add_replayed(table, replayed)
    for m in SPEC:
        gap = table[m]["replay_gap"]
        assert abs(gap["drafted_tokens"]) <= 0.03 and abs(gap["accepted_tokens"]) <= 0.03, (
            m, table[m]["drafted_tokens"], table[m]["accepted_tokens"], table[m]["replayed"])
    # specdraft's passes were measured and reported as vLLM ran them
    log = table["specdraft"]["rounds"][0]["pass_log"]
    assert log and all(rows >= 1 and tokens >= rows and s > 0 for rows, tokens, s in log)
