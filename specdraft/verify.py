"""Lossless verification of a draft tree: the reference, in plain PyTorch.

One verification pass runs the target once over the context plus every node of the draft tree
(tree attention) and gets its next-token distribution at every node::

    row 0        p( . | context)
    row i + 1    p( . | context, root path through node i)

The verifier then walks down from the root. At each node it asks "which token would the target
have produced here?" and, when that token is one of the node's children, moves into the child.
It stops at the first node where the answer is not a child and emits the answer (a *correction*,
or a *bonus* token when it stops at a leaf). A pass therefore emits ``accepted + 1`` tokens, and
every one of them is distributed exactly as plain autoregressive decoding with the target would
have produced it: drafts change how many tokens a pass emits, never which. Three rules:

1. Greedy (temperature 0), :func:`verify_greedy`.
       x = argmax p;  follow the child with token x, else emit x and stop.

2. Sampling, deterministic drafts (suffix lookup, n-grams: no draft distribution),
   :func:`verify_sampling` without ``draft_probs``.
       x ~ p;  follow the child with token x, else emit x and stop.
   Lossless by construction: x *is* the target's sample; the draft only decides whether the
   pass may go on.

3. Sampling, drafts sampled from a draft distribution q (a draft model),
   :func:`verify_sampling` with ``draft_probs``: recursive rejection sampling. For a chain this
   is speculative sampling (Leviathan et al. 2023; Chen et al. 2023); for a node with several
   children it is the multi-candidate rule of SpecInfer (Miao et al. 2024, "multi-step
   speculative sampling") and of recursive speculative decoding (Jeon et al. 2024). At a node
   with children c_1..c_k, tokens x_j and draft rows q_j::

       r <- p
       for j = 1..k:
           with probability min(1, r(x_j) / q_j(x_j)): emit x_j, move to c_j     (accept)
           r <- norm(max(0, r - q_j))                                          (reject)
       emit y ~ r and stop                            (k = 0: y ~ p is the bonus token)

   Why it is lossless -- one step with target r and proposal x ~ q emits y with probability

       min(r(y), q(y))  +  (1 - sum min(r, q)) * max(0, r(y) - q(y)) / sum max(0, r - q)  =  r(y)

   because sum max(0, r - q) = 1 - sum min(r, q). Apply it from the last sibling backwards:
   whatever follows a rejection emits the residual, so the whole node emits p.

   The condition: x_j must be distributed as q_j given everything before it (the context, the
   earlier siblings; never the verifier's coins). All of these satisfy it:

   * siblings drawn i.i.d. (with replacement) from one q: every q_j is that q (SpecInfer);
   * siblings drawn without replacement: q_j is q renormalised over the tokens not drawn yet
     (recursive speculative decoding);
   * a guessed token with a one-hot q_j: then rule 3 reduces to rule 2.

   It does *not* hold for the top-k tokens of q labelled with q: they were chosen, not sampled.
   Verify such drafts with rule 2 (no ``draft_probs``).

Probabilities in, tokens out: apply temperature, top-k and top-p to the target (and to the
draft model) before calling. All randomness comes from the ``torch.Generator`` passed in.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from specdraft.proposers.base import DraftTree

__all__ = [
    "children",
    "tree_contexts",
    "tree_target_rows",
    "verify_greedy",
    "verify_sampling",
    "residual",
    "reference_generate",
    "speculative_generate",
]

ROOT = -1  # the node "before" the tree: the context's last token


# --------------------------------------------------------------------------- the tree

def children(tree: DraftTree) -> list[list[int]]:
    """``kids[i + 1]``: the children of node i, in index order; ``kids[0]``: the roots' children."""
    kids: list[list[int]] = [[] for _ in range(len(tree) + 1)]
    for i, parent in enumerate(tree.parents):
        if not ROOT <= parent < i:
            raise ValueError(f"DraftTree.parents[{i}] = {parent}: a parent must precede its child")
        kids[parent + 1].append(i)
    return kids


def tree_contexts(context: Sequence[int], tree: DraftTree) -> list[list[int]]:
    """The token sequence each target row is conditioned on: context, then context + root path
    through node i. This is what tree attention computes in one pass."""
    rows = [list(context)]
    for i, parent in enumerate(tree.parents):
        rows.append(rows[parent + 1] + [tree.token_ids[i]])
    return rows


def tree_target_rows(target: Callable[[list[int]], torch.Tensor], context: Sequence[int],
                     tree: DraftTree) -> torch.Tensor:
    """The target's rows for ``tree``, one call per row: ``[len(tree) + 1, vocab]``."""
    return torch.stack([target(seq) for seq in tree_contexts(context, tree)])


def _check(rows: torch.Tensor, tree: DraftTree, draft_probs: torch.Tensor | None = None) -> None:
    n = len(tree)
    if rows.dim() != 2 or rows.shape[0] != n + 1:
        raise ValueError(f"target rows: expected shape [{n + 1}, vocab] for a {n}-node tree, "
                         f"got {list(rows.shape)}")
    if draft_probs is not None and list(draft_probs.shape) != [n, rows.shape[1]]:
        raise ValueError(f"draft_probs: expected shape [{n}, {rows.shape[1]}], "
                         f"got {list(draft_probs.shape)}")
    if any(not 0 <= t < rows.shape[1] for t in tree.token_ids):
        raise ValueError(f"DraftTree.token_ids: every token must be in [0, {rows.shape[1]})")


