"""specdraft in a Ray Serve LLM deployment: one vLLM CPU replica behind Serve's OpenAI ingress.

A local Ray cluster started here; HTTP on 127.0.0.1. The session's plain vLLM engine (no
speculation) gives the reference outputs for the same chat messages; the specdraft deployment,
with the shared cache on, must answer with the same tokens, export ``specdraft:*`` counters
(through a deployment handle, and through Ray's own Prometheus endpoint as ``ray_specdraft_*``,
agreeing with vLLM's ``ray_vllm_*``), and keep answering (same tokens) when the shared cache's
actor is killed mid-run.
"""

from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray", reason="the [ray] extra is installed by scripts/setup.sh")
pytest.importorskip("ray.serve.llm")
httpx = pytest.importorskip("httpx")

from conftest import KV_CACHE_BYTES, MAX_MODEL_LEN, free_port, start_local_ray  # noqa: E402

from specdraft.plugins.ray_serve import metric_sums  # noqa: E402

pytestmark = pytest.mark.slow

STORE = "serve-test-cache"
MAX_TOKENS = 64  # per answer, the deployment's and the reference's
PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the planets of the solar system, one per line.",
    "Repeat this line three times: the quick brown fox jumps over the lazy dog.",
    "Write a Python function that returns the n-th Fibonacci number.",  # a repeated request
]


@pytest.fixture(scope="module")
def serve_cluster():
    from ray import serve

    # Ray kills workers when the whole machine is short of memory, whoever holds it; these
    # tests' own processes are small, so a busy shared machine must not fail them.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    # _metrics_export_port: Ray's Prometheus endpoint; metrics reported every second.
    started = start_local_ray(lambda: dict(
        num_cpus=2, include_dashboard=False, namespace="specdraft-serve-test",
        log_to_driver=False, _node_ip_address="127.0.0.1", _metrics_export_port=free_port(),
        _system_config={"metrics_report_interval_ms": 1000}))
    metrics_port = started["_metrics_export_port"]
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics"
    serve.shutdown()
    ray.shutdown()


def _config(model_path: str, proposer: str):
    from specdraft.plugins.ray_serve import llm_config

    engine = dict(dtype="float32", enforce_eager=True, max_model_len=MAX_MODEL_LEN,
                  max_num_seqs=4, kv_cache_memory_bytes=KV_CACHE_BYTES, seed=0,
                  max_num_batched_tokens=256)
    return llm_config(model_path, model_id="smollm2", proposer=proposer,
                      specdraft={"shared_cache": {"name": STORE, "tokens": 100_000,
                                                  "pull_interval_s": 0.1}},
                      engine_kwargs=engine,
                      runtime_env={"env_vars": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}})


def _chat(base: str, prompt: str) -> list[int]:
    r = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
        "model": "smollm2", "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS, "temperature": 0.0, "return_token_ids": True})
    r.raise_for_status()
    choice = r.json()["choices"][0]
    assert choice["message"]["content"]
    return choice["token_ids"]


def _deploy(base: str, config, name: str):
    from ray import serve

    from specdraft.plugins.ray_serve import build_app

    serve.run(build_app(config), name=name, route_prefix="/", blocking=False)
    deadline = time.monotonic() + 600
    while True:
        try:
            if httpx.get(f"{base}/v1/models", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the Serve application did not come up"
        time.sleep(1)


def _llm_handle(app: str):
    from ray import serve

    status = serve.status().applications[app]
    name = next(d for d in status.deployments if "LLM" in d or "smollm2" in d.lower()
                and "Ingress" not in d)
    return serve.get_deployment_handle(name, app_name=app)


def _plain_chat(llm, prompt: str) -> list[int]:
    """The reference: the session's plain engine (no speculation), the same chat template and
    greedy settings as the deployment's OpenAI ingress applies."""
    from vllm import SamplingParams

    out = llm.chat([{"role": "user", "content": prompt}],
                   SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0), use_tqdm=False)
    return list(out[0].outputs[0].token_ids)


def test_serve_llm_with_specdraft_matches_plain_and_survives_cache_loss(serve_cluster,
                                                                         model_path, plain_llm):
    from ray import serve

    base, ray_metrics_url = serve_cluster
    reference = [_plain_chat(plain_llm, p) for p in PROMPTS]

    _deploy(base, _config(model_path, "SuffixProposer"), "specdraft")
    handle = _llm_handle("specdraft")
    first = [_chat(base, p) for p in PROMPTS[:2]]
    deadline = time.monotonic() + 60
    while metric_sums(handle.specdraft_metrics.remote().result()).get(
            "specdraft:shared_cache_published_tokens_total", 0) == 0:
        assert time.monotonic() < deadline, "the replica never published to the shared cache"
        time.sleep(0.5)
    store = ray.get_actor(STORE, namespace="specdraft")
    ray.kill(store, no_restart=False)  # mid-run: Ray restarts it, empty
    rest = [_chat(base, p) for p in PROMPTS[2:]]
    assert first + rest == reference

    # The replica's counters are refreshed by its engine steps, and Ray may take a while to
    # restart the store on a busy machine: keep traffic going (outputs still unchanged) until
    # the restart shows.
    deadline = time.monotonic() + 180
    while True:
        counters = metric_sums(handle.specdraft_metrics.remote().result())
        if counters.get("specdraft:shared_cache_restarts_seen_total", 0) >= 1:
            break
        assert time.monotonic() < deadline, f"cache restart never seen: {counters}"
        assert _chat(base, PROMPTS[0]) == reference[0]
    print("\nreplica counters:", {k: v for k, v in counters.items() if "length" not in k})
    assert counters["specdraft:proposer_steps_total"] > 0
    assert counters["specdraft:draft_tokens_total"] > 0
    assert counters["specdraft:accepted_tokens_total"] > 0
    assert counters["specdraft:errors_total"] == 0  # the store's loss never reached drafting

    # The same counters through Ray's metrics (log_engine_metrics, Ray's default), where vLLM's
    # are too: specdraft's accepted tokens agree with the handle's and with vLLM's count.
    deadline = time.monotonic() + 90
    while True:
        accepted = metric_sums(handle.specdraft_metrics.remote().result())[
            "specdraft:accepted_tokens_total"]
        ray_counters = metric_sums(httpx.get(ray_metrics_url, timeout=10).text,
                                   ("ray_specdraft_", "ray_vllm_"))
        ours = ray_counters.get("ray_specdraft_accepted_tokens_total")
        vllms = ray_counters.get("ray_vllm_spec_decode_num_accepted_tokens_total")
        if ours == accepted == vllms:
            break
        assert time.monotonic() < deadline, (
            f"Ray's metrics: specdraft {ours}, vLLM {vllms}; the replica's figure {accepted}")
        time.sleep(1)
    assert ray_counters["ray_specdraft_proposer_steps_total"] > 0
    assert "ray_specdraft_global_cache_tokens" in ray_counters  # gauges too
    serve.delete("specdraft")
