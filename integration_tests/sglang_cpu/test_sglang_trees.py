"""specdraft's trees and masks, decoded by SGLang's own NGRAM tree code, against brute force.

SGLang's verify metadata (positions, retrieve indices, first-child and next-sibling links) is
derived from the mask by ``reconstruct_indices_from_tree_mask_triton`` (run in Triton's CPU
interpreter) and by the host-side ``ngram_worker._derive_tree_links``; the greedy tree walk is
SGLang's ``verify_tree_greedy_triton``. The brute force below reads only the DraftTree.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from specdraft.adapters.sglang_v0_5 import pack_tree
from specdraft.proposers.base import DraftTree
from specdraft.replay import accepted_length


def random_tree(rng: random.Random, max_nodes: int) -> DraftTree:
    k = rng.randrange(0, max_nodes + 1)
    parents, tokens = [], []
    children: dict[int, set[int]] = {}
    for i in range(k):
        p = rng.randrange(-1, i)  # parents come before children
        used = children.setdefault(p, set())
        t = rng.choice([x for x in range(6) if x not in used] or [rng.randrange(6, 50)])
        used.add(t)
        parents.append(p)
        tokens.append(t)
    return DraftTree(tokens, parents, [0.5] * k)


def brute_force(tree: DraftTree, n: int, seq_len: int, b: int):
    """Expected SGLang metadata of one request, from the tree alone (node i+1 = draft node i)."""
    parent = [-1] + [p + 1 for p in tree.parents] + [None] * (n - 1 - len(tree))
    depth = [0] * n
    for i in range(1, len(tree) + 1):
        depth[i] = depth[parent[i]] + 1
    positions = [seq_len + d for d in depth]
    next_token = [-1] * n
    next_sibling = [-1] * n
    for i in range(n):
        kids = [c for c in range(n) if parent[c] == i]
        next_token[i] = kids[0] if kids else -1
        if parent[i] is not None and parent[i] >= 0:
            later = [c for c in range(i + 1, n) if parent[c] == parent[i]]
            next_sibling[i] = later[0] if later else -1
    return positions, [b * n + i for i in range(n)], next_token, next_sibling


@pytest.mark.parametrize("seed", range(12))
def test_random_trees_decode_through_sglangs_tree_helpers(sglang_cpu, seed):
    import torch
    from sglang.kernels.ops.speculative.reconstruct_tree import (
        reconstruct_indices_from_tree_mask_triton)
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
    from sglang.srt.speculative.ngram_worker import _derive_tree_links

    rng = random.Random(seed)
    n = rng.choice([2, 4, 8, 12, 16])
    bs = rng.randrange(1, 5)
    trees = [random_tree(rng, n - 1) for _ in range(bs)]
    seq_lens = [rng.randrange(1, 500) for _ in range(bs)]
    last = [rng.randrange(100, 200) for _ in range(bs)]
    packed = [pack_tree(last[b], trees[b], n) for b in range(bs)]
    tokens = np.concatenate([t for t, _ in packed])          # what batch_get returns
    mask = np.concatenate([m.reshape(-1) for _, m in packed])

    tree_mask = torch.from_numpy(mask).to(torch.bool)          # as the worker copies it
    positions = torch.empty(bs * n, dtype=torch.int64)
    retrieve_index, next_token, next_sibling = (torch.empty(bs, n, dtype=torch.int64)
                                                for _ in range(3))
    reconstruct_indices_from_tree_mask_triton(tree_mask, torch.tensor(seq_lens), positions,
                                              retrieve_index, next_token, next_sibling, bs, n)
    host_next, host_sibling = _derive_tree_links(mask.astype(bool), bs, n)
    for b in range(bs):
        want = brute_force(trees[b], n, seq_lens[b], b)
        got = (positions[b * n:(b + 1) * n].tolist(), retrieve_index[b].tolist(),
               next_token[b].tolist(), next_sibling[b].tolist())
        assert got == want, (trees[b], got, want)
        assert host_next[b].tolist() == want[2] and host_sibling[b].tolist() == want[3]
        assert tokens[b * n] == last[b]

    # Greedy verification: the target follows a random root path of each tree, then leaves it.
    truths, target = [], torch.full((bs, n), 7777, dtype=torch.int64)
    for b, tree in enumerate(trees):
        node, path = -1, []
        while True:
            kids = [i for i, p in enumerate(tree.parents) if p == node]
            if not kids or rng.random() < 0.25:
                break
            node = rng.choice(kids)
            path.append(tree.token_ids[node])
        truth = path + [rng.randrange(50, 60)]
        truths.append(truth)
        for i in range(n):  # a node on the truth path predicts the next truth token
            toks = [int(tokens[b * n + a]) for a in range(1, i + 1) if mask[b * n * n + i * n + a]]
            d = len(toks)
            if i == 0 or (mask[b * n * n + i * n] and toks == truth[:d]):
                target[b, i] = truth[d]
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, n), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    verify_tree_greedy_triton(predicts, accept_index, accept_num,
                              torch.from_numpy(tokens).view(bs, n), retrieve_index, next_token,
                              next_sibling, target)
    for b, tree in enumerate(trees):
        acc = accepted_length(tree.token_ids, tree.parents, truths[b])
        assert accept_num[b].item() == acc == len(truths[b]) - 1
        accepted_nodes = accept_index[b, : acc + 1].tolist()
        emitted = [predicts[i].item() for i in accepted_nodes]
        assert emitted == truths[b]  # accepted drafts, then the target's own token


def test_padding_is_never_accepted(sglang_cpu):
    """An empty draft: every padding node would match (token == prediction), none is reachable."""
    import torch
    from sglang.kernels.ops.speculative.reconstruct_tree import (
        reconstruct_indices_from_tree_mask_triton)
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    n = 6
    tokens, mask = pack_tree(42, DraftTree(), n)
    tm = torch.from_numpy(mask.reshape(-1)).to(torch.bool)
    positions = torch.empty(n, dtype=torch.int64)
    ri, nt, ns = (torch.empty(1, n, dtype=torch.int64) for _ in range(3))
    reconstruct_indices_from_tree_mask_triton(tm, torch.tensor([10]), positions, ri, nt, ns, 1, n)
    assert nt.tolist() == [[-1] * n] and ns.tolist() == [[-1] * n]
    predicts = torch.zeros(n, dtype=torch.int32)
    accept_index = torch.full((1, n), -1, dtype=torch.int32)
    accept_num = torch.empty(1, dtype=torch.int32)
    verify_tree_greedy_triton(predicts, accept_index, accept_num,
                              torch.from_numpy(tokens).view(1, n), ri, nt, ns,
                              torch.full((1, n), 42, dtype=torch.int64))
    assert accept_num.item() == 0 and accept_index[0, 0].item() == 0
