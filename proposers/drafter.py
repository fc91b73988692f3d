"""``SpecDrafter``: the engine-facing drafter behind every adapter.

It maps engine request ids to core handles, runs the draft core (native suffix index, its Python
twin, or prompt lookup), applies the adaptive draft-length controller across the batch, and keeps
the counters adapters export. One instance per engine worker; every public method holds one lock.

Two ways in, over the same state:

* per request: ``start`` / ``extend`` / ``draft`` / ``finish`` / ``abort`` (``draft`` is a
  one-row ``step`` that brings no new tokens: one implementation for both ways in);
* per engine step: ``step`` takes the adapter's view of the whole batch as flat arrays and returns
  the drafts as flat arrays. With the native core that is one C++ call (GIL released) that
  applies the events, syncs every row, drafts and sizes the drafts; ``_step_python`` is its
  plain-Python twin and the specification (tests/test_step_twin.py checks them against each other).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from itertools import repeat
from typing import Hashable, Iterable, Sequence

import numpy as np

from specdraft.proposers.base import DraftTree, DrafterCounters, SpecdraftConfigError
from specdraft.proposers.config import DrafterConfig
from specdraft.proposers.controller import CostModel, DraftLengthController, cost_spec
from specdraft.proposers.corpus import corpus_entries, read_corpus
from specdraft.proposers.lookup import PromptLookupCore
from specdraft.proposers.suffix_core import SuffixCore

logger = logging.getLogger("specdraft")

# the largest scopes' token counts in the counters (ranks, never tenant names)
SCOPE_TOKENS_TOP = 5


def native_core_class():
    """The C++ SuffixCore, or None when the extension is not built."""
    try:
        from specdraft.proposers import _suffix_native
    except ImportError:
        return None
    return getattr(_suffix_native, "SuffixCore", None)


def make_core(cfg: DrafterConfig):
    if cfg.strategy == "lookup":
        return PromptLookupCore(cfg.lookup_min, cfg.lookup_max, cache_prompts=cfg.cache_prompts)
    kwargs = dict(max_depth=cfg.max_depth, global_cache_tokens=cfg.global_cache_tokens,
                  max_children=cfg.max_children if cfg.strategy == "tree" else 1,
                  min_path_prob=cfg.min_path_prob, cache_prompts=cfg.cache_prompts,
                  local_weight=cfg.local_weight, live_outputs=cfg.live_outputs,
                  scope_cache_tokens=(-1 if cfg.scope_cache_tokens is None
                                      else cfg.scope_cache_tokens),
                  max_scopes=cfg.max_scopes)
    cls = native_core_class() if cfg.native in ("auto", True) else None
    if cls is None and cfg.native is True:
        raise SpecdraftConfigError("invalid specdraft option native=True: the native extension "
                                   "specdraft.proposers._suffix_native is not built; accepted: "
                                   "'auto' or false, or reinstall specdraft with a C++ compiler")
    return (cls or SuffixCore)(**kwargs)


class NativeController:
    """The per-request API's view of the native controller held by the core.

    The native step sizes the drafts inside the core (``draft`` is a step too); what reaches that
    controller from outside a step goes through this object: accepted counts given to
    ``extend`` (``observe``), pass timings (``observe_pass``, from ``report_step``), requests
    that leave outside a step (``forget``), and what metrics and tests read (``calibrated``,
    ``chosen_lengths``)."""

    def __init__(self, core, cfg: DrafterConfig):
        params, points = cost_spec(cfg.cost_model)
        core.set_controller(points, 4.0, cfg.calibration_prior, cfg.request_prior,
                            cfg.request_decay, cfg.idle_decay, cfg.min_gain, params,
                            cfg.max_waste, cfg.match_prior, cfg.max_scopes)
        self._core = core

    def observe(self, key, num_accepted: int) -> None:
        self._core.ctl_observe(key, int(num_accepted))

    def observe_pass(self, tokens: int, seconds: float) -> None:
        self._core.ctl_observe_pass(int(tokens), float(seconds))

    def forget(self, key) -> None:
        self._core.ctl_forget(key)

    def calibrated(self, p: float, scope: str | None = None) -> float:
        return self._core.ctl_calibrated(p, scope)

    @property
    def chosen_lengths(self) -> dict[int, int]:
        return self._core.ctl_chosen_lengths()


@dataclasses.dataclass
class StepDrafts:
    """``SpecDrafter.step``'s answer: one draft per row, concatenated in row order."""

    tokens: np.ndarray   # int32, the rows' drafts back to back
    lengths: np.ndarray  # int32, one per row (0: no draft)
    parents: np.ndarray | None = None  # int32, with trees=True: each node's parent in its row

    def rows(self) -> list[list[int]]:
        """One list of token ids per row (the form vLLM's ``propose`` returns)."""
        return _rows_to_lists(self.tokens, self.lengths)

    def trees(self) -> list[DraftTree]:
        """One ``DraftTree`` per row (token ids and parents; the step returns no probs)."""
        if self.parents is None:
            raise ValueError("StepDrafts.trees() needs a step called with trees=True")
        toks, parents = self.tokens.tolist(), self.parents.tolist()
        out, a = [], 0
        for n in self.lengths.tolist():
            out.append(DraftTree(toks[a:a + n], parents[a:a + n]))
            a += n
        return out


