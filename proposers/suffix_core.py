"""Suffix drafting over a per-request index and a global cache (plain-Python twin).

``SuffixCore`` is the hot path every suffix strategy runs through: it keeps one ``SuffixIndex``
per live request (prompt + output so far) and one global index over earlier requests' outputs
and loaded corpora, and turns matches in both into a draft tree. The native class
``_suffix_native.SuffixCore`` implements the same API and must return identical drafts; tests
drive both with the same random streams.

Requests are named by integer handles; the Python layer above maps engine request ids to them.

Live requests (``live_outputs``). While other requests are live, a request's tokens enter the
global index as they arrive, as its own sequence, so requests running side by side draft from
each other's output so far (the same prompt answered twice at once, one agent's file read by
another); at finish that sequence becomes the cached one (or is dropped when it does not fit), on
abort it is removed. A request alone defers its tokens (nobody could draft from them) and catches
up at its first extend with company, or at finish, so a single stream pays nothing for this. A
request also meets its own output in the global index: it repeats evidence the local index has.

Draft probabilities. At a draft node each index whose match is still alive gives a next-token
distribution from continuation counts, ``c / (sum(c) + kappa / d)`` where d is the matched
length: thin evidence is shrunk (one sighting after a 1-token match gives 0.5), but a long match
is specific enough that even one sighting is likely to repeat (after 20 tokens it gives 0.95).
The two distributions are mixed with weights equal to their match lengths, for the same reason,
the request's own index counting ``local_weight`` times as much as the global cache: what this
request wrote (or was given) predicts its next tokens better than other requests' outputs with the
same match length (an agent rewriting its file, a summary quoting its document). These are raw estimates; the adaptive
controller calibrates them against what the target actually accepted.

Export (``enable_export``). For the shared cache, a core can keep each request that finishes
normally (``finish``; aborts export nothing) as its scope and the tokens ``finish`` caches, for
``drain_finished`` to hand over; a token budget bounds what waits.

Scopes (tenants). A request may be given a scope before it starts (``set_scope``: a string, the
engine's tenant key such as vLLM's ``cache_salt``; None: the unscoped pool). Each scope has its
own global index, cached-request FIFO and live sequences, created at its first request, so a
request drafts only from its own history, its scope's earlier and live outputs, and the corpora
loaded for its scope; nothing crosses scopes. The unscoped pool is exactly the single global
index of a core without scopes. ``global_cache_tokens`` bounds the cached tokens of all scopes
together (past it the least recently used other scope loses its oldest request first),
``scope_cache_tokens`` each scope's, and at most ``max_scopes`` scoped indexes are held: a new
scope evicts the least recently used one without live requests, whole.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from specdraft.proposers.suffix_index import SuffixIndex

_LOCAL_SEQ = 0


class FinishedOutbox:
    """Requests that finished normally (not aborted), as (scope, tokens), oldest first: what a
    core exports for the shared cache to publish (``enable_export``). At most ``budget`` tokens
    are held: past it the oldest are dropped (counted in ``dropped_tokens``), the newest is always
    kept. Native: ``SuffixCore::export_finished``."""

    __slots__ = ("budget", "items", "tokens", "dropped_tokens")

    def __init__(self):
        self.budget = 0  # 0: off
        self.items: deque = deque()
        self.tokens = 0
        self.dropped_tokens = 0

    def enable(self, budget_tokens: int) -> None:
        self.budget = max(0, int(budget_tokens))
        if not self.budget:
            self.items.clear()
            self.tokens = 0

    def add(self, scope, tokens) -> None:
        if not self.budget or not tokens:
            return
        self.items.append((scope, list(tokens)))
        self.tokens += len(tokens)
        while self.tokens > self.budget and len(self.items) > 1:
            n = len(self.items.popleft()[1])
            self.tokens -= n
            self.dropped_tokens += n

    def drain(self) -> list:
        out = [(k, np.array(t, dtype=np.int32)) for k, t in self.items]
        self.items.clear()
        self.tokens = 0
        return out


class _Scope:
    """One scope's global cache: its index, cached requests (FIFO) and live requests."""

    __slots__ = ("index", "fifo", "next_seq", "cached_tokens", "corpus_tokens", "live",
                 "last_used")

    def __init__(self, max_depth: int):
        self.index = SuffixIndex(max_depth)
        self.fifo: deque[tuple[int, int]] = deque()  # (global seq id, tokens), oldest first
        self.next_seq = 0
        self.cached_tokens = 0  # request tokens (evictable)
        self.corpus_tokens = 0  # pinned corpus tokens
        self.live = 0           # live requests of this scope
        self.last_used = 0      # the core's clock at its last start or finish (LRU order)


