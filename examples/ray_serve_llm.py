"""A Ray Serve LLM application whose vLLM replicas draft with specdraft, OpenAI-compatible.

    bash scripts/setup.sh      # CPU: vLLM's CPU build + ray[serve]; elsewhere: pip install 'dist/specdraft-*.whl[ray]' (README, Install)
    python examples/ray_serve_llm.py [--model PATH] [--replicas 2] [--shared-cache NAME]

It starts (or joins, with RAY_ADDRESS) a Ray cluster, serves the model at
http://127.0.0.1:8000/v1 (model id "specdraft-model"), sends a repeated session (every prompt
twice: what an agent loop re-running a task looks like) and prints, per replica, the draft and
accepted tokens from each replica's ``specdraft:*`` metrics. With ``--shared-cache NAME`` every
replica publishes finished requests to one cache (a Ray actor named NAME) and drafts from what
the others served; without it each replica learns only from its own requests.
``--keep`` leaves the application running (query it with any OpenAI client).

specdraft must import in every replica: here it is the installed package (vLLM finds its
plugin through the entry point); on a multi-node cluster install it on every node or pass
``runtime_env={"py_modules": [...]}`` to ``llm_config``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python class for a stack with push, pop and peek.",
    "Explain what a hash map is in three sentences.",
    "Write a SQL query that counts orders per customer.",
    "Write a bash loop that prints the numbers 1 to 10.",
    "List five uses of the Python itertools module.",
]


def chat(base: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"model": "specdraft-model", "temperature": 0.0, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def replica_counters(handle, replicas: int, tries: int = 40) -> dict[int, dict[str, float]]:
    """{replica pid: specdraft counters}, asking until every replica has answered."""
    from specdraft.plugins.ray_serve import metric_sums

    seen: dict[int, dict[str, float]] = {}
    for _ in range(tries):
        pid, text = handle.specdraft_replica_metrics.remote().result()
        seen[pid] = {name.removeprefix("specdraft:"): value
                     for name, value in metric_sums(text).items()}
        if len(seen) >= replicas:
            break
    return seen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="model folder or id (default: specdraft's SmolLM2-135M)")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--shared-cache", metavar="NAME", help="share one suffix cache (Ray actor)")
    p.add_argument("--cache-tokens", type=int, default=4_000_000)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--keep", action="store_true", help="leave the application running")
    args = p.parse_args()

    import ray
    from ray import serve

    from specdraft.plugins.ray_serve import build_app, llm_config, start_local_ray

    model = args.model
    if model is None:
        from specdraft.models import model_path

        model = model_path("smollm2-135m")
    address = os.environ.get("RAY_ADDRESS")
    start_local_ray(lambda: dict(address=address, log_to_driver=False, include_dashboard=False,
                                 num_cpus=None if address else len(os.sched_getaffinity(0))))
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    cpus = ray.cluster_resources().get("CPU", 1)
    specdraft = ({"shared_cache": {"name": args.shared_cache, "tokens": args.cache_tokens}}
                 if args.shared_cache else None)
    config = llm_config(
        model, proposer="SuffixProposer", num_speculative_tokens=8, specdraft=specdraft,
        replicas=args.replicas,
        engine_kwargs={"dtype": "float32", "enforce_eager": True, "max_model_len": 2048,
                       "max_num_seqs": 8, "kv_cache_memory_bytes": 256 * 2**20, "seed": 0},
        # several replicas on one small machine: Ray's default (1 CPU for the replica actor + 1
        # for its engine's bundle) schedules one replica per 2 CPUs; fractions fit them all
        replica_cpus=min(1.0, cpus / (2 * args.replicas)) if args.replicas > 1 else None,
        engine_cpus=min(1.0, cpus / (4 * args.replicas)) if args.replicas > 1 else None,
        runtime_env={"env_vars": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}})
    base = f"http://127.0.0.1:{args.port}"
    t0 = time.perf_counter()
    serve.run(build_app(config), name="specdraft", route_prefix="/")
    print(f"serving at {base}/v1 ({args.replicas} replica(s), shared cache: "
          f"{args.shared_cache or 'off'}), up in {time.perf_counter() - t0:.0f}s")

    handle = serve.get_deployment_handle("SpecdraftLLMServer:specdraft-model",
                                         app_name="specdraft")
    outputs = {}
    for rnd in (1, 2):
        before = replica_counters(handle, args.replicas)
        t0 = time.perf_counter()
        for prompt in PROMPTS:
            text = chat(base, prompt, args.max_tokens)["choices"][0]["message"]["content"]
            assert outputs.setdefault(prompt, text) == text, "greedy outputs differ between rounds"
        if args.shared_cache:
            time.sleep(1.0)  # eventual: pulls happen every pull_interval_s
        after = replica_counters(handle, args.replicas)
        print(f"round {rnd}: {len(PROMPTS)} requests in {time.perf_counter() - t0:.1f}s")
        print(f"  {'replica':>8} {'drafted':>8} {'accepted':>9} {'pulled':>7} {'published':>10}")
        for pid, fig in sorted(after.items()):
            b = before.get(pid, {})

            def d(k, fig=fig, b=b):
                return int(fig.get(k, 0) - b.get(k, 0))

            print(f"  {pid:>8} {d('draft_tokens_total'):>8} {d('accepted_tokens_total'):>9} "
                  f"{d('shared_cache_pulled_tokens_total'):>7} "
                  f"{d('shared_cache_published_tokens_total'):>10}")
    if not args.keep:
        serve.shutdown()


if __name__ == "__main__":
    main()
