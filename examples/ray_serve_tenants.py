"""Tenant scopes across two vLLM replicas sharing one suffix cache (Ray Serve LLM).

    python examples/ray_serve_tenants.py [--turns 3] [--max-tokens 128] [--json out.json]

Two vLLM CPU replicas, A and B (model ids "replica-a", "replica-b"), share specdraft's cache
actor. Tenant A sends a session of separate tasks to replica A (cold); then, on replica B, tenant
B (another ``cache_salt``), an unsalted client, and tenant A again send the same tasks. B's
replica pulled A's answers from the shared cache, into tenant A's scope only: tenant B and the
unsalted client accept no more draft tokens than A's cold run, tenant A's repeat accepts more.
Accepted tokens are each replica's ``specdraft:accepted_tokens_total`` (what vLLM verified),
read between runs; the draft length is fixed (adaptive off: see
integration_tests/test_vllm_tenants.py); every output is checked token for token against a
deployment without speculation; the exit status is 1 if a check fails.

About 7 GiB and 7 minutes on a 2-core machine (two deployments start: plain, then the pair);
the helpers (cluster, deployments, counters) are those of ray_serve_two_replicas.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ray_serve_two_replicas import (_remove_store, _store, _store_tokens, config,  # noqa: E402
                                    deploy, counters, free_port, post_json, session)

SPECDRAFT = {"adaptive": False}


def ask(base: str, model: str, task: str, max_tokens: int, salt: str | None) -> list[int]:
    body = {"model": model, "messages": [{"role": "user", "content": task}],
            "max_tokens": max_tokens, "temperature": 0.0, "return_token_ids": True}
    if salt is not None:
        body["cache_salt"] = salt
    return post_json(f"{base}/v1/chat/completions", body)["choices"][0]["token_ids"]


def run(base: str, model: str, handle, tasks: list[str], max_tokens: int, salt: str | None):
    """(accepted draft tokens on that replica, outputs) of the tasks sent one at a time."""
    before = counters(handle).get("accepted_tokens_total", 0)
    outs = [ask(base, model, t, max_tokens, salt) for t in tasks]
    time.sleep(0.5)  # the replica publishes its counters every 0.25 s
    after = counters(handle)
    return int(after.get("accepted_tokens_total", 0) - before), outs


def compare(base: str, model_path: str, turns: int, max_tokens: int) -> dict:
    from ray import serve

    tasks = session(turns, "tasks")
    deploy(base, "plain", [config(model_path, "plain", None, None)])
    try:
        expected = [ask(base, "plain", t, max_tokens, None) for t in tasks]
    finally:
        serve.delete("plain")
    name = f"tenants-{uuid.uuid4().hex[:8]}"
    opts = {**SPECDRAFT, "shared_cache": {"name": name, "tokens": 1_000_000,
                                          "pull_interval_s": 0.1}}
    deploy(base, "pair", [config(model_path, "replica-a", opts, "SuffixProposer"),
                          config(model_path, "replica-b", opts, "SuffixProposer")])
    try:
        a = serve.get_deployment_handle("SpecdraftLLMServer:replica-a", app_name="pair")
        b = serve.get_deployment_handle("SpecdraftLLMServer:replica-b", app_name="pair")
        runs = {"a_cold": run(base, "replica-a", a, tasks, max_tokens, "tenant-a")}
        store = _store(name)
        deadline = time.monotonic() + 60
        while _store_tokens(store) < sum(len(o) for o in runs["a_cold"][1]):
            if time.monotonic() > deadline:
                raise RuntimeError("replica A's requests never reached the shared cache")
            time.sleep(0.2)
        time.sleep(1.0)  # B pulls within about one pull interval
        for label, salt in (("b_on_replica_b", "tenant-b"), ("unsalted_on_replica_b", None),
                            ("a_repeat_on_replica_b", "tenant-a")):
            runs[label] = run(base, "replica-b", b, tasks, max_tokens, salt)
        fb = counters(b)
    finally:
        serve.delete("pair")
        _remove_store(name)
    accepted = {k: v[0] for k, v in runs.items()}
    return {"turns": turns, "max_tokens": max_tokens, "tasks": tasks,
            "reference_tokens": [len(o) for o in expected], "accepted_tokens": accepted,
            "identical": all(v[1] == expected for v in runs.values()),
            "b_pulled_tokens": int(fb.get("shared_cache_pulled_tokens_total", 0)),
            "b_cache_scopes": int(fb.get("cache_scopes", 0)),
            "errors": int(fb.get("errors_total", 0))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="model folder (default: specdraft's SmolLM2-135M, float32)")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--json", help="write the counters here")
    args = p.parse_args()

    import ray
    from ray import serve

    model = args.model
    if model is None:
        from specdraft.models import model_path

        model = model_path("smollm2-135m")
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")  # see ray_serve_two_replicas.py
    from specdraft.plugins.ray_serve import start_local_ray

    start_local_ray(lambda: dict(num_cpus=2, include_dashboard=False, log_to_driver=False,
                                 namespace="specdraft-tenants", _node_ip_address="127.0.0.1"))
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    t0 = time.perf_counter()
    try:
        result = compare(f"http://127.0.0.1:{port}", model, args.turns, args.max_tokens)
    finally:
        serve.shutdown()
        ray.shutdown()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    acc = result["accepted_tokens"]
    print(f"\naccepted draft tokens ({args.turns} tasks x <= {args.max_tokens} tokens): {acc}; "
          f"identical to no speculation: {result['identical']}; B pulled "
          f"{result['b_pulled_tokens']} tokens")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    ok = (result["identical"] and result["errors"] == 0
          and acc["b_on_replica_b"] <= acc["a_cold"] and acc["unsalted_on_replica_b"] <= acc["a_cold"]
          and acc["a_repeat_on_replica_b"] > acc["a_cold"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
