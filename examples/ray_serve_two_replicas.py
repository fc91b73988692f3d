"""Two vLLM replicas behind one Ray Serve LLM endpoint, with and without specdraft's shared cache.

    python examples/ray_serve_two_replicas.py [--session edit|tasks] [--turns 3]
        [--max-tokens 128] [--json out.json]

A repeated agentic session (an agent re-running a task: the same turns twice) is served by two
vLLM CPU replicas, A and B, routed deterministically by model id ("replica-a", "replica-b": two
``LLMConfig``s behind one OpenAI ingress, one replica each). The first run and the repeat's
earlier turns go to A; the repeat's last turn goes to B. Without the shared cache B drafts only
from its own requests (the turn's prompt); with it, B also drafts from what A served, pulled from
the cache. The table gives B's drafted and accepted tokens on that turn (B's ``specdraft:*``
counters, which count what vLLM verified) in both runs; every output is checked token for token
against a deployment without speculation (greedy, float32); the exit status is 1 if one differs.

Sessions: ``edit`` is one conversation over a small file (each request carries the history, so
the file is in every prompt and B can draft much of its answer from its prompt alone); ``tasks``
is separate requests that send only the task (the earlier answers are in no prompt).

It starts a local Ray cluster on this machine (HTTP on 127.0.0.1) and fits two replicas on two
CPUs with fractional resources: each replica actor asks for 0.5 CPU and its engine's placement
bundle for 0.25 (Ray's default, 1 + 1 CPU per replica, leaves the second replica unscheduled on a
2-CPU machine). SmolLM2-135M in float32, 128 MiB of KV cache per engine: about 7 GiB in all,
8 minutes on a busy 2-core machine (three deployments start: plain, without and with sharing).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import socket
import sys
import time
import uuid

REPLICA_CPUS = 0.5   # the replica actor (Serve's LLMServer)
ENGINE_CPUS = 0.25   # the vLLM engine's placement bundle
ENGINE = {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048, "max_num_seqs": 2,
          "kv_cache_memory_bytes": 128 * 2**20, "seed": 0, "max_num_batched_tokens": 512}


TASKS = ["Write a Python function `slugify(title)` that lowercases a title and joins its words "
         "with dashes.",
         "Write a Python function `word_counts(text)` that returns a dict of word frequencies.",
         "Write a Python class `Stack` with push, pop, peek and is_empty methods.",
         "Write a Python function that reads a CSV file and returns its rows as dicts."]


def session(turns: int, kind: str = "edit") -> list[str]:
    """``edit``: a conversation (each request carries the history). ``tasks``: separate requests
    (tool-style calls that send only the task, not the earlier answers)."""
    if kind == "tasks":
        return [TASKS[t % len(TASKS)] for t in range(turns)]
    return edit_session(turns)


def edit_session(turns: int) -> list[str]:
    """The user's messages of an edit loop over one small file: changes to the file, then (the last
    turn) tests for it, an answer whose text is not in the conversation yet."""
    import textwrap

    code = textwrap.dedent(inspect.getsource(textwrap.indent))
    edits = ["Add a docstring line to the inner function and show the whole file.",
             "Rename the argument `prefix` to `lead` everywhere and show the whole file.",
             "Add type hints to every argument and show the whole file."]
    asks = [edits[t % len(edits)] for t in range(turns - 1)]
    asks.append("Now write three pytest unit tests for this function.")
    asks[0] = f"Here is a Python file:\n```python\n{code}```\n{asks[0]}"
    return asks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_json(url: str, body: dict, timeout: float = 600) -> dict:
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def chat(base: str, model: str, messages: list[dict], max_tokens: int) -> tuple[str, list[int]]:
    out = post_json(f"{base}/v1/chat/completions", {
        "model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
        "return_token_ids": True})
    choice = out["choices"][0]
    return choice["message"]["content"], choice["token_ids"]


def counters(handle) -> dict[str, float]:
    """A replica's ``specdraft:*`` counters (summed over labels), named without the prefix."""
    from specdraft.plugins.ray_serve import metric_sums

    sums = metric_sums(handle.specdraft_metrics.remote().result())
    return {name.removeprefix("specdraft:"): value for name, value in sums.items()}


