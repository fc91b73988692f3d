"""The shared suffix cache across replicas, on a real local Ray cluster started here.

Replicas are Ray actors holding the engine-agnostic drafter (what each vLLM replica's proposer
holds), driven by a greedy verifier that knows the target's output: a draft is accepted up to its
first wrong token, then the target's token is emitted, as a greedy engine would. The same with
two vLLM CPU replicas is ``examples/ray_serve_two_replicas.py`` (README, "Ray Serve"): it fits
2 cores but takes about 8 minutes, too long for CI.
"""

from __future__ import annotations

import inspect
import json
import os

import pytest

ray = pytest.importorskip("ray", reason="the [ray] extra is installed by scripts/setup.sh")

from conftest import start_local_ray  # noqa: E402
from specdraft.adapters import ray_store  # noqa: E402
from specdraft.proposers import shared_cache  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    # Ray kills workers when the whole machine is short of memory, whoever holds it; these
    # tests' own processes are small, so a busy shared machine must not fail them.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    start_local_ray(lambda: dict(num_cpus=2, include_dashboard=False, namespace="specdraft-test",
                                 log_to_driver=False, _node_ip_address="127.0.0.1",
                                 runtime_env={"env_vars": {"PYTHONNOUSERSITE": "1"}}))
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Replica:
    """One replica's drafter, serving requests whose greedy outputs are known."""

    def __init__(self, options: dict):
        from specdraft.proposers import make_drafter

        self.drafter = make_drafter(options, chain_only=True, vocab_size=256)
        self.n = 0

    def serve(self, prompt: list[int], output: list[int], budget: int = 16,
              scope: str | None = None) -> dict:
        req = f"r{self.n}"
        self.n += 1
        d = self.drafter
        d.start(req, prompt, scope=scope)
        pos = accepted = drafted = 0
        emitted: list[int] = []
        while pos < len(output):
            draft = [int(t) for t in d.draft(req, budget).token_ids]
            k = 0
            while k < len(draft) and pos + k < len(output) and draft[k] == output[pos + k]:
                k += 1
            step = output[pos:pos + k + 1]
            d.extend(req, step, k if draft else None)
            emitted += step
            pos += len(step)
            accepted += k
            drafted += len(draft)
        d.finish(req)
        return {"accepted": accepted, "drafted": drafted, "output": emitted}

    def sync(self) -> bool:
        client = getattr(self.drafter, "client", None)
        return True if client is None else client.flush()

    def counters(self) -> dict:
        m = self.drafter.metrics()
        return {k: v for k, v in m.items() if k.startswith(("shared_cache", "global_cache"))}


def _tokens(text: str) -> list[int]:
    return list(text.encode())


def _session(turns: int) -> list[tuple[list[int], list[int]]]:
    """An agentic edit loop: each turn asks for one more change and the agent answers with the
    whole file again. Prompts do not hold the file, so only earlier answers can be drafted from."""
    lines = inspect.getsource(json.dumps).splitlines()[:40]
    out = []
    for t in range(1, turns + 1):
        for i in range(t):
            lines[3 + 5 * i] = lines[3 + 5 * i].rstrip() + f"  # edit {i + 1}"
        out.append((_tokens(f"Turn {t}: add edit {t} and show the file.\n"),
                    _tokens("\n".join(lines) + "\n")))
        lines = inspect.getsource(json.dumps).splitlines()[:40]
    return out


def _options(name: str | None) -> dict:
    opts = {"native": "auto", "adaptive": False}
    if name:
        opts["shared_cache"] = {"name": name, "tokens": 200_000, "pull_interval_s": 0.05,
                                "detached": False}
    return opts


def _run_pair(name: str | None) -> dict:
    a, b = Replica.remote(_options(name)), Replica.remote(_options(name))
    session = _session(4)
    on_a = [ray.get(a.serve.remote(p, o)) for p, o in session[:3]]
    ray.get(a.sync.remote())
    ray.get(b.sync.remote())
    on_b = ray.get(b.serve.remote(*session[3]))
    result = {"a": on_a, "b": on_b, "b_counters": ray.get(b.counters.remote()),
              "a_counters": ray.get(a.counters.remote()), "expected": session[3][1]}
    for r in (a, b):
        ray.kill(r)
    return result


def test_replica_b_drafts_from_what_replica_a_served(cluster):
    alone = _run_pair(None)
    shared = _run_pair("test-share")
    out_tokens = len(shared["expected"])
    print(f"\nreplica B, turn 4 ({out_tokens} tokens): accepted {shared['b']['accepted']} with the "
          f"shared cache, {alone['b']['accepted']} without")
    fb = shared["b_counters"]
    print(f"replica B counters: {fb}\nreplica A counters: {shared['a_counters']}")
    print(f"replica B: {fb['shared_cache_pulls']} pulls, mean round trip "
          f"{1e3 * fb['shared_cache_pull_seconds'] / max(1, fb['shared_cache_pulls']):.2f} ms")
    assert shared["b"]["output"] == alone["b"]["output"] == shared["expected"]
    assert shared["a_counters"]["shared_cache_published_tokens"] == sum(
        len(o) for _, o in _session(4)[:3])
    # each sequence once, though a busy machine makes calls time out and publishes be sent again
    assert fb["shared_cache_pulled_tokens"] == shared["a_counters"]["shared_cache_published_tokens"]
    assert shared["b"]["accepted"] > alone["b"]["accepted"] + 0.3 * out_tokens
    assert shared["b"]["accepted"] > 0.8 * out_tokens


