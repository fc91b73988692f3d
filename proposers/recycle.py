"""Target-logit recycling (Token Recycling, Luo et al., ACL 2025): drafts from the target's own
top-k predictions.

Every verification pass computes the target's distribution at each position it scores. The
table keeps, for each token, the ids the target ranked most likely right after it the last time
that token was an input of a scored position (most likely first); a draft follows the table
from the request's last token: a chain by the first choices, or a tree that branches into the
first few choices at each level. It needs no draft model and no matching context, so it can
draft where suffix lookup has nothing to copy.

Memory: ``top_k`` int32 per row, rows for the token ids seen so far (at most the vocabulary:
151,936 x 8 x 4 bytes = 4.9 MB for Qwen2.5), reported by ``nbytes``.

Only the replay drives it for now (``specdraft replay`` on traces recorded with ``specdraft
record --top-k``: BENCHMARKS.md, "Target-logit recycling"); no engine captures top-k yet.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specdraft.proposers.base import DraftTree, SpecdraftConfigError

MAX_TOP_K = 20  # what vLLM returns per position at most (its default max_logprobs)


class RecycleTable:
    """For each token id, the target's top-k next-token ids from the last pass that scored it."""

    def __init__(self, top_k: int = 8):
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
            raise SpecdraftConfigError(
                f"recycle_top_k={top_k!r}: accepted values are integers 1-{MAX_TOP_K}")
        self.top_k = top_k
        self._rows = np.full((0, top_k), -1, dtype=np.int32)

    @property
    def nbytes(self) -> int:
        return int(self._rows.nbytes)

    def _grow(self, token: int) -> None:
        if token >= len(self._rows):
            rows = np.full((max(token + 1, 2 * len(self._rows), 1024), self.top_k), -1,
                           dtype=np.int32)
            rows[:len(self._rows)] = self._rows
            self._rows = rows

    def update(self, inputs: Sequence[int], topk: Sequence[Sequence[int]]) -> None:
        """A pass scored positions whose input tokens were ``inputs``; ``topk[i]`` is the
        target's top-k at the position after ``inputs[i]`` (most likely first)."""
        for token, ids in zip(inputs, topk):
            token = int(token)
            self._grow(token)
            row = self._rows[token]
            n = min(len(ids), self.top_k)
            row[:n] = ids[:n]
            row[n:] = -1

    def successors(self, token: int) -> list[int]:
        """The recorded top-k after ``token`` (empty if it never was a scored input)."""
        if token >= len(self._rows):
            return []
        row = self._rows[token]
        return [int(t) for t in row if t >= 0]

    def chain(self, last: int, length: int) -> DraftTree:
        """``length`` tokens at most, each the first choice after the one before."""
        tokens: list[int] = []
        for _ in range(length):
            nxt = self.successors(last)
            if not nxt:
                break
            tokens.append(nxt[0])
            last = nxt[0]
        return DraftTree.chain(tokens)

    def tree(self, last: int, branching: Sequence[int], budget: int) -> DraftTree:
        """A tree level by level: each node of level d gets its first ``branching[d]``
        successors, breadth first, at most ``budget`` nodes."""
        tree = DraftTree()
        frontier = [(-1, last)]
        for width in branching:
            nxt_level = []
            for node, token in frontier:
                for child in self.successors(token)[:width]:
                    if len(tree) >= budget:
                        return tree
                    tree.token_ids.append(child)
                    tree.parents.append(node)
                    tree.probs.append(1.0)
                    nxt_level.append((len(tree) - 1, child))
            frontier = nxt_level
        return tree
