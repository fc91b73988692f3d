"""specdraft's counters, from the vLLM worker that drafts to the process that serves /metrics.

The proposer runs in a worker process; Prometheus is served by vLLM's API-server process
(process 0). The worker publishes a small JSON snapshot of cumulative counters into a directory
that process 0 created for this engine; a Prometheus collector in process 0 reads it at scrape
time, so /metrics shows specdraft's counters next to vLLM's ``vllm:spec_decode_*`` counters.
Nothing here runs in the worker's step: the proposer hands over a dict, or only says that its
counters changed and a daemon thread builds the dict (``source``) and writes it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Iterator

PREFIX = "specdraft:"
SNAPSHOT_NAME = "tp0.json"  # every tensor-parallel rank drafts the same; rank 0 publishes


def read_snapshot(metrics_dir: str | None) -> dict | None:
    if not metrics_dir:
        return None
    try:
        with open(os.path.join(metrics_dir, SNAPSHOT_NAME)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class SnapshotWriter:
    """Writes the latest published snapshot at most every ``interval`` seconds, off the step."""

    def __init__(self, metrics_dir: str, interval: float = 0.25, source: Any = None):
        self.path = os.path.join(metrics_dir, SNAPSHOT_NAME)
        self.interval = interval
        self.source = source  # source() -> the snapshot, called from the writer's thread
        self._changed = False
        self._latest: dict | None = None
        self._written: dict | None = None
        self._wake = threading.Event()
        threading.Thread(target=self._run, name="specdraft-metrics", daemon=True).start()

    def publish(self, snapshot: dict | None = None) -> None:
        """The latest snapshot; None: the counters changed, ``source()`` builds it when written."""
        if snapshot is None:
            self._changed = True
        else:
            self._latest = snapshot  # a reference swap: atomic under the GIL

    def flush(self) -> None:
        if self._changed and self.source is not None:
            self._changed = False
            try:
                self._latest = self.source()
            except Exception:  # noqa: BLE001 - counters are best effort; the next change retries
                self._changed = True
        latest = self._latest
        if latest is None or latest is self._written:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(latest, f)
            os.replace(tmp, self.path)
            self._written = latest
        except OSError:  # the directory went away with its engine
            pass

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self.flush()


# scope_cache_tokens series: the largest few scopes, always this many (zeros when fewer)
SCOPE_RANKS = 5


def prometheus_families(snapshot: dict, labels: dict[str, str]) -> Iterator[Any]:
    """Prometheus metric families for one engine's snapshot.

    Counters in base units (seconds), as Prometheus and vLLM name them; ratios are left to
    queries over them: time per step is ``rate(specdraft:proposer_seconds_total[5m]) /
    rate(specdraft:proposer_steps_total[5m])``, the hit rate ``rate(proposed_drafts_total) /
    rate(draft_rows_total)``. Gauges only for levels (the global cache's size)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    names = list(labels)
    values = [labels[n] for n in names]

    def counter(name: str, doc: str, value: float):
        fam = CounterMetricFamily(PREFIX + name, doc, labels=names)
        fam.add_metric(values, value)
        return fam

    def gauge(name: str, doc: str, value: float):
        fam = GaugeMetricFamily(PREFIX + name, doc, labels=names)
        fam.add_metric(values, value)
        return fam

    steps = snapshot.get("steps", 0)
    rows = snapshot.get("rows", 0)
    yield counter("proposer_steps", "Engine steps in which the specdraft proposer ran.", steps)
    yield counter("proposer_seconds", "Time spent in the specdraft proposer.",
                  snapshot.get("proposer_seconds", 0.0))
    yield counter("draft_rows", "Requests asked for a draft (one per request per step).", rows)
    proposed = snapshot.get("proposed_drafts", 0)
    yield counter("proposed_drafts", "Requests given a non-empty draft by the proposer (vLLM "
                  "drops some: requests that finished in that step).", proposed)
    yield counter("proposed_draft_tokens", "Draft tokens the proposer handed to vLLM.",
                  snapshot.get("proposed_draft_tokens", 0))
    yield counter("drafts", "Drafts vLLM verified (counted as vllm:spec_decode_num_drafts).",
                  snapshot.get("drafts", 0))
    yield counter("draft_tokens", "Draft tokens vLLM verified (counted as "
                  "vllm:spec_decode_num_draft_tokens).", snapshot.get("draft_tokens", 0))
    yield counter("accepted_tokens", "Draft tokens the target accepted (counted as "
                  "vllm:spec_decode_num_accepted_tokens).", snapshot.get("accepted_tokens", 0))
    lengths = CounterMetricFamily(PREFIX + "draft_length",
                                  "Chosen draft lengths (0 = no draft) per request and step.",
                                  labels=names + ["length"])
    for k, count in enumerate(snapshot.get("draft_length_counts", [])):
        lengths.add_metric(values + [str(k)], count)
    yield lengths
    yield counter("errors", "Proposer failures (the step went on without drafts).",
                  snapshot.get("errors", 0))
    events = CounterMetricFamily(PREFIX + "requests", "Request events seen by the drafter.",
                                 labels=names + ["event"])
    for event in ("started", "finished", "aborted"):
        events.add_metric(values + [event], snapshot.get(f"requests_{event}", 0))
    yield events
    yield gauge("global_cache_tokens", "Tokens held in the global (cross-request) cache.",
                snapshot.get("global_cache_tokens", 0))
    yield gauge("global_cache_bytes", "Memory held by the global cache, bytes.",
                snapshot.get("global_cache_bytes", 0))
    yield gauge("cache_scopes", "Tenant scopes (cache_salt values) whose global caches are "
                "held; the unsalted pool is not counted.", snapshot.get("cache_scopes", 0))
    top = GaugeMetricFamily(PREFIX + "scope_cache_tokens",
                            "Tokens held by the largest tenant scopes' global caches, by rank "
                            "(1 = largest; ranks, never tenant names).", labels=names + ["rank"])
    tops = list(snapshot.get("scope_cache_tokens_top", []))
    for rank in range(SCOPE_RANKS):
        top.add_metric(values + [str(rank + 1)], tops[rank] if rank < len(tops) else 0)
    yield top
    if "shared_cache_errors" in snapshot:  # the shared cache is on
        for name, doc in (("published_tokens", "Tokens this engine published to the shared cache."),
                          ("pulled_tokens", "Tokens this engine pulled from the shared cache."),
                          ("errors", "Failed exchanges with the shared cache (drafting went on)."),
                          ("restarts_seen", "Times the shared cache came back empty (restarted).")):
            yield counter(f"shared_cache_{name}", doc, snapshot.get(f"shared_cache_{name}", 0))
        yield gauge("shared_cache_store_tokens", "Tokens held by the shared cache, last seen.",
                    snapshot.get("shared_cache_store_tokens", 0))
    yield gauge("request_identity", "1 when the proposer sees vLLM's request ids, 0 when it "
                "drafts statelessly (hook unavailable).", 1.0 if snapshot.get("tracked") else 0.0)


class SpecdraftCollector:
    """Registered once per process 0; one source per engine that uses a specdraft proposer."""

    _instance: "SpecdraftCollector | None" = None
    _lock = threading.Lock()

    def __init__(self):
        self.sources: list[tuple[str, dict[str, str]]] = []

    @classmethod
    def add_source(cls, metrics_dir: str, labels: dict[str, str]) -> None:
        with cls._lock:
            if cls._instance is None:
                from prometheus_client import REGISTRY

                cls._instance = SpecdraftCollector()
                REGISTRY.register(cls._instance)
            cls._instance.sources.append((metrics_dir, labels))

    @classmethod
    def families(cls) -> list[Any]:
        """This process's ``specdraft:*`` metric families (none before an engine with a
        specdraft proposer started here): what /metrics shows, for other exporters."""
        instance = cls._instance
        return list(instance.collect()) if instance is not None else []

    def describe(self):
        return []  # names are only known at collect time; no registration-time collision check

    def collect(self):
        merged: dict[str, Any] = {}
        for metrics_dir, labels in list(self.sources):
            snapshot = read_snapshot(metrics_dir) or {}  # zeros until the worker publishes
            for fam in prometheus_families(snapshot, labels):
                if fam.name in merged:
                    merged[fam.name].samples.extend(fam.samples)
                else:
                    merged[fam.name] = fam
        yield from merged.values()


def new_metrics_dir() -> str:
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="specdraft-vllm-")
    atexit.register(shutil.rmtree, path, True)
    return path


def wait_for_snapshot(metrics_dir: str | None, predicate=lambda s: True,
                      timeout: float = 5.0) -> dict | None:
    """The newest snapshot satisfying ``predicate`` (counters trail the engine by ~0.25 s)."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = read_snapshot(metrics_dir)
        if snapshot is not None and predicate(snapshot):
            return snapshot
        if time.monotonic() > deadline:
            return snapshot
        time.sleep(0.05)
