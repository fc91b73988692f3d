"""One suffix cache shared by every replica of a deployment, held by a named Ray actor.

The store and the client are plain Python; the transport (the Ray actor and the calls on it) is
``specdraft.adapters.ray_store``, which the client loads when it first connects.

Each replica's drafter keeps its own global cache of finished requests. With the ``shared_cache``
option, a replica also *publishes* each finished request's cached tokens to one cluster-wide
store (a named Ray actor, restarted by Ray if its process dies) and *pulls* what the other
replicas published, adding it to its own global cache. Agentic traffic spread over replicas then
drafts from every replica's history, not only from the requests one replica happened to serve.

Nothing here runs on the decoding step's critical path: ``publish`` appends to an in-memory
outbox and ``drain`` pops an in-memory inbox; one background thread per replica talks to the
actor. A slow, dead or restarting store only delays sharing: local drafting goes on meanwhile,
failures are counted (``shared_cache_errors``) and logged once per outage.

Tenant scopes travel with the sequences: a request's sequence is published with its scope (vLLM:
its ``cache_salt``) and lands, on every other replica, in that scope's global cache only.

Consistency is eventual: a sequence reaches other replicas within about one pull interval after
the request finishes (plus the actor's round trip), in the store's order; a replica never sees its
own sequences back. The store is bounded by a token budget and evicts oldest first; each replica's
global cache keeps its own budget (``global_cache_tokens``) and eviction. A restarted store
starts empty (its generation changes and every client restarts its cursor).

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

    def publish(self, origin: str, sequences: Sequence[Sequence[int]],
                scopes: Sequence[str | None] | None = None) -> int:
        """Add sequences (longer than the budget: dropped), each in its tenant scope (None:
        unscoped); returns the store's token count."""
        for i, seq in enumerate(sequences):
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
        makes the link with ``publish``/``pull`` (default: the Ray transport)."""
        self.opts = opts
        self.origin = origin or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._store = store
        self._connect = connect or _connect
        self._link: Any = None
        self._outbox: collections.deque = collections.deque()
        self._outbox_tokens = 0
        self._inbox: collections.deque = collections.deque()
        self._cursor = -1
        self._generation = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._failing = False
        self.figures = {"shared_cache_published_sequences": 0, "shared_cache_published_tokens": 0,
                        "shared_cache_pulled_sequences": 0, "shared_cache_pulled_tokens": 0,
                        "shared_cache_dropped_tokens": 0, "shared_cache_errors": 0,
                        "shared_cache_restarts_seen": 0, "shared_cache_store_tokens": 0,
                        "shared_cache_pull_seconds": 0.0, "shared_cache_pulls": 0}
        self._thread = threading.Thread(target=self._run, name="specdraft-shared-cache",
                                        daemon=True)
        self._thread.start()

    # -- called from the decoding step: in-memory only ------------------------------------------
    def publish(self, tokens: Sequence[int], scope: str | None = None) -> None:
        toks = list(tokens)
        if not toks:
            return
        with self._lock:
            self._outbox.append((scope, toks))
            self._outbox_tokens += len(toks)
            # a store that is down must not make the outbox grow without bound
            while self._outbox_tokens > self.opts["tokens"] and len(self._outbox) > 1:
                _, old = self._outbox.popleft()
                self._outbox_tokens -= len(old)
                self.figures["shared_cache_dropped_tokens"] += len(old)

    def drain(self) -> list[tuple[str | None, list[int]]]:
        """(scope, sequence) pairs other replicas published since the last call."""
        if not self._inbox:
            return []
        with self._lock:
            out = list(self._inbox)
            self._inbox.clear()
        return out

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until the outbox is sent and one pull has completed after it (tests, shutdown)."""
        target = self.figures["shared_cache_pulls"] + 2
        self._wake.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._outbox and self.figures["shared_cache_pulls"] >= target:
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
                self._exchange()
                if self._failing:
                    self._failing = False
                    logger.warning("specdraft: shared cache %r reachable again",
                                   self.opts["name"])
            except Exception as e:  # noqa: BLE001 - the store's trouble never reaches drafting
                self.figures["shared_cache_errors"] += 1
                if not self._failing:
                    self._failing = True
                    logger.warning("specdraft: shared cache %r unreachable (%s: %s); drafting "
                                   "from the local cache, retrying every %.1fs",
                                   self.opts["name"], type(e).__name__, e,
                                   self.opts["pull_interval_s"])
                if self._generation is None:  # never reached: look the actor up again
                    self._store = self._link = None
            self._wake.wait(self.opts["pull_interval_s"])
            self._wake.clear()

    def _exchange(self) -> None:
        if self._link is None:
            self._link = self._connect(self.opts, self._store)
        timeout = self.opts["timeout_s"]
        with self._lock:
            batch = list(self._outbox)
        if batch:
            import numpy as np

            arrays = [np.asarray(s, dtype=np.int32) for _, s in batch]
            scopes = [k for k, _ in batch]
            tokens = self._link.publish(
                self.origin, arrays, scopes if any(k is not None for k in scopes) else None,
                timeout)
            with self._lock:
                for _ in batch:
                    self._outbox_tokens -= len(self._outbox.popleft()[1])
            self.figures["shared_cache_published_sequences"] += len(batch)
            self.figures["shared_cache_published_tokens"] += sum(len(s) for s in arrays)
            self.figures["shared_cache_store_tokens"] = tokens
        t0 = time.perf_counter()
        generation, cursor, seqs = self._link.pull(self._cursor, self.origin,
                                                   self.opts["tokens"], timeout)
        self.figures["shared_cache_pull_seconds"] += time.perf_counter() - t0
        self.figures["shared_cache_pulls"] += 1
        if generation != self._generation:
            if self._generation is not None:
                self.figures["shared_cache_restarts_seen"] += 1
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
            self.figures["shared_cache_pulled_sequences"] += len(seqs)
            self.figures["shared_cache_pulled_tokens"] += sum(len(s) for _, s in seqs)


