"""The shared cache's client over an in-process transport to a real ``SharedCacheStore`` (the
Ray transport, ``specdraft.adapters.ray_store``, is tested in integration_tests)."""

from __future__ import annotations

import subprocess
import sys

from specdraft.proposers.shared_cache import SharedCacheClient, SharedCacheStore, validate_options


class InProcessLink:
    """The two calls a replica makes on the store, made directly."""

    def __init__(self, store: SharedCacheStore):
        self.store = store

    def publish(self, origin, arrays, scopes, first, timeout):
        return self.store.publish(origin, arrays, scopes, first)

    def pull(self, cursor, origin, budget, timeout):
        return self.store.pull(cursor, origin, budget)

    def lost(self, error):
        return True


def test_a_replica_receives_what_another_published_in_its_scope():
    store = SharedCacheStore(10_000)
    opts = validate_options({"name": "t", "tokens": 10_000, "pull_interval_s": 0.01})
    a, b = (SharedCacheClient(opts, origin=o, connect=lambda o_, s_: InProcessLink(store))
            for o in ("a", "b"))
    try:
        a.publish([1, 2, 3, 4], "tenant-a")
        a.publish([5, 6, 7])
        assert a.flush(10) and b.flush(10)
        got = b.drain()
        assert [(s, list(map(int, t))) for s, t in got] == [
            ("tenant-a", [1, 2, 3, 4]), (None, [5, 6, 7])]  # in the store's order
        assert a.drain() == []  # never its own sequences back
        assert a.counters["shared_cache_published_tokens"] == 7
    finally:
        a.close()
        b.close()


def test_the_shared_cache_module_imports_no_cluster_framework():
    code = ("import sys, specdraft.proposers.shared_cache, specdraft.proposers; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def _replica(store: SharedCacheStore, origin: str, options: dict | None = None):
    from specdraft.proposers.drafter import SpecDrafter
    from specdraft.proposers.shared_cache import SharedCacheDrafter

    opts = validate_options({"name": "t", "tokens": 10_000, "pull_interval_s": 0.01})
    client = SharedCacheClient(opts, origin=origin, connect=lambda o_, s_: InProcessLink(store))
    drafter = SpecDrafter({"native": True, "adaptive": False, **(options or {})}, vocab_size=50)
    return SharedCacheDrafter(drafter, opts, client)


def test_the_step_publishes_the_requests_it_finishes():
    """With the shared cache on, the requests ``SpecDrafter.step`` finishes (those the engine
    reported, and those finished in the step that ended them) reach the store and, through it,
    another replica's global cache in their scope."""
    import numpy as np

    store = SharedCacheStore(10_000)
    a, b = _replica(store, "a"), _replica(store, "b")
    try:
        prompts = {"r1": [1, 2, 3, 4, 5], "r2": [6, 7]}
        outputs = {"r1": [], "r2": []}
        a.set_scope("r1", "tenant")  # as the vLLM hooks do before a request's first row

        def step(emitted: dict, finished=()):
            ids = list(emitted)
            for r in ids:
                outputs[r] += emitted[r]
            hist = [prompts[r] + outputs[r] for r in ids]
            buf = np.zeros((max(1, len(ids)), 32), dtype=np.int32)
            for i, h in enumerate(hist):
                buf[i, :len(h)] = h
            return a.step(ids, buf, [len(h) for h in hist], [len(prompts[r]) for r in ids], 4,
                          finished=list(finished), max_len=31)

        step({"r1": [10], "r2": [20]})
        step({"r1": [11], "r2": [21]})
        step({"r1": [12], "r2": [22]})
        a.finish("r1")                  # r1's third output token ended it (the adapter's rule)
        assert not a.has("r1") and a.has("r2")
        step({}, finished=["r2"])       # the engine reports r2 finished
        assert a.client.flush(10) and b.client.flush(10)
        _, _, held = store.pull(-1, "someone else")
        assert [(k, list(map(int, t))) for k, t in held] == [
            ("tenant", [10, 11, 12]), (None, [20, 21, 22])]
        assert a.metrics()["shared_cache_published_tokens"] == 6
        assert b.drafter.core.global_tokens() == 6
        assert b.drafter._next == 0  # pulled sequences drew no request handle
        b.start("q", [10, 11], scope="tenant")
        assert b.draft("q", 4).token_ids[:1] == [12]
        b.extend("q", [12])
        b.finish("q")
        assert b.client.flush(10)
        assert store.published == 3  # b published its own request, not what it pulled
        assert b.metrics()["shared_cache_published_tokens"] == 1
    finally:
        a.close()
        b.close()


def test_requests_served_per_request_or_by_step_are_published_alike():
    """The Python core exports too: per-request calls and SpecDrafter.step publish the same."""
    import numpy as np

    store = SharedCacheStore(10_000)
    a = _replica(store, "a", {"native": False, "cache_prompts": True})
    try:
        a.start("x", [1, 2], scope="s")
        a.extend("x", [3, 4])
        a.finish("x")
        a.start("y", [5])
        a.abort("y")  # aborted requests are not published
        buf = np.array([[7, 8, 9, 0]], dtype=np.int32)
        a.step(["z"], buf, [2], [2], 0)
        a.step(["z"], buf, [3], [2], 0)
        a.step([], buf[:0], [], [], 0, finished=["z"])
        assert a.client.flush(10)
        _, _, held = store.pull(-1, "someone else")
        assert [(k, list(map(int, t))) for k, t in held] == [("s", [1, 2, 3, 4]), (None, [7, 8, 9])]
    finally:
        a.close()


def test_a_batch_sent_again_after_a_timeout_is_taken_once():
    # a publish whose reply timed out is sent again with the batch's same first index (and
    # whatever was queued since): the store takes only the sequences it did not have
    store = SharedCacheStore(10_000)
    store.publish("a", [[1, 2], [3, 4]], None, 0)
    store.publish("a", [[1, 2], [3, 4], [5, 6]], None, 0)  # the retry, one more queued
    store.publish("a", [[7, 8]], None, 3)
    store.publish("b", [[1, 2]], None, 0)  # another origin counts apart
    _, _, got = store.pull(-1, "c")
    assert [list(s) for _, s in got] == [[1, 2], [3, 4], [5, 6], [7, 8], [1, 2]]
    assert store.tokens == 10
    fresh = SharedCacheStore(10_000)  # a restarted store takes a client's next batch whole
    fresh.publish("a", [[9, 9]], None, 4)
    assert [list(s) for _, s in fresh.pull(-1, "c")[2]] == [[9, 9]]