def deploy(base: str, app: str, configs: list, timeout: float = 900) -> None:
    from ray import serve

    from specdraft.plugins.ray_serve import build_app

    serve.run(build_app(*configs), name=app, route_prefix="/", blocking=False)
    deadline = time.monotonic() + timeout
    want = {c.model_id for c in configs}
    while True:
        try:
            import urllib.request

            with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as r:
                if want <= {m["id"] for m in json.load(r)["data"]}:
                    status = serve.status().applications[app].status
                    if status == "RUNNING":
                        return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Serve application {app!r} did not come up in {timeout:.0f}s")
        time.sleep(1)


def config(model_path: str, model_id: str, specdraft: dict | None, proposer: str | None):
    from specdraft.plugins.ray_serve import llm_config

    return llm_config(model_path, model_id=model_id, proposer=proposer, num_speculative_tokens=8,
                      specdraft=specdraft, engine_kwargs=dict(ENGINE),
                      replica_cpus=REPLICA_CPUS, engine_cpus=ENGINE_CPUS,
                      runtime_env={"env_vars": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}})


def run_session(base: str, models: list[str], asks: list[str], max_tokens: int,
                texts: list[str] | None = None, history: bool = True) -> list[list[int]]:
    """One pass of the session, turn t served by ``models[t]``; with ``history`` every request
    carries the earlier turns and answers."""
    messages: list[dict] = []
    outputs = []
    for model, ask in zip(models, asks):
        if not history:
            messages = []
        messages.append({"role": "user", "content": ask})
        text, tokens = chat(base, model, messages, max_tokens)
        messages.append({"role": "assistant", "content": text})
        outputs.append(tokens)
        if texts is not None:
            texts.append(text)
    return outputs


def reference(base: str, model_path: str, asks: list[str], max_tokens: int, history: bool,
              texts: list[str] | None = None) -> list[list[int]]:
    """The session's greedy outputs without speculation."""
    from ray import serve

    deploy(base, "plain", [config(model_path, "plain", None, None)])
    try:
        return run_session(base, ["plain"] * len(asks), asks, max_tokens, texts, history)
    finally:
        serve.delete("plain")


def two_replicas(base: str, model_path: str, asks: list[str], max_tokens: int, history: bool,
                 shared: bool, expected: list[list[int]]) -> dict:
    """The repeated session on replicas A and B, the shared cache on or off: B's counters on the
    repeat's last turn, and whether every output equals ``expected``."""
    from ray import serve

    name = f"two-replicas-{uuid.uuid4().hex[:8]}"
    # detached: the store's life is not tied to whichever engine process created it (removed
    # below, with the application)
    opts = ({"shared_cache": {"name": name, "tokens": 1_000_000, "pull_interval_s": 0.1}}
            if shared else None)
    app = "shared" if shared else "alone"
    t0 = time.perf_counter()
    deploy(base, app, [config(model_path, "replica-a", opts, "SuffixProposer"),
                       config(model_path, "replica-b", opts, "SuffixProposer")])
    up = time.perf_counter() - t0
    try:
        a = serve.get_deployment_handle("SpecdraftLLMServer:replica-a", app_name=app)
        b = serve.get_deployment_handle("SpecdraftLLMServer:replica-b", app_name=app)
        n = len(asks)
        first = run_session(base, ["replica-a"] * n, asks, max_tokens, history=history)
        if shared:  # B pulls what A published (eventual: about one pull interval)
            store = _store(name)
            deadline = time.monotonic() + 60
            while _store_tokens(store) < sum(len(o) for o in first):
                if time.monotonic() > deadline:
                    raise RuntimeError("replica A's requests never reached the shared cache")
                time.sleep(0.2)
            time.sleep(1.0)
        b_before = counters(b)
        t1 = time.perf_counter()
        repeat = run_session(base, ["replica-a"] * (n - 1) + ["replica-b"], asks, max_tokens,
                             history=history)
        seconds = time.perf_counter() - t1
        b_after, a_fig = counters(b), counters(a)
        # what the store holds (A's counters lag: they refresh on A's engine steps)
        held = _store_tokens(_store(name)) if shared else 0
        d = {k: b_after.get(k, 0) - b_before.get(k, 0) for k in b_after}
        return {
            "shared": shared, "startup_s": round(up, 1), "repeat_s": round(seconds, 1),
            "identical": first == expected and repeat == expected,
            "b_output_tokens": len(repeat[-1]),
            "b_drafts": int(d.get("drafts_total", 0)),
            "b_draft_tokens": int(d.get("draft_tokens_total", 0)),
            "b_accepted_tokens": int(d.get("accepted_tokens_total", 0)),
            "b_pulled_tokens": int(b_after.get("shared_cache_pulled_tokens_total", 0)),
            "store_tokens": held,
            "a_published_tokens": int(a_fig.get("shared_cache_published_tokens_total", 0)),
            "a_accepted_tokens": int(a_fig.get("accepted_tokens_total", 0)),
            "errors": int(b_after.get("errors_total", 0) + a_fig.get("errors_total", 0)),
        }
    finally:
        serve.delete(app)
        if shared:
            _remove_store(name)