class SharedCacheDrafter:
    """A drafter that publishes finished requests to the shared store and adds what other
    replicas published to its global cache (evictable, like its own finished requests).

    It records each request's tokens from ``start``/``extend`` (the drafter's core keeps them in
    its index, not in a form it hands back) and forwards every call to the drafter it wraps.
    """

    def __init__(self, drafter: Any, opts: dict, client: SharedCacheClient | None = None):
        self.drafter = drafter
        self.shared_options = opts
        self.client = client or SharedCacheClient(opts)
        self._cache_prompts = bool(getattr(drafter.config, "cache_prompts", False))
        self._tokens: dict[Any, tuple[int, list[int]]] = {}  # req_id -> (prompt length, tokens)

    def __getattr__(self, name: str) -> Any:
        if name in ("drafter", "client"):  # not set yet: __init__ failed
            raise AttributeError(name)
        return getattr(self.drafter, name)

    def native_engine_step(self):
        """None: this wrapper records every request's tokens, so the engine goes through step."""
        return None

    def start(self, req_id, prompt_token_ids: Sequence[int], scope: str | None = None) -> None:
        self.drafter.start(req_id, prompt_token_ids, scope=scope)
        toks = [int(t) for t in prompt_token_ids]
        self._tokens[req_id] = (len(toks), toks)

    def extend(self, req_id, token_ids: Sequence[int], num_accepted: int | None = None) -> None:
        self.drafter.extend(req_id, token_ids, num_accepted)
        entry = self._tokens.get(req_id)
        if entry is not None:
            entry[1].extend(int(t) for t in token_ids)

    def finish(self, req_id) -> None:
        scope = self.drafter.scope_of(req_id)
        self.drafter.finish(req_id)
        entry = self._tokens.pop(req_id, None)
        if entry is not None:
            num_prompt, toks = entry
            self.client.publish(toks if self._cache_prompts else toks[num_prompt:], scope)

    def abort(self, req_id) -> None:
        self.drafter.abort(req_id)
        self._tokens.pop(req_id, None)

    def step(self, req_ids: Sequence, token_ids, num_tokens, num_prompt_tokens, caps, *,
             rows=None, token_offsets=None, finished: Sequence = (), aborted: Sequence = (),
             **kwargs):
        """``SpecDrafter.step`` with the same bookkeeping as the per-request calls: the rows'
        new tokens are recorded (the step syncs the core natively, out of this wrapper's view),
        finished requests are published, and pulled sequences reach the global cache first."""
        import numpy as np

        for req_id in finished:
            entry = self._tokens.pop(req_id, None)
            if entry is not None:
                num_prompt, toks = entry
                self.client.publish(toks if self._cache_prompts else toks[num_prompt:],
                                    self.drafter.scope_of(req_id))
        for req_id in aborted:
            self._tokens.pop(req_id, None)
        self.take_shared()
        out = self.drafter.step(req_ids, token_ids, num_tokens, num_prompt_tokens, caps,
                                rows=rows, token_offsets=token_offsets, finished=finished,
                                aborted=aborted, **kwargs)
        tokens = np.asarray(token_ids)
        n = np.asarray(num_tokens).tolist()
        prompt = np.asarray(num_prompt_tokens).tolist()
        if token_offsets is not None:
            off = np.asarray(token_offsets).tolist()
        else:
            row_of = list(range(len(req_ids))) if rows is None else np.asarray(rows).tolist()
        for j, req_id in enumerate(req_ids):
            entry = self._tokens.get(req_id)
            known = len(entry[1]) if entry is not None else 0
            if entry is None or n[j] < known:  # new, or the engine's history shrank: restart
                entry = self._tokens[req_id] = (int(prompt[j]), [])
                known = 0
            if n[j] > known:
                if token_offsets is not None:  # the row's last tokens, ending at position n[j]
                    first = n[j] - (off[j + 1] - off[j])
                    new = tokens[off[j] + max(known - first, 0):off[j + 1]]
                else:
                    new = tokens[row_of[j], known:n[j]]
                entry[1].extend(new.tolist())
        return out

    def take_shared(self) -> int:
        """Add sequences pulled from the store to the global cache; returns how many."""
        seqs = self.client.drain()
        for scope, seq in seqs:
            self.drafter.add_to_global_cache(seq, scope)
        return len(seqs)

    def draft_batch(self, req_ids: Sequence, max_budget: int | None = None, batch=None):
        self.take_shared()
        return self.drafter.draft_batch(req_ids, max_budget, batch)

    def draft(self, req_id, budget: int | None = None):
        return self.draft_batch([req_id], budget)[0]

    def metrics(self) -> dict:
        m = self.drafter.metrics()
        m.update(self.client.figures)
        return m

    def close(self) -> None:
        self.client.close()

    def __del__(self) -> None:  # a drafter rebuilt (e.g. between benchmark rounds) stops its thread
        client = self.__dict__.get("client")
        if client is not None:
            client.close()

