"""Prompt lookup: copy what followed the most recent earlier occurrence of the context's tail.

The baseline every lookup drafter is measured against (vLLM's ``ngram`` method and Hugging Face's
prompt lookup decoding do the same within the request). The longest n-gram in
[lookup_min, lookup_max] that occurred before wins; the draft copies what followed it. Same API as
``SuffixCore`` so the drafter, the controller and replay treat both alike.

A dict per n-gram length maps the gram to its latest end position that has a continuation, so an
append costs O(lookup_max - lookup_min + 1) and a draft O(lookup_max + budget).
"""

from __future__ import annotations

from specdraft.proposers.suffix_core import ExportsFinished, FinishedOutbox


class _Request:
    __slots__ = ("tokens", "last", "num_prompt")

    def __init__(self, nmin: int, nmax: int):
        self.tokens: list[int] = []
        self.last: list[dict] = [dict() for _ in range(nmax - nmin + 1)]
        self.num_prompt = 0


class PromptLookupCore(ExportsFinished):
    def __init__(self, lookup_min: int = 2, lookup_max: int = 5, kappa: float = 1.0,
                 cache_prompts: bool = False):
        self.nmin, self.nmax, self.kappa = lookup_min, lookup_max, kappa
        self.cache_prompts = cache_prompts  # what a finished request exports (see SuffixCore)
        self._requests: dict[int, _Request] = {}
        self._outbox = FinishedOutbox()

    def start(self, handle: int, prompt) -> None:
        if handle in self._requests:
            raise KeyError(f"request handle {handle} already started")
        self._requests[handle] = _Request(self.nmin, self.nmax)
        self.extend(handle, prompt)
        self._requests[handle].num_prompt = len(prompt)

    def extend(self, handle: int, tokens) -> None:
        r = self._requests[handle]
        s = r.tokens
        for t in tokens:
            p = len(s)  # the new token's position: every gram ending at p-1 now has a continuation
            for i, n in enumerate(range(self.nmin, self.nmax + 1)):
                if p >= n:
                    r.last[i][tuple(s[p - n:p])] = p - 1
            s.append(int(t))

    def has(self, handle: int) -> bool:
        return handle in self._requests

    def num_tokens(self, handle: int) -> int:
        return len(self._requests[handle].tokens)

    def abort(self, handle: int, keep_scope: bool = False) -> None:
        del self._requests[handle]

    def finish(self, handle: int, export: bool = True) -> None:
        r = self._requests.pop(handle)  # nothing outlives the request here
        if export and self._outbox.budget:  # (requests are unscoped)
            self._outbox.add(None, r.tokens[0 if self.cache_prompts else r.num_prompt:])

    # scopes: nothing is shared between requests, so there is nothing to scope
    def set_scope(self, handle: int, scope) -> None:
        pass

    def scope_of(self, handle: int):
        return None

    def drop_scope(self, handle: int) -> None:
        pass

    def num_scopes(self) -> int:
        return 0

    def scope_tokens(self, k: int = 5) -> list[int]:
        return []

    def load_corpus(self, tokens) -> None:
        raise ValueError("the lookup strategy drafts from the request only; corpus_files need "
                         "strategy 'suffix' or 'tree'")

    def draft(self, handle: int, budget: int, tree: bool = False):
        r = self._requests[handle]
        s = r.tokens
        if budget <= 0:
            return [], [], [], 0
        for i in range(self.nmax - self.nmin, -1, -1):
            n = self.nmin + i
            if len(s) < n:
                continue
            end = r.last[i].get(tuple(s[len(s) - n:]))
            if end is None:
                continue
            toks = s[end + 1:end + 1 + budget]
            p = 1.0 / (1.0 + self.kappa / n)
            return toks, list(range(-1, len(toks) - 1)), [p] * len(toks), n
        return [], [], [], 0

    def num_requests(self) -> int:
        return len(self._requests)

    def global_tokens(self) -> int:
        return 0

    def global_nodes(self) -> int:
        return 0
