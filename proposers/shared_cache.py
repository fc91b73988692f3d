"""One suffix cache shared by every replica of a deployment, held by a named Ray actor.

The store and the client are plain Python; the transport (the Ray actor and the calls on it) is
``specdraft.adapters.ray_store``, which the client loads when it first connects.

Each replica's drafter keeps its own global cache of finished requests. With the ``shared_cache``
option, a replica also *publishes* each finished request's cached tokens to one cluster-wide
store (a named Ray actor, restarted by Ray if its process dies) and *pulls* what the other
replicas published, adding it to its own global cache. Agentic traffic spread over replicas then
drafts from every replica's history, not only from the requests one replica happened to serve.

Nothing here runs on the decoding step's critical path. The drafter's core exports each request
that finishes normally (its scope and the tokens it caches) to an outbox inside the core, so
every way of stepping the drafter publishes alike, the native engine step included; aborted
requests are not published. One background thread per replica drains that outbox, talks to the
actor, and adds the sequences it pulled to the drafter's global cache. A slow, dead or
restarting store only delays sharing: local drafting goes on meanwhile, failures are counted
(``shared_cache_errors``) and logged once per outage, and what waits to be sent is bounded by
the store's token budget (oldest dropped first, ``shared_cache_dropped_tokens``).

Tenant scopes travel with the sequences: a request's sequence is published with its scope (vLLM:
its ``cache_salt``) and lands, on every other replica, in that scope's global cache only.

Consistency is eventual: a sequence reaches other replicas' global caches within about one pull
interval on each side after the request finishes (plus the actor's round trips), in the store's
order; a replica never sees its own sequences back. The store is bounded by a token budget and
evicts oldest first; each replica's global cache keeps its own budget (``global_cache_tokens``)
and eviction. A restarted store starts empty (its generation changes and every client restarts
its cursor).

Options, under the ``"specdraft"`` key: ``"shared_cache": {"name": "my-app", "tokens": 4000000}``
plus optional ``namespace`` ("specdraft"), ``pull_interval_s`` (0.5), ``timeout_s`` (2.0),
``address`` (Ray address for processes outside Ray, default "auto"), ``detached`` (true: the
store outlives the application that created it; false: it dies with its creator).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid
from typing import Any, Sequence

from specdraft.proposers.base import SpecdraftConfigError

logger = logging.getLogger("specdraft")

OPTION = "shared_cache"
_DEFAULTS = {"namespace": "specdraft", "pull_interval_s": 0.5, "timeout_s": 2.0,
             "address": "auto", "detached": True}
_KEYS = ("name", "tokens", *_DEFAULTS)
# Bytes on the wire per published token: tokens travel as int32 arrays (plus a fixed header).
BYTES_PER_TOKEN = 4


def validate_options(value: Any) -> dict | None:
    """The ``shared_cache`` option with defaults filled in; None when off. Raises
    SpecdraftConfigError naming the option, the value and what is accepted."""
    if value is None:
        return None

    def bad(key: str, got: Any, accepted: str) -> SpecdraftConfigError:
        name = OPTION if key is None else f"{OPTION}.{key}"
        return SpecdraftConfigError(f"invalid specdraft option {name}={got!r}: accepted {accepted}")

    if not isinstance(value, dict):
        raise bad(None, value, '{"name": "<actor name>", "tokens": <budget>} (or omit it)')
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise SpecdraftConfigError(
            f"unknown specdraft option(s) {', '.join(f'{OPTION}.{k}' for k in unknown)}; "
            f"accepted: {', '.join(f'{OPTION}.{k}' for k in _KEYS)}")
    opts = {**_DEFAULTS, **value}
    for key in ("name", "tokens"):
        if key not in value:
            raise SpecdraftConfigError(f"specdraft option {OPTION} needs {OPTION}.{key} "
                                       f"(given: {value!r})")
    if not (isinstance(opts["name"], str) and opts["name"].strip()):
        raise bad("name", opts["name"], "a non-empty string (the Ray actor's name)")
    if not (isinstance(opts["namespace"], str) and opts["namespace"].strip()):
        raise bad("namespace", opts["namespace"], "a non-empty string (a Ray namespace)")
    tokens = opts["tokens"]
    if not (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0):
        raise bad("tokens", tokens, "an integer > 0 (the store's token budget)")
    for key, lo in (("pull_interval_s", 0.01), ("timeout_s", 0.01)):
        v = opts[key]
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= lo):
            raise bad(key, v, f"a number of seconds >= {lo}")
    if not (isinstance(opts["address"], str) and opts["address"]):
        raise bad("address", opts["address"], '"auto" or a Ray address such as "ray://host:10001"')
    if not isinstance(opts["detached"], bool):
        raise bad("detached", opts["detached"], "true or false")
    return opts


class SharedCacheStore:
    """The store's state: sequences in publication order, bounded by a token budget (oldest
    evicted first). Plain Python; ``specdraft.adapters.ray_store`` makes the Ray actor of it."""

    def __init__(self, budget_tokens: int):
        self.budget_tokens = int(budget_tokens)
        self.generation = uuid.uuid4().hex  # changes when Ray restarts the actor
        self._seqs: collections.deque = collections.deque()  # (seq_no, origin, scope, tokens)
        self._next = 0
        self.tokens = 0
        self.published = 0
        self.evicted = 0
        self._applied: dict[str, int] = {}  # origin -> how many of its sequences were taken

    def publish(self, origin: str, sequences: Sequence[Sequence[int]],
                scopes: Sequence[str | None] | None = None, first: int | None = None) -> int:
        """Add sequences (longer than the budget: dropped), each in its tenant scope (None:
        unscoped); returns the store's token count.

        ``first``: the index of ``sequences[0]`` among all that ``origin`` has sent. A client
        sends a batch again when its call timed out, though the store may have taken it: the
        sequences it already took are skipped, so a retry adds nothing twice."""
        skip = 0
        if first is not None:
            taken = self._applied.get(origin, 0)
            skip = max(0, taken - first)
            self._applied[origin] = max(taken, first + len(sequences))
        for i in range(skip, len(sequences)):
            seq = sequences[i]
            n = len(seq)
            if n == 0 or n > self.budget_tokens:
                continue
            self._seqs.append((self._next, origin, None if scopes is None else scopes[i], seq))
            self._next += 1
            self.tokens += n
            self.published += 1
            while self.tokens > self.budget_tokens:
                _, _, _, old = self._seqs.popleft()
                self.tokens -= len(old)
                self.evicted += 1
        return self.tokens

    def pull(self, after: int, origin: str, max_tokens: int | None = None) -> tuple:
        """(generation, cursor, (scope, sequence) pairs published after ``after`` by other
        origins).

        ``after`` = -1 for everything held. At most ``max_tokens`` tokens per call (the cursor
        says where to resume)."""
        out, cursor, total = [], after, 0
        for no, org, scope, seq in self._seqs:
            if no <= after:
                continue
            if org != origin:
                if max_tokens is not None and out and total + len(seq) > max_tokens:
                    break
                out.append((scope, seq))
                total += len(seq)
            cursor = no
        return self.generation, cursor, out

    def stats(self) -> dict:
        return {"generation": self.generation, "tokens": self.tokens,
                "sequences": len(self._seqs), "budget_tokens": self.budget_tokens,
                "published": self.published, "evicted": self.evicted, "pid": os.getpid()}


def _connect(opts: dict, actor: Any = None):
    """The default transport: the store as a named Ray actor (specdraft.adapters.ray_store)."""
    import importlib

    return importlib.import_module("specdraft.adapters.ray_store").connect(opts, actor)


class SharedCacheClient:
    """A replica's link to the store: ``publish`` and ``drain`` never block on Ray."""

    def __init__(self, opts: dict, origin: str | None = None, store: Any = None,
                 connect=None):
        """``store``: a store actor to use (default: the named one); ``connect(opts, store)``
        makes the link with ``publish``/``pull`` and ``lost(error)`` (whether a failed call means
        the store must be looked up again; default: the Ray transport)."""
        self.opts = opts
        self.origin = origin or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._store = store
        self._connect = connect or _connect
        self._link: Any = None
        self._outbox: collections.deque = collections.deque()
        self._outbox_tokens = 0
        self._inbox: collections.deque = collections.deque()
        self._cursor = -1
        self._queued = 0  # sequences queued so far: each outbox entry is (index, scope, tokens)
        self._generation = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._failing = False
        self._handover_failing = False
        self._source: Any = None  # () -> [(scope, tokens)] to publish, asked each round
        self._sink: Any = None    # (tokens, scope) -> None, for each sequence pulled
        self._rounds = 0          # exchanges completed, handing over included
        self.counters = {"shared_cache_published_sequences": 0, "shared_cache_published_tokens": 0,
                        "shared_cache_pulled_sequences": 0, "shared_cache_pulled_tokens": 0,
                        "shared_cache_dropped_tokens": 0, "shared_cache_errors": 0,
                        "shared_cache_restarts_seen": 0, "shared_cache_store_tokens": 0,
                        "shared_cache_pull_seconds": 0.0, "shared_cache_pulls": 0}
        self._thread = threading.Thread(target=self._run, name="specdraft-shared-cache",
                                        daemon=True)
        self._thread.start()

    def attach(self, source: Any, sink: Any) -> None:
        """Let the background thread feed itself: each round it publishes what ``source()``
        returns ((scope, tokens) pairs) and hands each pulled sequence to ``sink(tokens,
        scope)`` instead of keeping it for ``drain``."""
        self._source, self._sink = source, sink

    # -- in-memory only: never waits for the store ------------------------------------------------
    def publish(self, tokens: Sequence[int], scope: str | None = None) -> None:
        toks = tokens if hasattr(tokens, "dtype") else list(tokens)  # int32 arrays stay as they are
        if not len(toks):
            return
        with self._lock:
            self._outbox.append((self._queued, scope, toks))
            self._queued += 1
            self._outbox_tokens += len(toks)
            # a store that is down must not make the outbox grow without bound
            while self._outbox_tokens > self.opts["tokens"] and len(self._outbox) > 1:
                _, _, old = self._outbox.popleft()
                self._outbox_tokens -= len(old)
                self.counters["shared_cache_dropped_tokens"] += len(old)

    def drain(self) -> list[tuple[str | None, list[int]]]:
        """(scope, sequence) pairs other replicas published since the last call."""
        if not self._inbox:
            return []
        with self._lock:
            out = list(self._inbox)
            self._inbox.clear()
        return out

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until a whole round has run after this call (what ``source`` held then is sent,
        what the store held then is pulled and handed to ``sink``) and the outbox is empty
        (tests, shutdown)."""
        target = self._rounds + 2
        self._wake.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._outbox and self._rounds >= target:
                return True
            self._wake.set()
            time.sleep(0.01)
        return False

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    # -- the background thread ------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed:
            try:
                self._hand_over(self._take_source)
                self._exchange()
                self._hand_over(self._give_sink)
                self._rounds += 1
                if self._failing:
                    self._failing = False
                    logger.warning("specdraft: shared cache %r reachable again",
                                   self.opts["name"])
            except Exception as e:  # noqa: BLE001 - the store's trouble never reaches drafting
                self.counters["shared_cache_errors"] += 1
                if not self._failing:
                    self._failing = True
                    logger.warning("specdraft: shared cache %r unreachable (%s: %s); drafting "
                                   "from the local cache, retrying every %.1fs",
                                   self.opts["name"], type(e).__name__, e,
                                   self.opts["pull_interval_s"])
                # never reached: look the store up again, unless it is still starting (a
                # timeout): a handle dropped then would end a store this replica created
                if self._generation is None and (self._link is None or self._link.lost(e)):
                    self._store = self._link = None
            self._wake.wait(self.opts["pull_interval_s"])
            self._wake.clear()

    def _take_source(self) -> None:
        if self._source is not None:
            for scope, tokens in self._source():
                self.publish(tokens, scope)

    def _give_sink(self) -> None:
        if self._sink is not None:
            for scope, tokens in self.drain():
                self._sink(tokens, scope)

    def _hand_over(self, move) -> None:
        """``move()``; a failure there (not the store's) is counted and logged once."""
        try:
            move()
        except Exception as e:  # noqa: BLE001 - sharing must never stop the thread
            self.counters["shared_cache_errors"] += 1
            if not self._handover_failing:
                self._handover_failing = True
                logger.warning("specdraft: shared cache %r: handing sequences over failed "
                               "(%s: %s); counted in shared_cache_errors", self.opts["name"],
                               type(e).__name__, e)

    def _exchange(self) -> None:
        if self._link is None:
            self._link = self._connect(self.opts, self._store)
        timeout = self.opts["timeout_s"]
        with self._lock:
            batch = list(self._outbox)
        if batch:
            import numpy as np

            arrays = [np.asarray(s, dtype=np.int32) for _, _, s in batch]
            scopes = [k for _, k, _ in batch]
            # the batch's first index: sent again after a timeout, the store skips what it took
            tokens = self._link.publish(
                self.origin, arrays, scopes if any(k is not None for k in scopes) else None,
                batch[0][0], timeout)
            end = batch[-1][0]
            with self._lock:  # what was sent (publish may have dropped some of it meanwhile)
                while self._outbox and self._outbox[0][0] <= end:
                    self._outbox_tokens -= len(self._outbox.popleft()[2])
            self.counters["shared_cache_published_sequences"] += len(batch)
            self.counters["shared_cache_published_tokens"] += sum(len(s) for s in arrays)
            self.counters["shared_cache_store_tokens"] = tokens
        t0 = time.perf_counter()
        generation, cursor, seqs = self._link.pull(self._cursor, self.origin,
                                                   self.opts["tokens"], timeout)
        self.counters["shared_cache_pull_seconds"] += time.perf_counter() - t0
        self.counters["shared_cache_pulls"] += 1
        if generation != self._generation:
            if self._generation is not None:
                self.counters["shared_cache_restarts_seen"] += 1
                logger.warning("specdraft: shared cache %r restarted empty; pulling from its "
                               "start", self.opts["name"])
                self._generation = generation
                self._cursor = -1
                return
            self._generation = generation
        self._cursor = cursor
        if seqs:
            with self._lock:
                self._inbox.extend((k, [int(t) for t in s]) for k, s in seqs)
            self.counters["shared_cache_pulled_sequences"] += len(seqs)
            self.counters["shared_cache_pulled_tokens"] += sum(len(s) for _, s in seqs)


class SharedCacheDrafter:
    """A drafter that publishes finished requests to the shared store and adds what other
    replicas published to its global cache (evictable, like its own finished requests).

    Every call goes to the drafter it wraps, whose core exports each request that finishes
    normally (``SpecDrafter.export_finished``: its scope and the tokens it caches), including
    those ``SpecDrafter.step`` finishes. The client's background
    thread drains that export into the store and adds pulled sequences to the global cache
    (``SpecDrafter.add_to_global_cache``, safe beside the engine step).
    """

    def __init__(self, drafter: Any, opts: dict, client: SharedCacheClient | None = None):
        self.drafter = drafter
        self.shared_options = opts
        drafter.export_finished(opts["tokens"])
        self.client = client or SharedCacheClient(opts)
        # the thread holds the wrapped drafter, never this wrapper (whose __del__ closes it)
        self.client.attach(drafter.drain_finished, drafter.add_to_global_cache)

    def __getattr__(self, name: str) -> Any:
        if name in ("drafter", "client"):  # not set yet: __init__ failed
            raise AttributeError(name)
        return getattr(self.drafter, name)

    def metrics(self) -> dict:
        m = self.drafter.metrics()
        m.update(self.client.counters)
        # dropped before the client took them (its thread stalled)
        m["shared_cache_dropped_tokens"] += self.drafter.core.export_dropped_tokens()
        return m

    def close(self) -> None:
        self.client.close()

    def __del__(self) -> None:  # a drafter rebuilt (e.g. between benchmark rounds) stops its thread
        client = self.__dict__.get("client")
        if client is not None:
            client.close()