def _remove_store(name: str) -> None:
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace="specdraft"), no_restart=True)
    except ValueError:
        pass


def _store(name: str):
    import ray

    deadline = time.monotonic() + 60
    while True:
        try:
            return ray.get_actor(name, namespace="specdraft")
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _store_tokens(store) -> int:
    import ray

    return ray.get(store.stats.remote(), timeout=30)["tokens"]


def table(rows: list[dict]) -> str:
    lines = ["| shared cache | B output tokens | B drafts | B drafted | B accepted | B accepted / "
             "output | B pulled | store tokens | identical to no-spec |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {'on' if r['shared'] else 'off'} | {r['b_output_tokens']} | {r['b_drafts']} | "
            f"{r['b_draft_tokens']} | {r['b_accepted_tokens']} | "
            f"{r['b_accepted_tokens'] / max(1, r['b_output_tokens']):.2f} | "
            f"{r['b_pulled_tokens']} | {r['store_tokens']} | "
            f"{'yes' if r['identical'] else 'NO'} |")
    return "\n".join(lines)


def compare(base: str, model_path: str, turns: int, max_tokens: int, kind: str = "edit") -> dict:
    """The whole comparison on a running Serve instance at ``base``."""
    asks = session(turns, kind)
    history = kind == "edit"
    t0 = time.perf_counter()
    texts: list[str] = []
    expected = reference(base, model_path, asks, max_tokens, history, texts)
    rows = [two_replicas(base, model_path, asks, max_tokens, history, shared, expected)
            for shared in (False, True)]
    return {"session": kind, "turns": turns, "max_tokens": max_tokens,
            "reference_tokens": [len(o) for o in expected],
            "runs": rows, "seconds": round(time.perf_counter() - t0, 1), "asks": asks,
            "reference_texts": texts}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="model folder (default: specdraft's SmolLM2-135M, float32)")
    p.add_argument("--session", choices=("edit", "tasks"), default="edit",
                   help="edit: one conversation, each request carries the history (the file "
                   "being edited is in every prompt); tasks: separate requests that send only "
                   "the task (the earlier answers are in no prompt)")
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
    # Ray's memory monitor kills workers when the whole machine runs short, whoever holds the
    # memory: on a shared machine it would kill these small replicas for others' use.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    from specdraft.plugins.ray_serve import start_local_ray

    start_local_ray(lambda: dict(num_cpus=2, include_dashboard=False, log_to_driver=False,
                                 namespace="specdraft-two-replicas", _node_ip_address="127.0.0.1"))
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        result = compare(f"http://127.0.0.1:{port}", model, args.turns, args.max_tokens,
                         args.session)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(f"\nrepeated {args.session} session, {args.turns} turns x <= {args.max_tokens} tokens; the "
          f"repeat's last turn on replica B ({result['seconds']:.0f}s in all):\n")
    print(table(result["runs"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if all(r["identical"] and r["errors"] == 0 for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
