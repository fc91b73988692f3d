"""SGLang's NGRAM corpus interface answered by a specdraft drafter, and draft trees in NGRAM's
verification layout (facts: the package's docstring)."""

from __future__ import annotations

import threading
from typing import Any, Iterable, Sequence

import numpy as np

from specdraft.adapters.sglang_v0_5.options import ALGORITHM, logger
from specdraft.proposers.base import DraftTree, SpecdraftConfigError, accepted_count


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

    def step(self, drafter: Any, budgets, **events):
        return drafter.step(self.rids, np.array(self.tokens, dtype=np.int32), self.totals,
                            self.prompts, budgets, token_offsets=self.offsets,
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
