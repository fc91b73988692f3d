"""The transformers tree engine (specdraft.hf_generate) on real models in float32.

Greedy: token-identical to ``model.generate`` for chains and trees, on prompts where drafts are
accepted several tokens deep (fewer target passes than tokens). Sampling: the distribution of
short outputs equals the target's exact distribution and ``model.generate``'s samples
(chi-square), and the same test rejects an engine with a planted bug (a broken verifier that
the test patches into the engine; the package ships none).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch

import specdraft.hf_generate as hf_generate
from specdraft.hf_generate import SpeculativeGenerator
from specdraft.verify import children

pytest.importorskip("transformers")

# Repetitive prompts (copying, lists, code to repeat) are where drafts are accepted deep.
PROMPTS = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
    "Repeat the function above exactly:\n",
    "Copy the list exactly.\nList: red, green, blue, yellow, red, green, blue, yellow\nCopy:",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
]
MAX_NEW_TOKENS = 32
STRATEGIES = ["suffix", "tree"]  # suffix drafts chains, tree drafts trees


def _load(name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specdraft.models import model_path

    path = model_path(name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def smollm2():
    return _load("smollm2-135m")


def _plain_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                             do_sample=False, top_k=None, top_p=None, temperature=None)
    return out[0, len(prompt):].tolist()


def _check_greedy_identity(model, tokenizer, strategy: str, prompts=PROMPTS, n=MAX_NEW_TOKENS):
    gen = SpeculativeGenerator(model, {"strategy": strategy, "adaptive": False},
                               max_draft_tokens=8)
    passes = tokens = 0
    deepest = 0
    for text in prompts:
        prompt = tokenizer(text).input_ids
        want = _plain_greedy(model, prompt, n)
        got = gen.generate(prompt, n)
        assert got.token_ids == want, f"{strategy}: output differs from generate on {text!r}"
        passes += got.stats.target_passes
        tokens += got.stats.generated_tokens
        deepest = max(deepest, got.stats.accepted_tokens)
    # Drafts were accepted several tokens deep: far fewer target passes than tokens.
    assert passes < 0.75 * tokens, (strategy, passes, tokens)
    st = gen.drafter.counters  # one request per generate, finished into the global cache
    assert (st.requests, st.finished, st.aborted) == (len(prompts), len(prompts), 0)
    assert gen.drafter.req_ids() == [] and st.errors == 0
    return gen


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_greedy_identical_to_generate_smollm2(smollm2, strategy):
    model, tokenizer = smollm2
    gen = _check_greedy_identity(model, tokenizer, strategy)
    if strategy == "tree":
        st = gen.drafter.counters
        assert st.drafts and st.drafted_tokens > st.drafts  # more than one node per tree


def test_greedy_identical_to_generate_qwen_05b(qwen_05b):
    # a second architecture (Qwen2), tree drafts (a chain is a tree with one child per node)
    model, tokenizer = qwen_05b
    _check_greedy_identity(model, tokenizer, "tree", prompts=PROMPTS[:2], n=32)


@pytest.fixture(scope="module")
def qwen_05b():
    # Prepared by scripts/setup.sh; prepared here on demand otherwise (about a minute).
    return _load("qwen2.5-coder-0.5b")


# ----------------------------------------------------------------------------- sampling

SAMPLING_PROMPT = "red green blue red green blue red green blue red green"
TEMPERATURE, TOP_K, LENGTH = 2.0, 3, 3
SAMPLES = 100            # engine samples per run (planted bug: p <= 1e-11 at seeds 0-2)
GENERATE_SAMPLES = 200   # model.generate samples (one batch)
PASS_P, REJECT_P = 1e-3, 1e-6


def _exact_distribution(model, prompt: list[int]) -> dict[tuple[int, ...], float]:
    """Probability of every LENGTH-token continuation under the warped target (top-k keeps the
    tree of continuations small: TOP_K ** LENGTH leaves)."""
    from specdraft.adapters.transformers import sampling_warpers

    warpers = sampling_warpers(TEMPERATURE, TOP_K, None)
    out: dict[tuple[int, ...], float] = {}

    def walk(prefix: list[int], prob: float) -> None:
        if len(prefix) == LENGTH:
            out[tuple(prefix)] = prob
            return
        with torch.inference_mode():
            logits = model(torch.tensor([prompt + prefix])).logits[0, -1:].float()
        p = torch.softmax(warpers(None, logits), dim=-1)[0].double()
        for x in torch.nonzero(p).flatten().tolist():
            walk(prefix + [x], prob * float(p[x]))

    walk([], 1.0)
    return out


def _gof_p(counts: Counter, exact: dict, n: int) -> float:
    """Chi-square goodness of fit; cells expecting < 5 pooled; mass outside ``exact`` is a miss."""
    from scipy.stats import chisquare

    big = [k for k in exact if exact[k] * n >= 5]
    obs = [counts[k] for k in big] + [n - sum(counts[k] for k in big)]
    exp = [exact[k] * n for k in big] + [n - sum(exact[k] * n for k in big)]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
        if sum(obs) != n:
            return 0.0
        # the dropped cell's float residue (~1e-8 of n) would trip chisquare's sum check
        exp = [e * n / sum(exp) for e in exp]
    return float(chisquare(obs, exp).pvalue)


def _accept_drafts(probs, tree, generator, draft_probs=None) -> list[int]:
    """A planted bug in the place of ``verify_sampling``: walk into the first child the target
    gives any probability (no sampling test), then sample the correction as usual."""
    kids = children(tree)
    emitted, node = [], -1
    while True:
        child = next((c for c in kids[node + 1] if probs[node + 1, tree.token_ids[c]] > 0), None)
        if child is None:
            emitted.append(int(torch.multinomial(probs[node + 1], 1, generator=generator)))
            return emitted
        emitted.append(tree.token_ids[child])
        node = child


def _engine_samples(model, prompt, seed=0) -> tuple[Counter, int, int]:
    gen = SpeculativeGenerator(model, {"strategy": "tree", "adaptive": False}, max_draft_tokens=6)
    g = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    passes = accepted = 0
    for _ in range(SAMPLES):
        res = gen.generate(prompt, LENGTH, do_sample=True, temperature=TEMPERATURE, top_k=TOP_K,
                           eos_token_id=None, generator=g)
        counts[tuple(res.token_ids)] += 1
        passes += res.stats.target_passes
        accepted += res.stats.accepted_tokens
    return counts, passes, accepted


@pytest.fixture(scope="module")
def sampling_setup(smollm2):
    model, tokenizer = smollm2
    prompt = tokenizer(SAMPLING_PROMPT).input_ids
    return model, prompt, _exact_distribution(model, prompt)


def test_sampling_matches_generate(sampling_setup):
    from scipy.stats import chi2_contingency

    model, prompt, exact = sampling_setup
    torch.manual_seed(0)
    ids = torch.tensor([prompt] * GENERATE_SAMPLES)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=LENGTH,
                             min_new_tokens=LENGTH, do_sample=True, temperature=TEMPERATURE,
                             top_k=TOP_K, top_p=None)
    plain = Counter(tuple(row) for row in out[:, len(prompt):].tolist())
    assert _gof_p(plain, exact, GENERATE_SAMPLES) > PASS_P  # the exact distribution is generate's

    counts, passes, accepted = _engine_samples(model, prompt)
    assert accepted > 0.2 * SAMPLES and passes < LENGTH * SAMPLES  # drafts really were accepted
    assert _gof_p(counts, exact, SAMPLES) > PASS_P
    keys = [k for k, _ in (counts + plain).most_common(8)]
    table = [[c[k] for k in keys] + [sum(c.values()) - sum(c[k] for k in keys)]
             for c in (counts, plain)]
    table = [list(col) for col in zip(*[c for c in zip(*table) if sum(c) > 0])]
    assert chi2_contingency(table)[1] > PASS_P  # engine and generate samples: one distribution


def test_sampling_catches_planted_bug(sampling_setup, monkeypatch):
    """Following drafts without the sampling test biases the output toward the drafts."""
    model, prompt, exact = sampling_setup
    monkeypatch.setattr(hf_generate, "verify_sampling", _accept_drafts, raising=True)
    counts, _, _ = _engine_samples(model, prompt)
    assert _gof_p(counts, exact, SAMPLES) < REJECT_P


def test_bad_arguments(smollm2):
    model, tokenizer = smollm2
    gen = SpeculativeGenerator(model, {"strategy": "tree"})
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate([1, 2, 3], 0)
    with pytest.raises(ValueError, match="temperature"):
        gen.generate([1, 2, 3], 4, do_sample=True, temperature=0.0)
    with pytest.raises(ValueError, match="batch size 1"):
        gen.generate(torch.ones(2, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="strategy"):
        SpeculativeGenerator(model, {"strategy": "nope"})