def _rows_to_lists(tokens: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    try:
        from specdraft.proposers._suffix_native import rows_to_lists
    except ImportError:
        flat = tokens.tolist()
        ends = np.cumsum(lengths).tolist()
        return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]
    return rows_to_lists(tokens, lengths)


_NO_TOKENS = np.zeros(0, dtype=np.int32)
_NO_OFFSETS = np.zeros(2, dtype=np.int64)


def _row_array(values, n: int, name: str, default: int | None = None) -> np.ndarray:
    if values is None:
        if default is None:
            raise ValueError(f"{name} is required")
        return np.full(n, default, dtype=np.int64)
    a = np.asarray(values, dtype=np.int64)
    if a.shape != (n,):
        raise ValueError(f"{name} must have one entry per row ({n}), got {a.size}")
    return a


class SpecDrafter:
    """Drafter over the request lifecycle (see ``specdraft.proposers.base``)."""

    def __init__(self, config: DrafterConfig | dict | None = None, *, tokenizer=None,
                 chain_only: bool = False, vocab_size: int | None = None):
        cfg = config if isinstance(config, DrafterConfig) else DrafterConfig.from_dict(config)
        self.config = cfg
        self.chain_only = chain_only
        self.vocab_size = vocab_size
        self.core = make_core(cfg)
        self.native = type(self.core).__module__.endswith("_suffix_native")
        if not cfg.adaptive:
            self.controller = None
        elif self.native:
            self.controller = NativeController(self.core, cfg)
        else:
            self.controller = DraftLengthController(
                CostModel(cfg.cost_model), cfg.calibration_prior, cfg.request_prior,
                cfg.request_decay, cfg.idle_decay, cfg.min_gain, cfg.max_waste, cfg.match_prior,
                cfg.max_scopes)
            self.controller.scope_of = self.core.scope_of  # keys are the core's handles
        self._tree = cfg.strategy == "tree"
        self._handles: dict[object, int] = {}
        self._next = 0
        self._added = 0  # the last handle add_to_global_cache used (they count down from -1)
        self._counters = DrafterCounters()
        self._lock = threading.RLock()
        for path, scopes in corpus_entries(cfg.corpus_files):
            self.load_corpus(read_corpus(path, tokenizer), scopes)

    # ------------------------------------------------------------- lifecycle
    def _handle(self, req_id) -> int:
        h = self._handles.get(req_id)
        if h is None:
            raise KeyError(f"unknown request id {req_id!r}: start() it first")
        return h

    def _check_tokens(self, token_ids: Sequence[int], what: str) -> list[int]:
        toks = [int(t) for t in token_ids]
        V = self.vocab_size
        for t in toks:
            if t < 0 or (V is not None and t >= V):
                raise ValueError(f"{what}: token id {t} out of range; accepted "
                                 f"0 <= id < {V if V is not None else 2**31}")
        return toks

    def set_scope(self, req_id, scope: str | None) -> None:
        """The tenant scope of a request not started yet (None: the unscoped pool): it drafts
        only from its own history, its scope's earlier and live outputs and the corpora shared
        with its scope. The per-step paths start it in that scope when its first row comes."""
        if scope is not None and not isinstance(scope, str):
            raise TypeError(f"scope must be a string or None, got {type(scope).__name__}")
        with self._lock:
            h = self._handles.get(req_id)
            if h is None:
                if scope is None:
                    return
                h = self._handles[req_id] = self._next
                self._next += 1
            elif self.core.has(h):
                raise KeyError(f"request id {req_id!r} already started: its scope is fixed")
            self.core.set_scope(h, scope)

    def scope_of(self, req_id) -> str | None:
        """The scope of a request the drafter holds (None: unscoped, or unknown)."""
        with self._lock:
            h = self._handles.get(req_id)
            return None if h is None else self.core.scope_of(h)

    def start(self, req_id, prompt_token_ids: Sequence[int], scope: str | None = None) -> None:
        toks = self._check_tokens(prompt_token_ids, "prompt_token_ids")
        with self._lock:
            h = self._handles.get(req_id)
            if h is not None and self.core.has(h):
                raise KeyError(f"request id {req_id!r} already started")
            t0 = time.perf_counter()
            if h is None:
                h = self._next
                self._next += 1
            if scope is not None:
                self.core.set_scope(h, scope)
            self.core.start(h, toks)
            self._handles[req_id] = h
            self._counters.requests += 1
            self._counters.update_time_s += time.perf_counter() - t0

    def extend(self, req_id, token_ids: Sequence[int], num_accepted: int | None = None) -> None:
        toks = self._check_tokens(token_ids, "token_ids")
        with self._lock:
            h = self._handle(req_id)
            t0 = time.perf_counter()
            if toks:
                self.core.extend(h, toks)
            if num_accepted is not None:
                self._counters.accepted_tokens += num_accepted
                if self.controller is not None:
                    self.controller.observe(h, num_accepted)
            self._counters.update_time_s += time.perf_counter() - t0

    def has(self, req_id) -> bool:
        return req_id in self._handles

    def num_tokens(self, req_id) -> int:
        """Tokens of the request's history the drafter holds; -1 for a request not started
        (unknown, or only given its scope)."""
        with self._lock:
            h = self._handles.get(req_id)
            return self.core.num_tokens(h) if h is not None and self.core.has(h) else -1

    def finish(self, req_id) -> None:
        with self._lock:
            h = self._handles.pop(req_id, None)
            if h is None:
                raise KeyError(f"unknown request id {req_id!r}: start() it first")
            if not self.core.has(h):  # scoped, never started
                self.core.drop_scope(h)
                return
            t0 = time.perf_counter()
            self.core.finish(h)
            self._forget(h)
            self._counters.finished += 1
            self._counters.update_time_s += time.perf_counter() - t0

    def abort(self, req_id) -> None:
        with self._lock:
            h = self._handles.pop(req_id, None)
            if h is None:
                return  # aborting twice, or a request we never saw, is harmless
            if not self.core.has(h):  # scoped, never started
                self.core.drop_scope(h)
                return
            self.core.abort(h)
            self._forget(h)
            self._counters.aborted += 1

    def _forget(self, h: int) -> None:
        """Drop a request's controller state (its index state is already gone)."""
        if self.controller is not None:
            self.controller.forget(h)

    def load_corpus(self, sequences: Iterable[Sequence[int]], scopes=None) -> None:
        """Pin sequences in the global caches of ``scopes`` (None: every scope; a list may name
        None for the unscoped pool)."""
        with self._lock:
            for seq in sequences:
                toks = self._check_tokens(seq, "corpus")
                if scopes is None:
                    self.core.load_corpus(toks)
                else:
                    self.core.load_corpus(toks, list(scopes))

    def add_to_global_cache(self, token_ids: Sequence[int], scope: str | None = None) -> None:
        """Add a sequence to the global cache of ``scope`` as if a request had produced it:
        evictable under ``global_cache_tokens``, unlike a corpus (used for sequences other
        replicas learned)."""
        toks = self._check_tokens(token_ids, "token_ids")
        if not toks or self.config.strategy == "lookup":
            return
        with self._lock:
            # a handle of its own, below zero: the native engine step draws request handles
            # from the shared counter without this lock (the shared cache calls this from its
            # own thread)
            self._added -= 1
            h = self._added
            if scope is not None:
                self.core.set_scope(h, scope)
            self.core.start(h, [])
            self.core.extend(h, toks)
            self.core.finish(h, export=False)  # learned elsewhere: not exported again

    def export_finished(self, budget_tokens: int) -> None:
        """From now on the core keeps each request that finishes normally (per request, in a
        step, or ended by the native engine step) for ``drain_finished``: its scope and the
        tokens it adds to the global cache, at most ``budget_tokens`` waiting (oldest dropped
        first, counted by ``core.export_dropped_tokens()``). The shared cache publishes them."""
        with self._lock:
            self.core.enable_export(budget_tokens)

    def drain_finished(self) -> list:
        """[(scope or None, int32 array)] of the requests finished since the last call."""
        with self._lock:
            return self.core.drain_finished()

    # -------------------------------------------------------------- drafting
    def draft(self, req_id, budget: int | None = None) -> DraftTree:
        """The request's draft (at most ``budget`` nodes, default 16), sized by the controller as
        a batch of this request alone: a one-row ``step`` that brings no new tokens (the drafter
        holds the history ``start``/``extend`` gave it). A tree strategy's draft is a whole tree
        (its best chain for a ``chain_only`` drafter), with each node's probability."""
        budget = 16 if budget is None else budget
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        with self._lock:
            h = self._handle(req_id)
            if not self.core.has(h):
                raise KeyError(f"unknown request id {req_id!r}: start() it first")
            n = self.core.num_tokens(h)
            toks, _, parents, probs, match_lens = self._step(
                [req_id], _NO_TOKENS, [n], [n], [budget], token_offsets=_NO_OFFSETS, trees=True,
                detail=True)
            return DraftTree(toks.tolist(), parents.tolist(), probs.tolist(), int(match_lens[0]))

    # ------------------------------------------------------------ engine step
    def step(self, req_ids: Sequence[Hashable], token_ids: np.ndarray, num_tokens,
             num_prompt_tokens, budgets, *, rows=None, token_offsets=None, num_accepted=None,
             num_emitted=None, finished: Sequence[Hashable] = (),
             aborted: Sequence[Hashable] = (), max_len: int | None = None,
             trees: bool = False) -> StepDrafts:
        """One engine step for the whole batch: events, sync, drafts and their lengths.

        Rows (R of them; per-row integers are lists, tuples or 1-D numpy arrays of R entries):

        - ``req_ids``: the engine's request id of each row (any hashable, one row per request).
        - ``token_ids``/``num_tokens``: each row's token history, read from flat arrays. Either
          ``token_ids`` is an (N, L) buffer and row j's history is
          ``token_ids[rows[j], :num_tokens[j]]`` (``rows`` defaults to 0..R-1: vLLM's
          ``token_ids_cpu``), or ``token_ids`` is 1-D and ``token_offsets`` (R + 1 entries) says
          that ``token_ids[token_offsets[j]:token_offsets[j + 1]]`` are the *last* tokens of row
          j's history (positions up to ``num_tokens[j]``). The drafter reads only what it has
          not seen: the tokens past those it already holds, or the whole prompt for a request
          it does not know; a row that does not reach that far back is an error naming the row.
        - ``num_prompt_tokens``: prompt length (what a new request starts with).
        - ``budgets``: the most draft tokens the row may get this step (engine budget, per-request
          opt-out; one int for every row); 0 or less: the row is synced but gets no draft.
        - ``max_len``: if given, no draft takes a row's history past ``max_len`` tokens (the
          budget becomes ``min(budgets[j], max_len - num_tokens[j])``).
        - ``num_accepted``: draft tokens of the row's previous draft that the target accepted
          (-1 or None: unknown); applied only when ``num_emitted`` (tokens the engine emitted
          for the row this step; -1 or None: unchecked) equals the tokens new to the drafter.
        - ``finished`` / ``aborted``: request ids that left the engine since the last step
          (finished ones feed the global cache; unknown ids are ignored). They are applied
          before the rows. Preempted requests need no event: they are simply absent from the
          rows until they resume, and their history then continues where it was.

        Sync follows the engine's history: a request the drafter does not know is started with
        its prompt, a history that grew is extended, and a history shorter than what the drafter
        holds restarts the request. Token ids must lie in ``0..vocab_size-1``.

        Returns ``StepDrafts(tokens, lengths)``: row j's draft is a chain of ``lengths[j] <=
        budgets[j]`` tokens (tree drafts are reduced to their best chain), sized across the batch
        by the adaptive controller. With ``trees=True`` a tree strategy's drafts come back whole
        (``lengths[j]`` nodes, the first ones of the tree, as the controller sizes them) with
        ``StepDrafts.parents`` (each node's parent within its row, -1 for a root; chains for a
        chain strategy or a ``chain_only`` drafter). With the native core the whole step is one C++ call with the
        GIL released; otherwise (or with ``native=False``) ``_step_python`` does the same.
        """
        t0 = time.perf_counter()
        tokens = token_ids if isinstance(token_ids, np.ndarray) else np.asarray(token_ids)
        if tokens.dtype != np.int32 or not tokens.flags.c_contiguous:
            tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        with self._lock:
            toks, lengths, *parents = self._step(
                req_ids, tokens, num_tokens, num_prompt_tokens, budgets, rows=rows,
                token_offsets=token_offsets, num_accepted=num_accepted, num_emitted=num_emitted,
                finished=finished, aborted=aborted, max_len=max_len, trees=trees, t0=t0)
            return StepDrafts(toks, lengths, parents[0] if trees else None)

    def _step(self, req_ids, tokens, num_tokens, num_prompt_tokens, budgets, *, rows=None,
              token_offsets=None, num_accepted=None, num_emitted=None, finished=(), aborted=(),
              max_len=None, trees=False, detail=False, t0=None):
        """``step`` on an int32 token array (under the lock): (tokens, lengths), then with
        ``trees`` or ``detail`` the drafts' parents, and with ``detail`` their probs and each
        row's root match length (what ``draft`` returns as a ``DraftTree``)."""
        t0 = time.perf_counter() if t0 is None else t0
        handles = self._row_handles(req_ids)
        fin = self._pop_handles(finished) if finished else ()
        ab = self._pop_handles(aborted) if aborted else ()
        whole = bool(trees) and self._tree and not self.chain_only
        if self._native_step:
            toks, lengths, counts, *extra = self.core.step(
                handles, tokens, num_tokens, num_prompt_tokens, budgets, rows, token_offsets,
                num_accepted, num_emitted, fin, ab, self.vocab_size or 0, self._tree,
                -1 if max_len is None else max_len, whole, detail)
        else:
            toks, lengths, counts, *extra = self._step_python(
                handles, tokens, num_tokens, num_prompt_tokens, budgets, rows, token_offsets,
                num_accepted, num_emitted, fin, ab, max_len, whole, detail)
        self._counters.add_step_counts(counts, time.perf_counter() - t0)
        if detail:
            return (toks, lengths, *extra)
        if trees and not whole:  # chains: each node's parent is the one before it
            starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
            extra = [(np.arange(len(toks)) - starts - 1).astype(np.int32)]
        return (toks, lengths, extra[0]) if trees else (toks, lengths)

    @property
    def _native_step(self) -> bool:
        return self.native and hasattr(self.core, "step")

    def _row_handles(self, req_ids) -> list[int]:
        hs = list(map(self._handles.get, req_ids, repeat(-1)))
        if -1 in hs:  # requests new to the drafter (once in their life)
            for j, h in enumerate(hs):
                if h < 0:
                    r = req_ids[j]
                    h = self._handles.get(r)
                    if h is None:
                        h = self._handles[r] = self._next
                        self._next += 1
                    hs[j] = h
        return hs

    def _pop_handles(self, req_ids) -> list[int]:
        pop = self._handles.pop
        return [h for h in (pop(r, None) for r in req_ids) if h is not None]

    def _step_python(self, handles, tokens, num_tokens, num_prompt_tokens, budgets, rows,
                     token_offsets, num_accepted, num_emitted, finished, aborted, max_len,
                     trees=False, detail=False):
        """Plain-Python twin of the native step (proposers/native/step.h): the specification.

        ``trees``: keep tree drafts whole and return their parents as a fourth entry.
        ``detail``: return the drafts' parents, probs and each row's root match length."""
        R = len(handles)
        num_tokens = _row_array(num_tokens, R, "num_tokens")
        num_prompt = _row_array(num_prompt_tokens, R, "num_prompt_tokens")
        budgets = (np.full(R, int(budgets), dtype=np.int64) if isinstance(budgets, (int, np.integer))
                   else _row_array(budgets, R, "budgets"))
        num_accepted = _row_array(num_accepted, R, "num_accepted", -1)
        num_emitted = _row_array(num_emitted, R, "num_emitted", -1)
        if token_offsets is not None:
            if tokens.ndim != 1:
                raise ValueError("token_offsets needs a 1-D token_ids array")
            off = _row_array(token_offsets, R + 1, "token_offsets")
            row_offset = off[:-1]
            row_start = num_tokens - np.diff(off)
        else:
            if tokens.ndim != 2:
                raise ValueError("token_ids must be an (N, L) array, or 1-D with token_offsets")
            row_idx = np.arange(R, dtype=np.int64) if rows is None else _row_array(rows, R, "rows")
            if R and (row_idx.min() < 0 or row_idx.max() >= tokens.shape[0]):
                raise ValueError(f"rows must lie in 0..{tokens.shape[0] - 1}")
            row_offset = row_idx * tokens.shape[1]
            row_start = np.zeros(R, dtype=np.int64)
        if max_len is not None:
            budgets = np.minimum(budgets, max_len - num_tokens)
        tokens = tokens.reshape(-1)
        core, ctl = self.core, self.controller
        started = n_fin = n_ab = accepted = 0
        for h in finished:
            if core.has(h):
                core.finish(h)
                if ctl is not None:
                    ctl.forget(h)
                n_fin += 1
            else:  # never started: only its scope to forget
                core.drop_scope(h)
        for h in aborted:
            if core.has(h):
                core.abort(h)
                if ctl is not None:
                    ctl.forget(h)
                n_ab += 1
            else:
                core.drop_scope(h)
        vmax = self.vocab_size if self.vocab_size else 2 ** 31
        size = tokens.shape[0]

        def history(j: int, h: int, start: int, end: int) -> list[int]:
            if start < row_start[j]:
                raise ValueError(f"row {j} (request handle {h}): the drafter needs the history "
                                 f"from position {start} but the row's tokens start at position "
                                 f"{row_start[j]}")
            at = row_offset[j] + (start - row_start[j])
            last = row_offset[j] + (num_tokens[j] - row_start[j])
            if row_offset[j] < 0 or last > size:
                raise ValueError(f"row {j} (request handle {h}): its tokens [{at}, {last}) lie "
                                 f"outside the token array of {size}")
            toks = tokens[at:at + (end - start)].tolist()
            for t in toks:
                if t < 0 or t >= vmax:
                    raise ValueError(f"row {j} (request handle {h}): token id {t} out of range; "
                                     f"accepted 0 <= id < {vmax}")
            return toks

        for j, h in enumerate(handles):
            n = int(num_tokens[j])
            known = core.num_tokens(h) if core.has(h) else -1
            if known >= 0 and n < known:  # the engine discarded tokens: start over (same scope)
                core.abort(h, keep_scope=True)
                if ctl is not None:
                    ctl.forget(h)
                n_ab += 1
                known = -1
            if known < 0:
                known = max(0, min(int(num_prompt[j]), n))
                core.start(h, history(j, h, 0, known))
                started += 1
            if n > known:
                toks = history(j, h, known, n)
                acc = int(num_accepted[j])
                use = acc >= 0 and (num_emitted[j] < 0 or num_emitted[j] == n - known)
                core.extend(h, toks)
                if use:
                    accepted += acc
                    if ctl is not None:
                        ctl.observe(h, acc)

        keys, rows, drafts = [], [], []
        for j, h in enumerate(handles):
            if budgets[j] <= 0:
                continue
            toks, parents, probs, match_len = core.draft(h, int(budgets[j]), self._tree)
            t = DraftTree(list(toks), list(parents), list(probs), match_len)
            if self._tree and not trees:
                t = t.best_path()
            keys.append(h)
            rows.append(j)
            drafts.append(t)
        if ctl is not None:  # the pass holds every row, drafting or not
            batch = (len(handles), float(int(num_tokens.sum())), float(int(num_tokens.max(initial=0))))
            counts = ctl.choose(keys, [(t.parents, t.probs) for t in drafts], batch=batch,
                                match_lens=[t.match_len for t in drafts])
        else:
            counts = [len(t) for t in drafts]
        lengths = np.zeros(len(handles), dtype=np.int32)
        out: list[int] = []
        out_parents: list[int] = []
        out_probs: list[float] = []
        match_lens = np.zeros(len(handles) if detail else 0, dtype=np.int32)
        for h, j, t, k in zip(keys, rows, drafts, counts):
            t = t.truncate(k)
            if ctl is not None:  # the chain it will see verified: a tree's best path
                ctl.sent(h, t.chain_probs(), t.match_len)
            out.extend(t.token_ids)
            out_parents.extend(t.parents)
            out_probs.extend(t.probs)
            lengths[j] = len(t)
            if detail:
                match_lens[j] = t.match_len
        result = (np.array(out, dtype=np.int32), lengths,
                  (started, n_fin, n_ab, accepted, int(np.count_nonzero(lengths)), len(out)))
        if detail:
            return result + (np.array(out_parents, dtype=np.int32),
                             np.array(out_probs, dtype=np.float64), match_lens)
        return result + (np.array(out_parents, dtype=np.int32),) if trees else result

    def reset(self) -> None:
        """Forget every live request (after a failure; the engine's history rebuilds them, each
        in the scope it had)."""
        with self._lock:
            scopes = {}
            for r, h in list(self._handles.items()):
                scope = self.core.scope_of(h)
                if scope is not None:
                    scopes[r] = scope
                if self.core.has(h):
                    self.core.abort(h)
                self.core.drop_scope(h)
                if self.controller is not None:
                    self.controller.forget(h)
                self._counters.aborted += 1
            self._handles.clear()
            for r, scope in scopes.items():
                self.set_scope(r, scope)

    def req_ids(self) -> list:
        """The engine request ids the drafter holds state for."""
        with self._lock:
            return list(self._handles)

    def report_step(self, num_scored_tokens: int, seconds: float) -> None:
        """Verification-cost feedback: one target pass scored this many tokens in this time."""
        if self.controller is not None:
            with self._lock:
                self.controller.observe_pass(num_scored_tokens, seconds)

    def count_error(self) -> None:
        with self._lock:
            self._counters.errors += 1

    # ------------------------------------------------------------ accounting
    @property
    def counters(self) -> DrafterCounters:
        return self._counters

    def metrics(self) -> dict:
        with self._lock:
            s = self._counters
            m = s.as_dict()
            m["live_requests"] = len(self._handles)
            m["global_cache_tokens"] = self.core.global_tokens()
            m["global_cache_nodes"] = self.core.global_nodes()
            m["cache_scopes"] = self.core.num_scopes()
            m["scope_cache_tokens_top"] = list(self.core.scope_tokens(SCOPE_TOKENS_TOP))
            if hasattr(self.core, "memory_bytes"):
                m["global_cache_bytes"] = self.core.memory_bytes()
            m["acceptance_rate"] = s.accepted_tokens / s.drafted_tokens if s.drafted_tokens else 0.0
            m["chosen_draft_lengths"] = dict(self.controller.chosen_lengths) if self.controller else {}
            m["native"] = self.native
            return m


def make_drafter(options: dict | DrafterConfig | None = None, **kwargs) -> SpecDrafter:
    """Validate ``options`` (raises SpecdraftConfigError) and build a drafter."""
    drafter = SpecDrafter(options, **kwargs)
    if drafter.config.shared_cache:  # one suffix cache shared by all replicas (Ray)
        from specdraft.proposers.shared_cache import SharedCacheDrafter

        return SharedCacheDrafter(drafter, drafter.config.shared_cache)
    return drafter