# --------------------------------------------------------------------------- rule 1: greedy

def verify_greedy(target_logits: torch.Tensor, tree: DraftTree) -> list[int]:
    """Rule 1. Emit x = argmax p at each node; follow the child with token x; stop when none has it.

    ``target_logits``: ``[len(tree) + 1, vocab]``, logits or probabilities (only the argmax
    matters; ties go to the lowest token id, as ``torch.argmax``). Returns the emitted tokens:
    the accepted draft tokens, then the correction or bonus token.
    """
    _check(target_logits, tree)
    kids = children(tree)
    emitted: list[int] = []
    node = ROOT
    while True:
        x = int(torch.argmax(target_logits[node + 1]))
        emitted.append(x)
        node = next((c for c in kids[node + 1] if tree.token_ids[c] == x), None)
        if node is None:
            return emitted


# --------------------------------------------------------------------------- rules 2 and 3

def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what is left of p once the proposal q has been given its chance.

    The mass is zero only when p == q, where a rejection has probability 0; should rounding
    produce one anyway, p itself is the right answer.
    """
    r = (p - q).clamp_min(0)
    mass = r.sum()
    return r / mass if mass > 1e-12 else p


def _sample(p: torch.Tensor, generator: torch.Generator) -> int:
    """y ~ p (p need not be normalised)."""
    return int(torch.multinomial(p, 1, generator=generator))


def _accept(r_x: torch.Tensor, q_x: torch.Tensor, generator: torch.Generator) -> bool:
    """True with probability min(1, r(x) / q(x)), written u * q(x) < r(x) to avoid dividing."""
    u = torch.rand((), generator=generator, dtype=r_x.dtype, device=r_x.device)
    return bool(u * q_x < r_x)


def verify_sampling(target_probs: torch.Tensor, tree: DraftTree, generator: torch.Generator,
                    draft_probs: torch.Tensor | None = None) -> list[int]:
    """Rules 2 and 3: lossless speculative sampling over a draft tree.

    ``target_probs``: ``[len(tree) + 1, vocab]``, the target's (processed) probabilities, rows
    as in the module docstring. ``draft_probs``: ``None`` for deterministic drafts (rule 2), or
    ``[len(tree), vocab]`` where row i is the distribution q that node i's token was drawn from,
    given its path and its earlier siblings (rule 3). Returns the emitted tokens: the accepted
    draft tokens, then the correction or bonus token.
    """
    _check(target_probs, tree, draft_probs)
    kids = children(tree)
    emitted: list[int] = []
    node = ROOT
    while node is not None:
        p = target_probs[node + 1]
        if draft_probs is None:
            x, node = _follow_sample(p, tree, kids[node + 1], generator)
        else:
            x, node = _rejection_step(p, tree, kids[node + 1], draft_probs, generator)
        emitted.append(x)
    return emitted


def _follow_sample(p: torch.Tensor, tree: DraftTree, kids: list[int],
                   generator: torch.Generator) -> tuple[int, int | None]:
    """Rule 2 at one node: x ~ p; return (x, the child with token x, or None to stop)."""
    x = _sample(p, generator)
    return x, next((c for c in kids if tree.token_ids[c] == x), None)


def _rejection_step(p: torch.Tensor, tree: DraftTree, kids: list[int], draft_probs: torch.Tensor,
                    generator: torch.Generator) -> tuple[int, int | None]:
    """Rule 3 at one node: try the children in order against the running residual r."""
    r = p
    for c in kids:
        x, q = tree.token_ids[c], draft_probs[c]
        if _accept(r[x], q[x], generator):
            return x, c
        r = residual(r, q)
    return _sample(r, generator), None


# --------------------------------------------------------------------------- reference loops

def reference_generate(target: Callable[[list[int]], torch.Tensor], context: Sequence[int],
                       num_tokens: int, generator: torch.Generator | None = None) -> list[int]:
    """Plain autoregressive decoding: ``num_tokens`` tokens, each x ~ target(tokens so far).

    ``target(seq)`` returns the next-token distribution after ``seq`` (probabilities; logits
    are fine for greedy). ``generator=None`` decodes greedily (argmax).
    """
    seq = list(context)
    for _ in range(num_tokens):
        p = target(seq)
        seq.append(int(torch.argmax(p)) if generator is None else _sample(p, generator))
    return seq[len(context):]


def speculative_generate(target: Callable[[list[int]], torch.Tensor],
                         draft: Callable[[list[int]], tuple[DraftTree, torch.Tensor | None]],
                         context: Sequence[int], num_tokens: int,
                         generator: torch.Generator | None = None) -> list[int]:
    """The same output as :func:`reference_generate`, drafted and verified.

    ``draft(seq)`` returns a draft tree for the continuation of ``seq`` and its draft
    probabilities (``None`` for a deterministic draft). Each pass verifies one tree with the
    target rows of :func:`tree_target_rows`; ``generator=None`` verifies greedily.
    """
    seq = list(context)
    while len(seq) < len(context) + num_tokens:
        tree, q = draft(seq)
        rows = tree_target_rows(target, seq, tree)
        seq += (verify_greedy(rows, tree) if generator is None
                else verify_sampling(rows, tree, generator, q))
    return seq[len(context):len(context) + num_tokens]