def test_shared_sequences_stay_in_their_tenant_scope(cluster):
    """Replica A serves a tenant's session; on replica B another tenant and an unscoped request
    asking the last turn draft nothing from it, the same tenant drafts most of it."""
    a, b = Replica.remote(_options("test-scopes")), Replica.remote(_options("test-scopes"))
    session = _session(4)
    for p, o in session[:3]:
        ray.get(a.serve.remote(p, o, 16, "tenant-a"))
    ray.get(a.sync.remote())
    ray.get(b.sync.remote())
    last = session[3]
    fresh = Replica.remote(_options(None))
    cold = ray.get(fresh.serve.remote(*last, 16, "tenant-a"))
    other = ray.get(b.serve.remote(*last, 16, "tenant-b"))
    unscoped = ray.get(b.serve.remote(*last, 16, None))
    same = ray.get(b.serve.remote(*last, 16, "tenant-a"))
    print(f"\nreplica B, turn 4: accepted {cold['accepted']} alone, {other['accepted']} as "
          f"tenant-b, {unscoped['accepted']} unscoped, {same['accepted']} as tenant-a")
    assert other["output"] == unscoped["output"] == same["output"] == last[1]
    assert other["accepted"] == unscoped["accepted"] == cold["accepted"]
    assert same["accepted"] > 0.8 * len(last[1])
    for r in (a, b, fresh):
        ray.kill(r)


def _stats_once_up(name: str, timeout: float = 60.0) -> dict:
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get(ray.get_actor(name, namespace="specdraft").stats.remote(), timeout=5)
        except (ray.exceptions.RayError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_killing_the_store_keeps_serving_and_it_restarts_empty(cluster):
    name = "test-kill"
    a = Replica.remote(_options(name))
    session = _session(4)
    expected = [o for _, o in session]
    assert ray.get(a.serve.remote(*session[0]))["output"] == expected[0]
    assert ray.get(a.sync.remote())
    store = ray.get_actor(name, namespace="specdraft")
    assert ray.get(store.stats.remote())["tokens"] == len(expected[0])
    ray.kill(store, no_restart=False)  # the process dies; Ray restarts the actor
    for (prompt, output) in session[1:]:
        assert ray.get(a.serve.remote(prompt, output))["output"] == output
    stats = _stats_once_up(name)
    assert ray.get(a.sync.remote())
    counters = ray.get(a.counters.remote())
    # the restarted store is empty but for what was published after the restart
    assert stats["tokens"] <= sum(len(o) for o in expected[1:])
    assert counters["shared_cache_restarts_seen"] == 1
    assert counters["shared_cache_errors"] + counters["shared_cache_restarts_seen"] >= 1
    print(f"\nstore killed: client errors {counters['shared_cache_errors']}, restarts seen "
          f"{counters['shared_cache_restarts_seen']}, store tokens after restart {stats['tokens']}")
    ray.kill(a)


def test_store_stays_within_its_budget(cluster):
    budget = 5_000
    store = ray_store.store_actor_class().options(num_cpus=0).remote(budget)
    seqs = [list(range(i % 50, i % 50 + 100)) for i in range(500)]  # 10x the budget
    for k in range(0, len(seqs), 50):
        tokens = ray.get(store.publish.remote("x", seqs[k:k + 50]))
        assert tokens <= budget
    stats = ray.get(store.stats.remote())
    assert stats["tokens"] <= budget and stats["published"] == 500 and stats["evicted"] > 0
    _, _, pulled = ray.get(store.pull.remote(-1, "y"))
    assert sum(len(s) for _, s in pulled) == stats["tokens"]  # what is held is what is pulled
    assert {k for k, _ in pulled} == {None}  # (scope, tokens): published without scopes


def test_published_bytes_per_token():
    import pickle

    import numpy as np

    n = 2000
    size = len(pickle.dumps(np.asarray(list(range(n)), dtype=np.int32), protocol=5))
    print(f"\none published sequence of {n} tokens: {size} bytes ({size / n:.2f} per token)")
    assert size <= shared_cache.BYTES_PER_TOKEN * n + 200


def test_bad_shared_cache_options_are_named():
    from specdraft.proposers import DrafterConfig, SpecdraftConfigError

    with pytest.raises(SpecdraftConfigError, match=r"shared_cache.tokens=0.*integer > 0"):
        DrafterConfig.from_dict({"shared_cache": {"name": "x", "tokens": 0}})
    with pytest.raises(SpecdraftConfigError, match=r"needs shared_cache.name"):
        DrafterConfig.from_dict({"shared_cache": {"tokens": 10}})
    with pytest.raises(SpecdraftConfigError, match=r"shared_cache.pull_every"):
        DrafterConfig.from_dict({"shared_cache": {"name": "x", "tokens": 1, "pull_every": 1}})
