"""Token streams for the twin tests: a sticky Markov chain with copied spans, so that repeats
and branching are guaranteed (what a suffix index has to get right)."""

from __future__ import annotations

import random


def markov_stream(rng: random.Random, n: int, vocab: int, repeat: float = 0.3, span: int = 12,
                  mul: int = 7, add: int = 3) -> list[int]:
    """``n`` tokens below ``vocab``: with probability ``repeat`` a copy of 1..``span`` earlier
    tokens, else (half the time) the chain's successor ``(last * mul + add) % vocab``, else a
    uniform token."""
    out: list[int] = []
    while len(out) < n:
        if out and rng.random() < repeat:
            a = rng.randrange(len(out))
            out.extend(out[a:a + rng.randint(1, span)])
        elif out and rng.random() < 0.5:
            out.append((out[-1] * mul + add) % vocab)
        else:
            out.append(rng.randrange(vocab))
    return out[:n]
