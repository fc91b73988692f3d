"""Everything specdraft knows about SGLang 0.5.x, in one place (checked against 0.5.23).

SGLang facts this module relies on:

* Plugins: every SGLang process runs the ``sglang.srt.plugins`` entry points
  (``sglang.srt.plugins.load_plugins``); an exception there is logged and swallowed, so errors
  that must stop start-up are raised from the algorithm's server-argument hooks instead.
* ``SpeculativeAlgorithm.register(NAME, supports_overlap=..., validate_server_args=...,
  spec_class=...)`` (``srt/speculative/spec_info.py`` -> ``spec_registry.py``) registers a
  ``CustomSpecAlgo``. In 0.5.23 that class lacks ``create_future_map``,
  ``carries_draft_hidden_states``, ``need_topk`` and ``get_platform_worker_cls``, which the
  scheduler calls on the algorithm object, and its ``is_*``/``supports_*``/``has_draft_kv``
  answers are those of no built-in algorithm. The scheduler, the overlap future map, the CUDA
  graph runner and the KV sizing branch on ``is_ngram()``; answering every such question as
  ``SpeculativeAlgorithm.NGRAM`` does gives this algorithm NGRAM's schedule: tree verification
  in one target pass with a custom mask, greedy tree walk or tree rejection sampling, and the
  accepted path compacted in the paged KV cache (``move_accept_tokens_to_target_kvcache``).
* ``handle_speculative_decoding`` runs a custom algorithm's ``validate_server_args`` and then its
  ``handle_server_args`` on a stand-in that records field writes (``record_foreign_defaults``).
  NGRAM's own hook, ``_handle_ngram``, sets max_running_requests (48), mixed chunk off,
  ``speculative_eagle_topk`` (= ``speculative_ngram_max_bfs_breadth``), the default of 12 draft
  tokens, ``speculative_num_steps``, and overlap off on CPU; called with the stand-in, its
  declarations land on the record being resolved.
* ``NGRAMWorker`` (``srt/speculative/ngram_worker.py``) builds its corpus as
  ``NgramCorpus(min_bfs_breadth=..., max_bfs_breadth=..., match_type=..., capacity=...,
  max_trie_depth=..., draft_token_num=N, ...)`` in ``__init__`` and per decode step calls
  ``synchronize()``, then ``batch_get(req_ids, tails, total_lens)`` from
  ``_prepare_draft_tokens(batch)``: ``tails[i]`` are the last ``max_trie_depth`` tokens of
  request i (prompt + output + the tokens accepted last step under overlap scheduling),
  ``total_lens[i]`` its full length. The answer is ``(tokens[bs*N], mask[bs*N*N])``: per
  request N nodes, node 0 the last context token, ``mask[i, j]`` true when node j is node i or
  one of its ancestors. Positions, retrieve indices and sibling links are derived from the mask
  (``reconstruct_indices_from_tree_mask``: parent = the largest ancestor index). After the
  verify pass it calls ``batch_put(tails)`` and ``erase_match_state(rids)`` for the requests
  that left the decode batch (finished, aborted or retracted; ``req.finished()`` may flip one
  iteration later under overlap scheduling). ``clear_cache_pool`` calls ``reset()``;
  the external-corpus endpoints call ``load_external_corpus_named``,
  ``commit_external_corpus_load``, ``remove_external_corpus`` and ``list_external_corpora``.
* ``Req``: ``rid``, ``origin_input_ids_unpadded`` (the prompt), ``output_ids`` (kept across
  retraction), ``finished()``, ``finished_reason`` (``FINISH_ABORT`` for aborts), and
  ``cache_salt`` (the request's ``cache_salt`` field, SGLang's per-request key for isolating
  its prefix cache: specdraft's tenant scope; None or "" without one).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from typing import Any, Iterable, Sequence

import numpy as np

from specdraft.proposers.base import DraftTree, SpecdraftConfigError, accepted_count

SUPPORTED = ((0, 5, 23), (0, 5, 24))  # only 0.5.23's internals were checked
ALGORITHM = "SPECDRAFT"
OPTIONS_ENV = "SPECDRAFT_SGLANG_OPTIONS"  # a JSON object, or the path of a JSON file holding one
DEFAULT_NUM_DRAFT_TOKENS = 12            # what SGLang's NGRAM hook sets when none is given

logger = logging.getLogger("sglang.specdraft")


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------

def load_options(environ: dict | None = None) -> dict:
    """specdraft options for SGLang, from ``$SPECDRAFT_SGLANG_OPTIONS`` (validated).

    The variable holds a JSON object or the path of a JSON file holding one; unset means defaults.
    SGLang's server arguments have no free-form field a plugin may use, and the environment
    reaches every process SGLang starts.
    """
    from specdraft.proposers.config import DrafterConfig

    raw = (os.environ if environ is None else environ).get(OPTIONS_ENV, "").strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        text, where = raw, f"${OPTIONS_ENV}"
    else:
        if not os.path.isfile(raw):
            raise SpecdraftConfigError(
                f"${OPTIONS_ENV}={raw!r}: not a file and not a JSON object; accepted: a JSON "
                "object of specdraft options, or the path of a JSON file holding one")
        with open(raw, encoding="utf-8") as f:
            text, where = f.read(), f"{raw} (from ${OPTIONS_ENV})"
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecdraftConfigError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(options, dict):
        raise SpecdraftConfigError(f"{where}: expected a JSON object of specdraft options, got "
                                   f"{type(options).__name__}")
    try:
        DrafterConfig.from_dict(options)
    except SpecdraftConfigError as e:
        raise SpecdraftConfigError(f"{where}: {e}") from None
    except TypeError as e:
        raise SpecdraftConfigError(f"{where}: {e}") from None
    return options


def check_server_args(args: Any) -> None:
    """Start-up checks of SGLang server arguments for this algorithm (raises with the fix)."""
    n = getattr(args, "speculative_num_draft_tokens", None)
    if n is not None and (not isinstance(n, int) or n < 2):
        raise SpecdraftConfigError(
            f"--speculative-num-draft-tokens={n!r} with --speculative-algorithm {ALGORITHM}: "
            "accepted an integer >= 2 (the last context token plus at least one draft token)")
    corpus = getattr(args, "speculative_ngram_external_corpus_path", None)
    if corpus is not None:
        raise SpecdraftConfigError(
            f"--speculative-ngram-external-corpus-path={corpus!r} is read by SGLang's NGRAM corpus, "
            f"not by {ALGORITHM}; give specdraft corpora as the option corpus_files in "
            f"${OPTIONS_ENV} instead")
    load_options()


def tree_breadth(options: dict) -> int:
    """Widest branching of the drafts (SGLang's ``speculative_eagle_topk`` for NGRAM trees)."""
    from specdraft.proposers.config import DrafterConfig

    cfg = DrafterConfig.from_dict(options)
    return cfg.max_children if cfg.strategy == "tree" else 1


# ---------------------------------------------------------------------------------------------
# Draft trees in SGLang's NGRAM layout
# ---------------------------------------------------------------------------------------------

def pack_tree(last_token: int, tree: DraftTree, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """One request's ``(tokens[N], mask[N, N])`` as SGLang's NGRAM verification reads them.

    Node 0 is the last context token; draft node i becomes node i + 1 (parents come before
    children in both). Unused nodes up to N are padding that verification can never accept:
    each is its own root (its mask row is only itself), so no node links to it, whereas SGLang's
    own corpus pads with token-0 children of the root, which a target predicting token 0 accepts.
    """
    k = len(tree)
    if k > num_nodes - 1:
        raise ValueError(f"draft of {k} nodes does not fit {num_nodes} verification nodes")
    tokens = np.full(num_nodes, last_token, dtype=np.int64)
    mask = np.zeros((num_nodes, num_nodes), dtype=np.int64)
    mask[0, 0] = 1
    for i in range(k):
        node = i + 1
        parent = tree.parents[i] + 1  # -1 (child of the last context token) -> node 0
        tokens[node] = tree.token_ids[i]
        mask[node, : parent + 1] = mask[parent, : parent + 1]
        mask[node, node] = 1
    for node in range(k + 1, num_nodes):
        mask[node, node] = 1
    return tokens, mask


class _Request:
    __slots__ = ("known", "shift", "drafted", "resumed")

    def __init__(self, known: int, shift: int = 0):
        self.known = known      # tokens of the engine's history the drafter has seen
        self.shift = shift      # engine positions before the drafter's first (no Req: the tail)
        self.drafted = 0        # draft nodes sent for the pass in flight
        self.resumed = False    # came back after leaving the decode batch (retracted)

    def accepted(self, num_new: int) -> int:
        """Accepted draft nodes of the pass in flight, from the tokens it added (-1: unknown)."""
        return -1 if self.resumed else accepted_count(num_new, self.drafted)


class _Rows:
    """The rows of one ``SpecDrafter.step`` call, in its token_offsets layout."""

    def __init__(self):
        self.rids: list[str] = []
        self.tokens: list[int] = []
        self.offsets = [0]
        self.totals: list[int] = []
        self.prompts: list[int] = []
        self.accepted: list[int] = []

    def add(self, rid: str, tokens: Sequence[int], total: int, prompt: int, accepted: int):
        self.rids.append(rid)
        self.tokens.extend(tokens)
        self.offsets.append(len(self.tokens))
        self.totals.append(total)
        self.prompts.append(prompt)
        self.accepted.append(accepted)

    def step(self, drafter: Any, caps, **events):
        return drafter.step(self.rids, np.array(self.tokens, dtype=np.int32), self.totals,
                            self.prompts, caps, token_offsets=self.offsets,
                            num_accepted=self.accepted, trees=True, **events)


def request_scope(req: Any) -> str | None:
    """A request's tenant scope: its ``cache_salt`` (None without a Req or a salt)."""
    salt = getattr(req, "cache_salt", None)
    return salt if isinstance(salt, str) and salt else None


class SpecdraftCorpus:
    """SGLang's NGRAM corpus interface, answered by a specdraft drafter.

    Each ``batch_get`` is one ``SpecDrafter.step`` (whole tree drafts): every row gives the
    tokens the engine added since the drafter last saw it, or its whole history (prompt and
    output when the worker bound its ``Req``) when it is new or its history shrank (the step then
    starts it over); the step finishes (feeding the global cache) or aborts the requests SGLang
    reported leaving the decode batch once their ``Req`` says how they ended (a finished one's
    last pass is given to the drafter first), and counts what was accepted of each row's
    previous draft. A proposer
    failure never stops the step: the batch goes on without drafts, the failure is counted and
    logged once, and the requests restart from the engine's history at the next step.
    """

    def __init__(self, drafter: Any, draft_token_num: int):
        if draft_token_num < 2:
            raise SpecdraftConfigError(
                f"speculative_num_draft_tokens={draft_token_num}: accepted an integer >= 2")
        self.drafter = drafter
        self.draft_token_num = draft_token_num
        self._live: dict[str, _Request] = {}
        self._reqs: dict[str, Any] = {}       # rid -> SGLang Req, while the request is known
        self._departed: set[str] = set()      # left the decode batch, outcome not yet known
        self._corpora: dict[str, int] = {}    # external corpora loaded: id -> tokens
        self._failure_logged = False
        self._lock = threading.Lock()

    # -------------------------------------------------------------- request identity
    def bind_requests(self, reqs: Iterable[Any]) -> None:
        """The decode batch's ``Req`` objects (full prompt, output, finish reason)."""
        with self._lock:
            for req in reqs:
                self._reqs[req.rid] = req

    @staticmethod
    def _history(req: Any, tail: Sequence[int], total_len: int) -> tuple[list[int], int]:
        # (a Req is needed for the scope too: without one, a request drafts unscoped)
        """(tokens[:total_len], prompt length) of a request from its ``Req`` and tail."""
        prompt = list(req.origin_input_ids_unpadded)
        tokens = prompt + list(req.output_ids)
        missing = total_len - len(tokens)  # accepted last step, not yet in output_ids (overlap)
        if missing > 0:
            tokens += list(tail[len(tail) - missing:])
        return tokens[:total_len], min(len(prompt), total_len)

    def _row(self, rows: _Rows, rid: str, tail: Sequence[int], total_len: int) -> None:
        """Row of a request in the decode batch: the tokens new to the drafter, or its whole
        history when it is new or restarts (the step restarts a request whose history shrank)."""
        st = self._live.get(rid)
        if st is not None and total_len >= st.known:
            new = total_len - st.known
            if new <= len(tail):
                added = list(tail[len(tail) - new:]) if new else []
            else:
                added = self._history(self._reqs[rid], tail, total_len)[0][st.known:]
            rows.add(rid, added, total_len - st.shift, 0, st.accepted(new) if new else -1)
            if new:
                st.known, st.resumed, st.drafted = total_len, False, 0
            return
        req = self._reqs.get(rid)
        if st is None:
            if self.drafter.has(rid):  # state this corpus did not start (direct use)
                self.drafter.abort(rid)
            scope = request_scope(req)
            if scope is not None:
                self.drafter.set_scope(rid, scope)
        if req is not None:
            tokens, prompt_len = self._history(req, tail, total_len)
        else:  # no Req bound (direct use): the tail is all we know of this request
            tokens, prompt_len = list(tail), len(tail)
        rows.add(rid, tokens, len(tokens), prompt_len, -1)
        self._live[rid] = _Request(total_len, total_len - len(tokens))

    def _settle_departures(self, in_batch: set[str]) -> tuple[list[str], list[str]]:
        """Requests whose departure is now explained: (finished, aborted). The last pass of a
        finished one is given to the drafter here (rows without drafts) before it finishes."""
        finished, aborted, last = [], [], _Rows()
        for rid in list(self._departed):
            req = self._reqs.get(rid)
            if rid in in_batch:  # retracted and resumed
                self._departed.discard(rid)
                if rid in self._live:
                    self._live[rid].resumed = True
            elif req is None or req.finished():
                self._departed.discard(rid)
                self._reqs.pop(rid, None)
                st = self._live.pop(rid, None)
                if st is None:
                    continue
                if req is None or type(req.finished_reason).__name__ == "FINISH_ABORT":
                    aborted.append(rid)
                    continue
                final = list(req.origin_input_ids_unpadded) + list(req.output_ids)
                if len(final) > st.known:  # the tokens of its last pass
                    added = final[st.known:]
                    last.add(rid, added, len(final) - st.shift, 0, st.accepted(len(added)))
                finished.append(rid)
        if last.rids:
            last.step(self.drafter, 0)
        return finished, aborted

    # ------------------------------------------------------------- corpus interface
    def synchronize(self) -> None:
        """Called before each ``batch_get``; specdraft has no background work to wait for."""

    def batch_get(self, req_ids: Sequence[str], tails: Sequence[Sequence[int]],
                  total_lens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        n = self.draft_token_num
        bs = len(req_ids)
        with self._lock:
            trees: list[DraftTree] = [DraftTree()] * bs
            try:  # one engine step: departures, every row's new tokens, the drafts
                finished, aborted = self._settle_departures(set(req_ids))
                rows = _Rows()
                for rid, tail, total in zip(req_ids, tails, total_lens):
                    self._row(rows, rid, tail, int(total))
                trees = rows.step(self.drafter, n - 1, finished=finished,
                                  aborted=aborted).trees()
            except Exception:  # noqa: BLE001 - the step goes on without drafts
                self._failed(req_ids)
                trees = [DraftTree()] * bs
            tokens = np.empty(bs * n, dtype=np.int64)
            mask = np.empty(bs * n * n, dtype=np.int64)
            for b, (rid, tail, tree) in enumerate(zip(req_ids, tails, trees)):
                t, m = pack_tree(int(tail[-1]), tree, n)
                tokens[b * n:(b + 1) * n] = t
                mask[b * n * n:(b + 1) * n * n] = m.reshape(-1)
                if rid in self._live:
                    self._live[rid].drafted = len(tree)
            return tokens, mask

    def _failed(self, req_ids: Sequence[str]) -> None:
        self.drafter.count_error()
        if not self._failure_logged:
            self._failure_logged = True
            logger.exception("specdraft: the drafter failed; this step runs without drafts and "
                             "its requests restart from the engine's history (logged once; "
                             "failures are counted)")
        for rid in req_ids:
            self._live.pop(rid, None)
        # drop what the drafter holds of these and of requests settled in the failed step
        for rid in self.drafter.req_ids():
            if rid not in self._live:
                try:
                    self.drafter.abort(rid)
                except Exception:  # noqa: BLE001 - its state is dropped either way
                    pass

    def batch_put(self, batch_tokens: Sequence[Sequence[int]]) -> None:
        """SGLang's NGRAM inserts tails into its trie here; specdraft learns in ``batch_get``."""

    def erase_match_state(self, req_ids: Sequence[str]) -> None:
        """Requests that left the decode batch: finished, aborted, or retracted (may return)."""
        with self._lock:
            self._departed.update(r for r in req_ids if r in self._live)
            try:
                finished, aborted = self._settle_departures(set())
                if finished or aborted:
                    _Rows().step(self.drafter, 0, finished=finished, aborted=aborted)
            except Exception:  # noqa: BLE001 - never stops the engine
                self._failed(())

    def reset(self) -> None:
        """SGLang's cache flush: forget every request (the global cache is kept)."""
        with self._lock:
            if self._live:
                _Rows().step(self.drafter, 0, aborted=list(self._live))
            self._live.clear()
            self._reqs.clear()
            self._departed.clear()

    # -------------------------------------------------------- external corpus endpoints
    def load_external_corpus_named(self, corpus_id: str, chunks: Iterable[Sequence[int]]) -> int:
        if corpus_id in self._corpora:
            raise ValueError(f"External corpus '{corpus_id}' already exists.")
        seqs = [list(c) for c in chunks]
        with self._lock:
            self.drafter.load_corpus(seqs)
        return sum(len(s) for s in seqs)

    def commit_external_corpus_load(self, corpus_id: str, loaded_token_count: int) -> None:
        self._corpora[corpus_id] = loaded_token_count

    def remove_external_corpus(self, corpus_id: str) -> None:
        raise ValueError(f"{ALGORITHM} cannot remove a loaded corpus ('{corpus_id}'): its index "
                         "is append-only; restart the server without it")

    def list_external_corpora(self) -> dict[str, int]:
        return dict(self._corpora)


# ---------------------------------------------------------------------------------------------
# The algorithm SGLang sees
# ---------------------------------------------------------------------------------------------

def make_drafter(options: dict, vocab_size: int | None = None, tokenizer: Any = None):
    from specdraft.proposers import make_drafter as _make

    return _make(options, tokenizer=tokenizer, vocab_size=vocab_size)


@functools.lru_cache(maxsize=None)
def worker_class() -> type:
    """``NGRAMWorker`` drafting with specdraft (imports SGLang's GPU modules: call in workers)."""
    from sglang.srt.speculative import ngram_worker

    class SpecdraftWorker(ngram_worker.NGRAMWorker):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            options = load_options()
            model_config = target_worker.model_runner.model_config
            drafter = make_drafter(options, vocab_size=getattr(model_config, "vocab_size", None),
                                   tokenizer=getattr(target_worker, "tokenizer", None))

            def corpus(*, draft_token_num: int, **_ngram_settings) -> SpecdraftCorpus:
                return SpecdraftCorpus(drafter, draft_token_num)

            # NGRAMWorker.__init__ builds its corpus from the module-level name NgramCorpus
            # (a JIT-compiled C++ trie); build ours there instead, for this call only.
            with _CORPUS_SWAP:
                original = ngram_worker.NgramCorpus
                ngram_worker.NgramCorpus = corpus
                try:
                    super().__init__(server_args, gpu_id, nccl_port, target_worker)
                finally:
                    ngram_worker.NgramCorpus = original
            self.specdraft_drafter = drafter
            logger.info("specdraft: %s drafting %d-node trees (options: %s)", ALGORITHM,
                        self.draft_token_num, options or "defaults")

        def _prepare_draft_tokens(self, batch):
            self.ngram_corpus.bind_requests(batch.reqs)
            return super()._prepare_draft_tokens(batch)

    return SpecdraftWorker


_CORPUS_SWAP = threading.Lock()


def _ngram():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return SpeculativeAlgorithm.NGRAM


def missing_methods() -> list[str]:
    """Methods ``SpeculativeAlgorithm`` has that SGLang's ``CustomSpecAlgo`` lacks."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    return sorted(name for name, v in vars(SpeculativeAlgorithm).items()
                  if callable(v) and not name.startswith("_") and not hasattr(CustomSpecAlgo, name)
                  and name not in ("from_string", "register"))


# Questions the scheduler asks an algorithm, answered as NGRAM answers them.
_AS_NGRAM_PREFIXES = ("is_", "supports_", "has_", "need_", "carries_")


def spec_class(version_error: str | None = None) -> type:
    """The ``CustomSpecAlgo`` subclass SGLang dispatches on (``version_error``: refuse to start)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    def as_ngram(name: str):
        def method(self, *args, **kwargs):
            return getattr(_ngram(), name)(*args, **kwargs)
        method.__name__ = name
        method.__doc__ = f"As SpeculativeAlgorithm.NGRAM.{name}()."
        return method

    namespace: dict[str, Any] = {
        name: as_ngram(name) for name, v in vars(SpeculativeAlgorithm).items()
        if callable(v) and name.startswith(_AS_NGRAM_PREFIXES)}

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens=True,
                          needs_confidence_relay=False):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens,
                         needs_confidence_relay)

    def get_platform_worker_cls(self):
        return None  # out-of-tree platforms replace built-in workers, not plugin ones

    def handle_server_args(self, server_args):
        if version_error:
            raise RuntimeError(version_error)
        # NGRAM's hook, with the tree breadth of specdraft's drafts as SGLang's topk
        server_args.speculative_ngram_max_bfs_breadth = tree_breadth(load_options())
        from sglang.srt.arg_groups.speculative_hook import _handle_ngram

        _handle_ngram(server_args)

    def create_worker(self, server_args):
        if version_error:
            raise RuntimeError(version_error)
        return CustomSpecAlgo.create_worker(self, server_args)

    namespace.update(create_future_map=create_future_map,
                     get_platform_worker_cls=get_platform_worker_cls,
                     handle_server_args=handle_server_args, create_worker=create_worker,
                     __doc__="specdraft drafts verified by SGLang's NGRAM tree verification.")
    cls = type("SpecdraftAlgorithm", (CustomSpecAlgo,), namespace)
    still_missing = [m for m in missing_methods() if not hasattr(cls, m)]
    if still_missing:
        raise RuntimeError(f"specdraft's SGLang adapter does not define {still_missing}")
    return cls


def validate_server_args_fn(version_error: str | None = None):
    def validate_server_args(server_args) -> None:
        if version_error:
            raise RuntimeError(version_error)
        check_server_args(server_args)
    return validate_server_args


def register(version_error: str | None = None) -> str:
    """Register ``SPECDRAFT`` with SGLang (idempotent); returns what happened."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    if get_spec(ALGORITHM) is not None:
        return "already registered"

    def factory(server_args) -> type:
        return worker_class()

    SpeculativeAlgorithm.register(
        ALGORITHM, supports_overlap=True,
        validate_server_args=validate_server_args_fn(version_error),
        spec_class=spec_class(version_error))(factory)
    return "registered"
