"""The reference verifier is lossless: greedy output is token-for-token plain greedy decoding, and
sampled output has exactly the target's distribution (chi-square over whole short sequences),
for chains and trees, deterministic drafts and drafts sampled from q. The same statistical test
must reject a verifier with a planted bug, so a pass means something. The bugs live here, not in
the package: each is a broken variant of one step of ``specdraft.verify``, patched in by the test."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

import specdraft.verify as verify_module
from specdraft.proposers.base import DraftTree
from specdraft.verify import (
    _accept,
    _sample,
    children,
    reference_generate,
    speculative_generate,
    tree_contexts,
    residual,
    verify_greedy,
    verify_sampling,
)

# --------------------------------------------------------------------------- toy models


class TableModel:
    """A 'language model' whose next-token distribution depends on the previous two tokens."""

    def __init__(self, vocab: int, seed: int, sharpness: float = 1.0):
        g = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.logits = sharpness * torch.randn(vocab, vocab, vocab, generator=g, dtype=torch.float64)
        self.probs = torch.softmax(self.logits, dim=-1)

    def __call__(self, seq: list[int]) -> torch.Tensor:
        return self.probs[seq[-2], seq[-1]]

    def logits_of(self, seq: list[int]) -> torch.Tensor:
        return self.logits[seq[-2], seq[-1]]

    def sequence_probs(self, context: list[int], length: int) -> dict[tuple[int, ...], float]:
        """Exact probability of every continuation of ``context`` of the given length."""
        out = {}
        for cont in itertools.product(range(self.vocab), repeat=length):
            seq, prob = list(context), 1.0
            for x in cont:
                prob *= float(self(seq)[x])
                seq.append(x)
            out[cont] = prob
        return out


def random_tree(rng: random.Random, max_nodes: int, max_depth: int, max_children: int,
                chain: bool) -> DraftTree:
    """A random tree shape (tokens filled in later): parents only, parents before children."""
    parents: list[int] = []
    depth: list[int] = []
    frontier = [-1]
    while frontier and len(parents) < max_nodes:
        node = frontier.pop(0)
        k = 1 if chain else rng.randint(1, max_children)
        if node >= 0 and rng.random() < 0.25:
            k = 0  # an early leaf
        for _ in range(k):
            if len(parents) >= max_nodes or (node >= 0 and depth[node] >= max_depth):
                break
            parents.append(node)
            depth.append(depth[node] + 1 if node >= 0 else 1)
            frontier.append(len(parents) - 1)
    return DraftTree([0] * len(parents), parents, [1.0] * len(parents))


# --------------------------------------------------------------------------- greedy


def greedy_drafter(model: TableModel, rng: random.Random, chain: bool):
    """Random drafts: each node guesses the greedy token (always, in a third of the drafts; else
    half the time) or a random token."""

    def draft(seq: list[int]) -> tuple[DraftTree, None]:
        tree = random_tree(rng, max_nodes=rng.randint(0, 8), max_depth=4, max_children=3,
                           chain=chain)
        p_guess = 1.0 if rng.random() < 1 / 3 else 0.5
        ctxs = [list(seq)]
        for i, parent in enumerate(tree.parents):
            parent_ctx = ctxs[parent + 1]
            guess = int(torch.argmax(model(parent_ctx)))
            tree.token_ids[i] = guess if rng.random() < p_guess else rng.randrange(model.vocab)
            ctxs.append(parent_ctx + [tree.token_ids[i]])
        return tree, None

    return draft


@pytest.mark.parametrize("chain", [True, False], ids=["chain", "tree"])
def test_greedy_equals_plain_greedy(chain):
    for seed in range(60):
        model = TableModel(vocab=6, seed=seed, sharpness=2.0)
        rng = random.Random(seed)
        prompt = [rng.randrange(6), rng.randrange(6)]
        want = reference_generate(model.logits_of, prompt, 16)
        got = speculative_generate(model.logits_of, greedy_drafter(model, rng, chain), prompt, 16)
        assert got == want, f"seed {seed}"


def test_greedy_pass_accepts_longest_matching_path():
    """One pass emits the greedy continuation up to the deepest node on it, plus one token."""
    for seed in range(300):
        rng = random.Random(seed)
        model = TableModel(vocab=5, seed=seed, sharpness=2.0)
        prompt = [rng.randrange(5), rng.randrange(5)]
        tree = random_tree(rng, max_nodes=rng.randint(0, 10), max_depth=4, max_children=3,
                           chain=seed % 2 == 0)
        truth = reference_generate(model, prompt, 6)
        kids = children(tree)
        depth: list[int] = []
        for i, parent in enumerate(tree.parents):
            depth.append(depth[parent] + 1 if parent >= 0 else 1)
            siblings = {tree.token_ids[c] for c in kids[parent + 1] if c < i}
            on_truth = truth[depth[i] - 1]  # the greedy token at this depth
            if on_truth not in siblings and rng.random() < 0.6:
                tree.token_ids[i] = on_truth
            else:  # distinct siblings, so the matching child is unique
                others = [t for t in range(5) if t not in siblings | {on_truth}]
                tree.token_ids[i] = rng.choice(others)
        ctxs = tree_contexts(prompt, tree)
        on_path = [len(c) - len(prompt) for c in ctxs[1:]
                   if c[len(prompt):] == truth[:len(c) - len(prompt)]]
        rows = torch.stack([model(c) for c in ctxs])
        out = verify_greedy(rows, tree)
        assert out == truth[:len(out)]
        assert len(out) == max(on_path, default=0) + 1


def test_greedy_edges():
    rows = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    assert verify_greedy(rows[:1], DraftTree()) == [1]  # no draft: one token
    assert verify_greedy(rows, DraftTree.chain([1, 0])) == [1, 0, 2]  # all accepted + bonus
    assert verify_greedy(rows, DraftTree.chain([2, 0])) == [1]  # first rejected: correction
    with pytest.raises(ValueError):
        verify_greedy(rows, DraftTree.chain([1]))  # wrong number of rows
    with pytest.raises(ValueError):
        verify_greedy(rows, DraftTree.chain([7, 0]))  # token outside the vocabulary


# --------------------------------------------------------------------------- sampling

VOCAB, LENGTH, PROMPT = 4, 3, [0, 1]
TRIALS = 20_000
BUG_TRIALS = 5_000  # the planted bugs are caught with a quarter of the trials (p < 1e-12 here)
PASS_P = 1e-3      # a correct verifier must give p > PASS_P (seeds are fixed: deterministic)
REJECT_P = 1e-6    # a planted bug must give p < REJECT_P


def chi2_pvalue(observed: dict, expected: dict, trials: int) -> float:
    """Pearson chi-square goodness of fit; cells expecting < 5 are pooled into one."""
    obs, exp = [], []
    pool_obs = pool_exp = 0.0
    for key, prob in expected.items():
        if prob * trials < 5:
            pool_obs += observed.get(key, 0)
            pool_exp += prob * trials
        else:
            obs.append(observed.get(key, 0))
            exp.append(prob * trials)
    if pool_exp > 0:
        obs.append(pool_obs)
        exp.append(pool_exp)
    o = torch.tensor(obs, dtype=torch.float64)
    e = torch.tensor(exp, dtype=torch.float64)
    stat = ((o - e) ** 2 / e).sum()
    dof = torch.tensor((len(obs) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(dof, stat / 2))  # chi2 survival function


def make_drafter(kind: str, target: TableModel, draft_model: TableModel, rng: random.Random):
    """Draft trees of four kinds; all randomness from ``rng``, never from the verifier.

    chain_det / tree_det: guessed tokens (the draft model's likely token or a random one), no q.
    chain_q: x_j ~ q(. | path), the usual draft-model chain.
    tree_q: each sibling, independently chosen, is one of
        iid      x ~ q                                      (row q)
        without  x ~ q renormalised over tokens not yet drawn (row: that renormalised q)
        onehot   a guessed token                             (row: one-hot)
    so every row is the distribution the token was really drawn from, given the earlier siblings.
    """
    chain = kind.startswith("chain")
    with_q = kind.endswith("_q")
    vocab = target.vocab
    table = draft_model.probs.tolist()  # plain lists: drafting 20,000 sequences stays cheap
    tokens = range(vocab)

    def draft(seq: list[int]) -> tuple[DraftTree, torch.Tensor | None]:
        tree = random_tree(rng, max_nodes=rng.randint(1, 6), max_depth=LENGTH, max_children=3,
                           chain=chain)
        kids = children(tree)
        ctxs = [seq[-2:]]
        rows = []
        for i, parent in enumerate(tree.parents):
            ctx = ctxs[parent + 1]
            q = table[ctx[-2]][ctx[-1]]
            mode = "onehot" if not with_q else "iid" if chain else rng.choice(
                ["iid", "without", "onehot"])
            if mode == "without":
                taken = {tree.token_ids[c] for c in kids[parent + 1] if c < i}
                if len(taken) < vocab:
                    q = [0.0 if t in taken else q[t] for t in tokens]
                    q = [w / sum(q) for w in q]
            if mode == "onehot":
                x = max(tokens, key=q.__getitem__) if rng.random() < 0.6 else rng.randrange(vocab)
                q = [float(t == x) for t in tokens]
            else:
                x = rng.choices(tokens, weights=q)[0]
            tree.token_ids[i] = x
            rows.append(q)
            ctxs.append([ctx[-1], x])
        if not with_q:
            return tree, None
        return tree, torch.tensor(rows, dtype=torch.float64).reshape(len(tree), vocab)

    return draft


# Planted bugs: broken variants of the one-node steps of rule 2 (``_follow_sample``) and rule 3
# (``_rejection_step``), same signatures. ``PLANTED_BUGS[bug]`` maps each step a bug breaks to its
# broken variant; :func:`plant` patches them into ``specdraft.verify``.

def _follow_sample_resample_from_p(p, tree, kids, generator):
    """Rule 2, broken: after a miss, emit a fresh draw from p instead of the draw that missed
    (the draw that missed is replaced, biasing the output toward the drafts)."""
    x = _sample(p, generator)
    child = next((c for c in kids if tree.token_ids[c] == x), None)
    if child is None:
        x = _sample(p, generator)  # BUG
    return x, child


def _rejection_step_resample_from_p(p, tree, kids, draft_probs, generator):
    """Rule 3, broken: after a rejection draw from p, not from the residual (r stays p)."""
    for c in kids:
        x, q = tree.token_ids[c], draft_probs[c]
        if _accept(p[x], q[x], generator):
            return x, c
    return _sample(p, generator), None  # BUG: no r <- residual(r, q)


def _rejection_step_accept_with_p(p, tree, kids, draft_probs, generator):
    """Rule 3, broken: accept x with probability r(x) instead of min(1, r(x) / q(x))."""
    r = p
    for c in kids:
        x, q = tree.token_ids[c], draft_probs[c]
        if _accept(r[x], torch.ones_like(q[x]), generator):  # BUG: probability r(x)
            return x, c
        r = residual(r, q)
    return _sample(r, generator), None


PLANTED_BUGS = {
    "resample_from_p": {"_follow_sample": _follow_sample_resample_from_p,
                        "_rejection_step": _rejection_step_resample_from_p},
    "accept_with_p": {"_rejection_step": _rejection_step_accept_with_p},
}


def plant(monkeypatch, bug: str) -> None:
    """Patch ``bug``'s broken steps into ``specdraft.verify`` (undone after the test). Patching a
    step the module no longer has fails (``raising=True``), so a rename cannot silently disarm
    the bug."""
    for name, broken in PLANTED_BUGS[bug].items():
        monkeypatch.setattr(verify_module, name, broken, raising=True)


def sampled_sequence_pvalue(kind: str, trials: int = TRIALS, seed: int = 3) -> float:
    """Generate ``trials`` sequences of LENGTH tokens by drafting and verifying; return the
    chi-square p-value of their counts against the target's exact sequence distribution."""
    target = TableModel(VOCAB, seed=1)
    draft_model = TableModel(VOCAB, seed=2)  # a different model: rejections happen often
    draft_model.probs = 0.5 * draft_model.probs + 0.5 * target.probs
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    draft = make_drafter(kind, target, draft_model, rng)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(trials):
        seq = list(PROMPT)
        while len(seq) < len(PROMPT) + LENGTH:
            tree, q = draft(seq)
            ctxs = tree_contexts(seq, tree)  # the target's rows: context + each root path
            rows = target.probs[[c[-2] for c in ctxs], [c[-1] for c in ctxs]]
            seq += verify_sampling(rows, tree, generator, q)
        key = tuple(seq[len(PROMPT):len(PROMPT) + LENGTH])
        counts[key] = counts.get(key, 0) + 1
    return chi2_pvalue(counts, target.sequence_probs(PROMPT, LENGTH), trials)


KINDS = ["chain_det", "tree_det", "chain_q", "tree_q"]


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_is_lossless(kind):
    p = sampled_sequence_pvalue(kind)
    assert p > PASS_P, f"{kind}: emitted sequences do not follow the target (p = {p:.3g})"


@pytest.mark.parametrize("kind,bug", [
    ("chain_det", "resample_from_p"),
    ("tree_det", "resample_from_p"),
    ("chain_q", "resample_from_p"),
    ("chain_q", "accept_with_p"),
    ("tree_q", "resample_from_p"),
    ("tree_q", "accept_with_p"),
])
def test_planted_bug_is_caught(kind, bug, monkeypatch):
    plant(monkeypatch, bug)
    p = sampled_sequence_pvalue(kind, trials=BUG_TRIALS)
    assert p < REJECT_P, f"{kind} with bug {bug!r}: the test failed to notice (p = {p:.3g})"


def test_chi2_pvalue_matches_textbook():
    # chi2 with 3 degrees of freedom: P(X > 7.815) = 0.05
    exp = {i: 0.25 for i in range(4)}
    obs = {0: 250 + 30.6, 1: 250 - 30.6, 2: 250, 3: 250}  # statistic = 2 * 30.6^2 / 250 = 7.49
    assert abs(chi2_pvalue(obs, exp, 1000) - 0.0578) < 1e-3


def test_sampling_rejects_bad_inputs():
    g = torch.Generator().manual_seed(0)
    rows = torch.full((3, 4), 0.25)
    tree = DraftTree.chain([1, 2])
    with pytest.raises(ValueError):
        verify_sampling(rows, tree, g, torch.full((3, 4), 0.25))  # one q row per node
    with pytest.raises(ValueError):
        verify_sampling(rows, DraftTree([1, 2], [1, -1], [1.0, 1.0]), g)  # child before parent