class _Request:
    __slots__ = ("index", "num_prompt", "hint_local", "hint_global", "global_seq", "scope")

    def __init__(self, max_depth: int, scope: _Scope):
        self.index = SuffixIndex(max_depth)
        self.index.add_sequence(_LOCAL_SEQ)
        self.num_prompt = 0
        self.hint_local = max_depth
        self.hint_global = max_depth
        self.global_seq = -1  # its sequence in its scope's global index while live (live_outputs)
        self.scope = scope


class ExportsFinished:
    """The export calls of a core whose ``finish`` feeds ``self._outbox`` (a FinishedOutbox)."""

    _outbox: FinishedOutbox

    def enable_export(self, budget_tokens: int) -> None:
        """Keep each request that finishes normally for ``drain_finished``: its scope and the
        tokens finish caches (the output, or prompt + output with ``cache_prompts``), at most
        ``budget_tokens`` tokens held (oldest dropped first); <= 0: off."""
        self._outbox.enable(budget_tokens)

    def drain_finished(self) -> list:
        """[(scope or None, int32 array)] of the requests finished since the last call, oldest
        first."""
        return self._outbox.drain()

    def export_dropped_tokens(self) -> int:
        """Tokens of finished requests dropped from a full outbox so far."""
        return self._outbox.dropped_tokens


