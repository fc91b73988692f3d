"""Temperature > 0 sampling helpers: sample many short outputs, compare their distributions.

Three kinds of requests share every batch: top_k=1 (plain sampling is then deterministic), a low
and a high temperature. vLLM 0.32's CPU expand-kernel bug leaves each draft position's
temperature/top-k/top-p unwritten: the buffer holds whatever was there (another row's value,
or garbage), so a batch with a single setting can hide it, while a mixed batch shows it (wrong
outcomes, or a crash on a garbage top-k).
"""

from __future__ import annotations

from collections import Counter

# The answer copies the prompt, so drafts exist (and are verified) from the second token on.
PROMPT = ("Copy the list exactly.\nList: red, green, blue, yellow, red, green, blue, yellow, red, "
          "green, blue, yellow\nCopy: red, green,")
GROUPS = ({"temperature": 1.0, "top_k": 1}, {"temperature": 0.3}, {"temperature": 1.5})
NUM_TOKENS = 4       # outcome: the first NUM_TOKENS sampled tokens
NUM_SAMPLES = 1200   # in all, split evenly between the groups
TOP_OUTCOMES = 12


def sample_outcomes(llm, num_samples: int = NUM_SAMPLES) -> list[Counter]:
    """One Counter of outcomes per group, from one interleaved batch of requests."""
    from vllm import SamplingParams

    params = [SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True, **g) for g in GROUPS]
    k = len(params)
    outs = llm.generate([PROMPT] * num_samples, [params[i % k] for i in range(num_samples)],
                        use_tqdm=False)
    counts = [Counter() for _ in params]
    for i, out in enumerate(outs):
        counts[i % k][tuple(out.outputs[0].token_ids[:NUM_TOKENS])] += 1
    return counts


def chi_square_p(a: Counter, b: Counter, top: int = TOP_OUTCOMES) -> float:
    """p-value of a chi-square test of homogeneity over the top outcomes (the rest pooled)."""
    from scipy.stats import chi2_contingency

    keys = [k for k, _ in (a + b).most_common(top)]
    rows = [[c[k] for k in keys] + [sum(c.values()) - sum(c[k] for k in keys)] for c in (a, b)]
    cols = [j for j in range(len(rows[0])) if rows[0][j] + rows[1][j] > 0]
    if len(cols) < 2:
        return 1.0  # both samples put all their mass on one outcome
    table = [[r[j] for j in cols] for r in rows]
    return float(chi2_contingency(table)[1])
