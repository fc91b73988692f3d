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

    def publish(self, origin, arrays, scopes, timeout):
        return self.store.publish(origin, arrays, scopes)

    def pull(self, cursor, origin, budget, timeout):
        return self.store.pull(cursor, origin, budget)


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
        assert a.figures["shared_cache_published_tokens"] == 7
    finally:
        a.close()
        b.close()


def test_the_shared_cache_module_imports_no_cluster_framework():
    code = ("import sys, specdraft.proposers.shared_cache, specdraft.proposers; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
