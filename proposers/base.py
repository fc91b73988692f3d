"""The drafter interface every engine adapter speaks.

A drafter follows each request through its life:

    start(req_id, prompt_token_ids)         request admitted
    extend(req_id, token_ids, num_accepted)  tokens the engine emitted since the last call;
                                             num_accepted = how many tokens of the previous
                                             draft the target accepted (None when unknown)
    draft(req_id, budget) -> DraftTree       guesses for the next verification pass
    finish(req_id)                           done: its tokens feed the global cache
    abort(req_id)                            dropped: state freed, nothing fed

A draft is a tree: node i has token ``token_ids[i]``, parent ``parents[i]`` (-1 for a child of the
last context token; parents always come before children) and ``probs[i]``, the estimated
probability that node i is accepted given that its parent was. A chain is the tree in which
``parents[i] == i - 1``.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Protocol, Sequence


class SpecdraftConfigError(ValueError):
    """An invalid option or argument; the message names the option and what is accepted."""


def accepted_count(num_emitted: int, num_drafted: int) -> int:
    """Draft tokens the target accepted in a verification pass that emitted ``num_emitted``
    tokens for a request it had ``num_drafted`` draft tokens of: every emitted token but the last
    (the target's own: bonus or correction) was an accepted draft token. -1 (unknown: nothing to
    learn) when nothing was drafted. ``accepted_counts`` is the same rule over rows."""
    return max(0, min(num_drafted, num_emitted - 1)) if num_drafted > 0 else -1


def accepted_counts(num_emitted, num_drafted):
    """``accepted_count`` over rows (numpy arrays): what the vLLM adapters' steps use."""
    import numpy as np

    out = np.minimum(num_drafted, num_emitted - 1)
    np.maximum(out, 0, out=out)
    out[num_drafted <= 0] = -1
    return out


@dataclasses.dataclass
class DraftTree:
    token_ids: list[int] = dataclasses.field(default_factory=list)
    parents: list[int] = dataclasses.field(default_factory=list)
    probs: list[float] = dataclasses.field(default_factory=list)
    match_len: int = 0  # length of the context suffix the draft was continued from

    def __len__(self) -> int:
        return len(self.token_ids)

    @classmethod
    def chain(cls, token_ids: Sequence[int], probs: Sequence[float] | None = None,
              match_len: int = 0) -> "DraftTree":
        n = len(token_ids)
        return cls(list(token_ids), list(range(-1, n - 1)),
                   list(probs) if probs is not None else [1.0] * n, match_len)

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def chain_probs(self) -> list[float]:
        """The probs of the chain a chain verifier is sent: this draft's own when it is a chain,
        else its best path's (what the controller is told it sent)."""
        return self.probs if self.is_chain() else self.best_path().probs

    def path_probs(self) -> list[float]:
        """Probability that each node is accepted (product of probs along its root path)."""
        out: list[float] = []
        for i, p in enumerate(self.parents):
            out.append(self.probs[i] * (out[p] if p >= 0 else 1.0))
        return out

    def expected_accepted(self) -> float:
        """Expected number of accepted draft tokens when this whole tree is verified."""
        return float(sum(self.path_probs()))

    def truncate(self, num_nodes: int) -> "DraftTree":
        """The first ``num_nodes`` nodes; a valid tree because parents precede children."""
        k = max(0, min(num_nodes, len(self)))
        return DraftTree(self.token_ids[:k], self.parents[:k], self.probs[:k], self.match_len)

    def best_path(self) -> "DraftTree":
        """The root-to-node chain that maximizes the expected number of accepted tokens.

        For a chain verifier (vLLM 0.32) the value of a path is the sum of its nodes' path
        probabilities; a node's best value is its own path probability plus its best child's.
        """
        n = len(self)
        if n == 0:
            return DraftTree(match_len=self.match_len)
        pp = self.path_probs()
        best = [0.0] * n         # best[i]: value of the best path starting at node i
        best_child = [-1] * n
        for i in range(n - 1, -1, -1):  # children come after parents, so they are final here
            best[i] = pp[i] + (best[best_child[i]] if best_child[i] >= 0 else 0.0)
            p = self.parents[i]
            if p >= 0 and (best_child[p] < 0 or best[i] >= best[best_child[p]]):
                best_child[p] = i  # ">=" while walking backwards: the lower index wins ties
        roots = [i for i in range(n) if self.parents[i] < 0]
        node = max(roots, key=lambda i: (best[i], -i))
        toks, probs = [], []
        while node >= 0:
            toks.append(self.token_ids[node])
            probs.append(self.probs[node])
            node = best_child[node]
        return DraftTree.chain(toks, probs, self.match_len)

    def depth(self) -> int:
        d: list[int] = []
        for p in self.parents:
            d.append(d[p] + 1 if p >= 0 else 1)
        return max(d, default=0)


@dataclasses.dataclass
class DrafterCounters:
    requests: int = 0          # requests started
    finished: int = 0          # requests finished (fed to the global cache)
    aborted: int = 0
    drafts: int = 0            # draft() calls that returned at least one token
    drafted_tokens: int = 0    # tokens proposed (after the budget was applied)
    accepted_tokens: int = 0   # tokens the adapter reported as accepted
    draft_time_s: float = 0.0  # time inside draft()
    update_time_s: float = 0.0  # time inside start()/extend()/finish()
    errors: int = 0            # proposer failures swallowed by an adapter

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def add_step_counts(self, counts: Sequence[int], seconds: float) -> None:
        """Fold one engine step's counts in, as the native step returns them: (requests started,
        finished, aborted, accepted tokens, drafts, drafted tokens), plus the step's draft time."""
        started, n_fin, n_ab, accepted, drafts, drafted = counts
        self.requests += started
        self.finished += n_fin
        self.aborted += n_ab
        self.accepted_tokens += accepted
        self.drafts += drafts
        self.drafted_tokens += drafted
        self.draft_time_s += seconds


class Drafter(Protocol):
    def start(self, req_id: str, prompt_token_ids: Sequence[int]) -> None: ...
    def extend(self, req_id: str, token_ids: Sequence[int], num_accepted: int | None = None) -> None: ...
    def draft(self, req_id: str, budget: int | None = None) -> DraftTree: ...
    def finish(self, req_id: str) -> None: ...
    def abort(self, req_id: str) -> None: ...
    def load_corpus(self, sequences: Iterable[Sequence[int]]) -> None: ...
    @property
    def counters(self) -> DrafterCounters: ...
