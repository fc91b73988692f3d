"""``SpecDrafter``: the engine-facing drafter behind every adapter.

It maps engine request ids to core handles, runs the draft core (native suffix index, its Python
twin, or prompt lookup), applies the adaptive draft-length controller across the batch, and keeps
the counters adapters export. One instance per engine worker; every public method holds one lock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterable, Sequence

from specdraft.proposers.base import DraftTree, DrafterStats, SpecdraftConfigError
from specdraft.proposers.config import DrafterConfig
from specdraft.proposers.controller import CostModel, DraftLengthController
from specdraft.proposers.corpus import read_corpus
from specdraft.proposers.lookup import PromptLookupCore
from specdraft.proposers.suffix_core import SuffixCore

logger = logging.getLogger("specdraft")


def native_core_class():
    """The C++ SuffixCore, or None when the extension is not built."""
    try:
        from specdraft.proposers import _suffix_native
    except ImportError:
        return None
    return getattr(_suffix_native, "SuffixCore", None)


def make_core(cfg: DrafterConfig):
    if cfg.strategy == "lookup":
        return PromptLookupCore(cfg.lookup_min, cfg.lookup_max)
    kwargs = dict(max_depth=cfg.max_depth, global_cache_tokens=cfg.global_cache_tokens,
                  max_children=cfg.max_children if cfg.strategy == "tree" else 1,
                  min_path_prob=cfg.min_path_prob, cache_prompts=cfg.cache_prompts)
    cls = native_core_class() if cfg.native in ("auto", True) else None
    if cls is None and cfg.native is True:
        raise SpecdraftConfigError("invalid specdraft option native=True: the native extension "
                                   "specdraft.proposers._suffix_native is not built; accepted: "
                                   "'auto' or false, or reinstall specdraft with a C++ compiler")
    return (cls or SuffixCore)(**kwargs)


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
        self.controller = DraftLengthController(
            CostModel(cfg.cost_model), cfg.calibration_prior, cfg.request_prior,
            cfg.request_decay, cfg.idle_decay, cfg.min_gain) if cfg.adaptive else None
        self._tree = cfg.strategy == "tree"
        self._handles: dict[object, int] = {}
        self._next_handle = 0
        self._stats = DrafterStats()
        self._lock = threading.RLock()
        for path in cfg.corpus_files:
            self.load_corpus(read_corpus(path, tokenizer))

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

    def start(self, req_id, prompt_token_ids: Sequence[int]) -> None:
        toks = self._check_tokens(prompt_token_ids, "prompt_token_ids")
        with self._lock:
            if req_id in self._handles:
                raise KeyError(f"request id {req_id!r} already started")
            t0 = time.perf_counter()
            h = self._next_handle
            self._next_handle += 1
            self.core.start(h, toks)
            self._handles[req_id] = h
            self._stats.requests += 1
            self._stats.update_time_s += time.perf_counter() - t0

    def extend(self, req_id, token_ids: Sequence[int], num_accepted: int | None = None) -> None:
        toks = self._check_tokens(token_ids, "token_ids")
        with self._lock:
            h = self._handle(req_id)
            t0 = time.perf_counter()
            if toks:
                self.core.extend(h, toks)
            if num_accepted is not None:
                self._stats.accepted_tokens += num_accepted
                if self.controller is not None:
                    self.controller.observe(h, num_accepted)
            self._stats.update_time_s += time.perf_counter() - t0

    def has(self, req_id) -> bool:
        return req_id in self._handles

    def num_tokens(self, req_id) -> int:
        with self._lock:
            return self.core.num_tokens(self._handle(req_id))

    def finish(self, req_id) -> None:
        with self._lock:
            h = self._handles.pop(req_id, None)
            if h is None:
                raise KeyError(f"unknown request id {req_id!r}: start() it first")
            t0 = time.perf_counter()
            self.core.finish(h)
            if self.controller is not None:
                self.controller.forget(h)
            self._stats.finished += 1
            self._stats.update_time_s += time.perf_counter() - t0

    def abort(self, req_id) -> None:
        with self._lock:
            h = self._handles.pop(req_id, None)
            if h is None:
                return  # aborting twice, or a request we never saw, is harmless
            self.core.abort(h)
            if self.controller is not None:
                self.controller.forget(h)
            self._stats.aborted += 1

    def load_corpus(self, sequences: Iterable[Sequence[int]]) -> None:
        with self._lock:
            for seq in sequences:
                self.core.load_corpus(self._check_tokens(seq, "corpus"))

    # -------------------------------------------------------------- drafting
    def draft(self, req_id, budget: int | None = None) -> DraftTree:
        return self.draft_batch([req_id], budget)[0]

    def draft_batch(self, req_ids: Sequence, max_budget: int | None = None) -> list[DraftTree]:
        """Drafts for a batch, sized together by the controller; each has <= max_budget nodes."""
        budget = 16 if max_budget is None else max_budget
        if budget < 0:
            raise ValueError(f"max_budget must be >= 0, got {budget}")
        with self._lock:
            t0 = time.perf_counter()
            handles = [self._handle(r) for r in req_ids]
            trees = []
            for h in handles:
                toks, parents, probs, match_len = self.core.draft(h, budget, self._tree)
                t = DraftTree(list(toks), list(parents), list(probs), match_len)
                if self.chain_only and self._tree:
                    t = t.best_path()
                trees.append(t)
            if self.controller is not None:
                counts = self.controller.choose(handles, [(t.parents, t.probs) for t in trees])
                trees = [t.truncate(k) for t, k in zip(trees, counts)]
                for h, t in zip(handles, trees):
                    self.controller.sent(h, t.best_path().probs if not t.is_chain() else t.probs)
            st = self._stats
            for t in trees:
                if len(t):
                    st.drafts += 1
                    st.drafted_tokens += len(t)
            st.draft_time_s += time.perf_counter() - t0
            return trees

    def report_step(self, num_scored_tokens: int, seconds: float) -> None:
        """Verification-cost feedback: one target pass scored this many tokens in this time."""
        if self.controller is not None:
            with self._lock:
                self.controller.cost_model.observe(num_scored_tokens, seconds)

    def count_error(self) -> None:
        with self._lock:
            self._stats.errors += 1

    # ------------------------------------------------------------ accounting
    @property
    def stats(self) -> DrafterStats:
        return self._stats

    def metrics(self) -> dict:
        with self._lock:
            s = self._stats
            m = s.as_dict()
            m["live_requests"] = len(self._handles)
            m["global_cache_tokens"] = self.core.global_tokens()
            m["global_cache_nodes"] = self.core.global_nodes()
            if hasattr(self.core, "memory_bytes"):
                m["global_cache_bytes"] = self.core.memory_bytes()
            m["acceptance_rate"] = s.accepted_tokens / s.drafted_tokens if s.drafted_tokens else 0.0
            m["chosen_draft_lengths"] = dict(self.controller.chosen_lengths) if self.controller else {}
            m["native"] = self.native
            return m


def make_drafter(options: dict | DrafterConfig | None = None, **kwargs) -> SpecDrafter:
    """Validate ``options`` (raises SpecdraftConfigError) and build a drafter."""
    return SpecDrafter(options, **kwargs)
