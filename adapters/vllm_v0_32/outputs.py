"""What the serving surface and the benchmarks read from vLLM 0.32's config, ``generate()``
outputs and metrics: per-request latencies and spec-decode counters, the first step's requests,
the served model's name; and how the benchmarks hand ``generate()`` all its requests before the
engine's first step (``generate_in_one_burst``).
"""

from __future__ import annotations

from typing import Any


def request_latencies(outputs: Any) -> list[tuple[float | None, float | None]]:
    """(TTFT, TPOT) in seconds for each ``generate()`` output, as vLLM's serving benchmark
    defines them: TTFT from arrival to the first token; TPOT the time per output token after
    the first, (last token - first token) / (output tokens - 1). ``RequestOutput.metrics`` is a
    ``RequestStateStats`` when the engine logs stats (its first/last token stamps are the engine
    core's monotonic clock); None where it is missing or the request emitted one token."""
    out = []
    for o in outputs:
        m = getattr(o, "metrics", None)
        if m is None or not getattr(m, "first_token_ts", 0.0):
            out.append((None, None))
            continue
        n = len(o.outputs[0].token_ids)
        ttft = m.first_token_latency or None
        tpot = (m.last_token_ts - m.first_token_ts) / (n - 1) if n > 1 else None
        out.append((ttft, tpot))
    return out


def generate_in_one_burst(llm: Any, prompts: Any, params: Any) -> list:
    """``llm.generate(prompts, params)`` with every request in the engine before its first step.

    ``generate()`` sends its requests to the engine core one by one, and the core starts stepping
    on the first: whether the first step admits one request or all of them is a race
    (``first_step_requests`` reads it back), and it moves a round's TTFT by a quarter and its
    time by several percent (a 135M model, 5 prompts: TTFT 2.1-2.3 s with all five in the first
    step, 1.6-1.8 s with one), so methods compared round by round drew different schedules by
    luck. Here the scheduler is paused ("keep": no step runs, new requests wait) while
    ``generate()`` adds its requests and resumed after the last, so the first step holds as many
    as ``max_num_seqs`` and the token budget admit, every round. Only the multiprocess engine
    core (``SyncMPClient``, vLLM's default) is paused; an in-process core steps only when
    ``generate()`` runs it, after every request is added, and is called plainly."""
    core = llm.llm_engine.engine_core
    call = getattr(core, "call_utility", None)
    if call is None:
        return llm.generate(prompts, params, use_tqdm=False)
    add = llm._add_completion_requests

    def add_all(*args: Any, **kwargs: Any) -> Any:
        call("pause_scheduler", "keep", False)  # keep: nothing in flight; False: keep caches
        try:
            return add(*args, **kwargs)
        finally:
            call("resume_scheduler")

    llm._add_completion_requests = add_all
    try:
        return llm.generate(prompts, params, use_tqdm=False)
    finally:
        del llm._add_completion_requests


def first_step_requests(outputs: Any) -> int | None:
    """How many of the ``generate()`` outputs the engine's first step admitted: the requests
    sharing the earliest ``scheduled_ts`` (the scheduler stamps every request it schedules in a
    step with one clock reading). Requests reach the engine one by one while it already steps,
    so this is a race a replay must read from the run; None without stamps."""
    stamps = [getattr(getattr(o, "metrics", None), "scheduled_ts", 0.0) or 0.0 for o in outputs]
    if not stamps or not all(stamps):
        return None
    first = min(stamps)
    return sum(1 for t in stamps if t == first)


# engine arguments that make generate() outputs carry per-request spec-decode counters (vLLM's
# Prometheus registry is per process: with several engines in one process only the last one's
# global counters survive, so the benchmarks count per request)
PER_REQUEST_METRICS_ARGS = {"per_request_spec_decode_metrics": "summary"}


def served_model_name(spec_config: Any) -> str:
    """The name the target is served under (the first of several), else its model path."""
    target = getattr(spec_config, "target_model_config", None)
    served = getattr(target, "served_model_name", None) or getattr(target, "model", "") or ""
    if isinstance(served, (list, tuple)):
        served = served[0] if served else ""
    return str(served)


def request_spec_counters(outputs: Any) -> dict[str, int]:
    """drafts (verify steps with a draft), drafted and accepted tokens, summed over
    ``generate()`` outputs (``RequestSpecDecodeMetrics``: a histogram of accepted draft tokens
    per verify step; zero for an engine without speculation)."""
    c = {"drafts": 0, "drafted_tokens": 0, "accepted_tokens": 0}
    for o in outputs:
        m = getattr(o.outputs[0], "spec_decode_metrics", None)
        if m is None:
            continue
        c["drafts"] += sum(m.histogram)
        c["accepted_tokens"] += sum(j * n for j, n in enumerate(m.histogram))
        c["drafted_tokens"] += m.num_draft_tokens
    return c