class SuffixCore(ExportsFinished):
    def __init__(self, max_depth: int = 24, global_cache_tokens: int = 1_000_000,
                 max_children: int = 4, min_path_prob: float = 0.02, kappa: float = 1.0,
                 cache_prompts: bool = False, local_weight: int = 1, live_outputs: bool = False,
                 scope_cache_tokens: int = -1, max_scopes: int = 1024):
        self.max_depth = max_depth
        self.global_cache_tokens = global_cache_tokens
        # a scope's own cap (-1, or above the total: the total)
        self.scope_cache_tokens = (global_cache_tokens if not 0 <= scope_cache_tokens
                                   <= global_cache_tokens else scope_cache_tokens)
        self.max_scopes = max(1, max_scopes)
        self.max_children = max_children
        self.min_path_prob = min_path_prob
        self.kappa = kappa
        self.local_weight = local_weight
        self.cache_prompts = cache_prompts
        # live requests' tokens enter the global index as they are generated (a cache of size 0
        # holds nothing, live or finished)
        self.live_outputs = bool(live_outputs) and global_cache_tokens > 0
        self._default = _Scope(max_depth)          # the unscoped pool
        self._scopes: dict[str, _Scope] = {}       # scoped pools, created at first use
        self._handle_scope: dict[int, str] = {}    # handle -> scope, set before start
        self._corpora: list[tuple[list[int], frozenset | None]] = []  # for scopes made later
        self._clock = 0
        self._requests: dict[int, _Request] = {}
        self.cached_tokens = 0   # request tokens in all scopes' global caches (evictable)
        self.corpus_tokens = 0   # pinned corpus tokens in all scopes held
        self._outbox = FinishedOutbox()

    @property
    def global_index(self) -> SuffixIndex:
        """The unscoped pool's global index."""
        return self._default.index

    # ---------------------------------------------------------------- scopes
    def set_scope(self, handle: int, scope) -> None:
        """The scope request ``handle`` starts in (None: the unscoped pool); kept across a
        restart of the request, dropped when it finishes or is aborted."""
        if scope is None:
            self._handle_scope.pop(handle, None)
        elif isinstance(scope, str):
            self._handle_scope[handle] = scope
        else:
            raise TypeError(f"scope must be a string or None, got {type(scope).__name__}")

    def scope_of(self, handle: int):
        return self._handle_scope.get(handle)

    def drop_scope(self, handle: int) -> None:
        self._handle_scope.pop(handle, None)

    def _touch(self, s: _Scope) -> None:
        self._clock += 1
        s.last_used = self._clock

    def _scope_for(self, key) -> _Scope:
        if key is None:
            return self._default
        s = self._scopes.get(key)
        if s is not None:
            return s
        if len(self._scopes) >= self.max_scopes:  # scopes with live requests stay
            idle = sorted((v.last_used, k) for k, v in self._scopes.items() if v.live == 0)
            for _, k in idle[:len(self._scopes) - self.max_scopes + 1]:
                self._drop_scope_whole(k)
        s = self._scopes[key] = _Scope(self.max_depth)
        for toks, serves in self._corpora:
            if serves is None or key in serves:
                self._add_global(s, toks)
                s.corpus_tokens += len(toks)
                self.corpus_tokens += len(toks)
        return s

    def _drop_scope_whole(self, key: str) -> None:
        s = self._scopes.pop(key)
        self.cached_tokens -= s.cached_tokens
        self.corpus_tokens -= s.corpus_tokens

    def num_scopes(self) -> int:
        """Scoped pools held (the unscoped pool is always there)."""
        return len(self._scopes)

    def scope_tokens(self, k: int = 5) -> list[int]:
        """Tokens (cached + corpus) of the k largest scoped pools, largest first."""
        return sorted((s.cached_tokens + s.corpus_tokens for s in self._scopes.values()),
                      reverse=True)[:max(0, k)]

    # ------------------------------------------------------------ lifecycle
    def start(self, handle: int, prompt) -> None:
        if handle in self._requests:
            raise KeyError(f"request handle {handle} already started")
        s = self._scope_for(self._handle_scope.get(handle))
        r = _Request(self.max_depth, s)
        r.index.extend(_LOCAL_SEQ, prompt)
        r.num_prompt = len(prompt)
        if self.live_outputs:
            r.global_seq = s.next_seq
            s.next_seq += 1
            s.index.add_sequence(r.global_seq)
        s.live += 1
        self._touch(s)
        self._requests[handle] = r

    def extend(self, handle: int, tokens) -> None:
        r = self._requests[handle]
        r.index.extend(_LOCAL_SEQ, tokens)
        if r.global_seq >= 0 and r.scope.live > 1:  # alone in its scope: nobody would read them
            self._catch_up(r)
        n = len(tokens)
        r.hint_local += n
        r.hint_global += n

    def _catch_up(self, r: _Request) -> None:
        """Index the request's tokens the global index does not hold yet (its sequence there
        holds them from the first output token on, or from the first prompt token with
        ``cache_prompts``)."""
        toks = r.index.seqs[_LOCAL_SEQ]
        g = r.scope.index
        have = (0 if self.cache_prompts else r.num_prompt) + len(g.seqs[r.global_seq])
        if have < len(toks):
            g.extend(r.global_seq, toks[have:])

    def has(self, handle: int) -> bool:
        return handle in self._requests

    def num_tokens(self, handle: int) -> int:
        return len(self._requests[handle].index.seqs[_LOCAL_SEQ])

    def abort(self, handle: int, keep_scope: bool = False) -> None:
        """Drop a request; ``keep_scope``: it restarts at once under the same handle."""
        r = self._requests.pop(handle)
        r.scope.live -= 1
        if not keep_scope:
            self._handle_scope.pop(handle, None)
        if r.global_seq >= 0:  # an aborted request's tokens are not cached
            r.scope.index.remove(r.global_seq)

    def finish(self, handle: int, export: bool = True) -> None:
        """The request ended normally: its tokens join its scope's global cache (and the outbox
        when export is on; ``export=False``: a sequence learned elsewhere)."""
        r = self._requests.pop(handle)
        if export and self._outbox.budget:
            self._outbox.add(self._handle_scope.get(handle),
                             r.index.seqs[_LOCAL_SEQ][0 if self.cache_prompts else r.num_prompt:])
        s = r.scope
        s.live -= 1
        self._touch(s)
        self._handle_scope.pop(handle, None)
        if r.global_seq >= 0:  # indexed while it ran: keep it (or not) as a finished one
            self._catch_up(r)
            g = s.index
            g.close(r.global_seq)
            n = len(g.seqs[r.global_seq])
            if 0 < n <= self.scope_cache_tokens:
                self._cache(s, r.global_seq, n)
            else:
                g.remove(r.global_seq)
            return
        toks = r.index.seqs[_LOCAL_SEQ]
        if not self.cache_prompts:
            toks = toks[r.num_prompt:]
        if 0 < len(toks) <= self.scope_cache_tokens:
            self._cache(s, self._add_global(s, toks), len(toks))

    def _cache(self, s: _Scope, sid: int, n: int) -> None:
        """Keep the finished sequence ``sid`` (n tokens) in scope s's FIFO; evict oldest past
        the scope's budget, then, past the total, the least recently used other scope's oldest
        (s's own when no other scope holds any)."""
        s.fifo.append((sid, n))
        s.cached_tokens += n
        self.cached_tokens += n
        while s.cached_tokens > self.scope_cache_tokens:
            self._evict_oldest(s)
        while self.cached_tokens > self.global_cache_tokens:
            self._evict_oldest(self._victim(s))

    def _victim(self, s: _Scope) -> _Scope:
        best = None
        for v in self._scopes.values():
            if v is not s and v.fifo and (best is None or v.last_used < best.last_used):
                best = v
        d = self._default
        if d is not s and d.fifo and (best is None or d.last_used < best.last_used):
            best = d
        return s if best is None else best

    def _evict_oldest(self, s: _Scope) -> None:
        old, k = s.fifo.popleft()
        s.index.remove(old)
        s.cached_tokens -= k
        self.cached_tokens -= k

    def load_corpus(self, tokens, scopes=None) -> None:
        """Pin a corpus in the global caches of ``scopes`` (None: every scope, including those
        created later; a list may hold None for the unscoped pool)."""
        if not len(tokens):
            return
        toks = list(tokens)
        serves = None if scopes is None else frozenset(scopes)
        targets = [self._default] if serves is None or None in serves else []
        targets += [v for k, v in self._scopes.items() if serves is None or k in serves]
        if serves is None or any(k is not None for k in serves):
            self._corpora.append((toks, serves))
        for s in targets:
            self._add_global(s, toks)
            s.corpus_tokens += len(toks)
            self.corpus_tokens += len(toks)

    def _add_global(self, s: _Scope, tokens) -> int:
        sid = s.next_seq
        s.next_seq += 1
        g = s.index
        g.add_sequence(sid)
        g.extend(sid, tokens)
        g.close(sid)
        return sid

    # -------------------------------------------------------------- drafting
    def _expand(self, local_index, states, path_tokens, global_index=None):
        """Mixed next-token candidates [(token, prob, next_states)] for one draft node.

        ``states`` holds the node's match state in the local and the global index (None where
        that index has lost the path); ``path_tokens()`` gives the last max_depth tokens of the
        context plus the draft path, needed only to re-anchor a match at the depth cap;
        ``global_index`` is the request's scope's (default: the unscoped pool's).
        """
        if global_index is None:
            global_index = self.global_index
        probs: dict[int, float] = {}
        nexts: dict[int, list] = {}
        wsum = 0
        for si in range(2):
            st = states[si]
            if st is None:
                continue
            idx = global_index if si else local_index
            conts = idx.continuations(st)
            if not conts and st[1] == 0 and idx.dep[st[0]] == self.max_depth:
                # capped depth: re-anchor on the gram's shorter suffix
                ctx = path_tokens()
                st, _ = idx.longest_match(ctx, self.max_depth - 1)
                if st is None:
                    continue
                conts = idx.continuations(st)
            if not conts:
                continue
            total = 0
            for c in conts:
                total += c[1]
            w = idx.dep[st[0]] + st[1]
            wm = self._source_weight(w, si == 0)
            wsum += wm
            for t, c, nst in conts[: self.max_children]:
                probs[t] = probs.get(t, 0.0) + wm * c / (total + self.kappa / w)
                nx = nexts.get(t)
                if nx is None:
                    nx = nexts[t] = [None, None]
                nx[si] = nst
        if wsum == 0:
            return []
        out = [(t, p / wsum, nexts[t]) for t, p in probs.items()]
        out.sort(key=lambda x: (-x[1], x[0]))
        return out[: self.max_children]

    def _source_weight(self, matched: int, own: bool) -> int:
        """Weight of one index's distribution in the mix: its matched length, the request's own
        history counting ``local_weight`` times more (native: inline in ``SuffixCore::expand``)."""
        return matched * self.local_weight if own else matched

    def draft(self, handle: int, budget: int, tree: bool = False):
        """Draft up to ``budget`` nodes: (token_ids, parents, probs, match_len).

        Chain mode follows the most probable continuation; tree mode grows the tree best-first
        by path probability. Nodes below ``min_path_prob`` are not proposed.
        """
        r = self._requests[handle]
        if budget <= 0:
            return [], [], [], 0
        ctx = r.index.seqs[_LOCAL_SEQ]
        st_l, len_l = r.index.longest_match(ctx, r.hint_local)
        r.hint_local = len_l
        st_g, len_g = r.scope.index.longest_match(ctx, r.hint_global)
        r.hint_global = len_g
        match_len = max(len_l, len_g)
        if st_l is None and st_g is None:
            return [], [], [], 0
        local_index = r.index
        global_index = r.scope.index
        toks: list[int] = []
        parents: list[int] = []
        probs: list[float] = []

        def path_of(node: int):
            def tokens():
                path = []
                i = node
                while i >= 0:
                    path.append(toks[i])
                    i = parents[i]
                path.reverse()
                keep = self.max_depth - len(path)
                if keep <= 0:
                    return path[-self.max_depth:]
                return ctx[max(0, len(ctx) - keep):] + path
            return tokens

        def ctx_tail():
            return ctx[max(0, len(ctx) - self.max_depth):]

        heap: list = []
        order = 0
        for t, p, nx in self._expand(local_index, (st_l, st_g), ctx_tail, global_index):
            if p < self.min_path_prob:
                break
            heap.append((-p, order, -1, t, p, nx))
            order += 1
            if not tree:
                break
        heapq.heapify(heap)
        while heap and len(toks) < budget:
            negp, _, parent, t, p, nx = heapq.heappop(heap)
            i = len(toks)
            toks.append(t)
            parents.append(parent)
            probs.append(p)
            pathp = -negp
            for ct, cp, cnx in self._expand(local_index, nx, path_of(i), global_index):
                cpath = pathp * cp
                if cpath < self.min_path_prob:
                    break
                heapq.heappush(heap, (-cpath, order, i, ct, cp, cnx))
                order += 1
                if not tree:
                    break
        return toks, parents, probs, match_len

    # ------------------------------------------------------------ accounting
    def num_requests(self) -> int:
        return len(self._requests)

    def global_tokens(self) -> int:
        return self.cached_tokens + self.corpus_tokens

    def global_nodes(self) -> int:
        return self._default.index.num_nodes() + sum(v.index.num_nodes()
                                                     for v in self._scopes.values())
