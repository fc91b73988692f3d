"""The synthetic token streams ``specdraft overhead`` times every method on (``StreamGen``)."""

from __future__ import annotations

import numpy as np


class StreamGen:
    """Seeded synthetic token streams: Zipf unigram + sparse Markov chain + copied spans."""

    def __init__(self, seed: int, vocab: int = 32000, zipf_a: float = 1.1, n_succ: int = 8,
                 shared_docs: int = 300, p_shared: float = 0.30, p_own: float = 0.25,
                 mean_span: float = 24.0, mean_run: float = 16.0, p_markov: float = 0.7):
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab
        ranks = np.arange(1, vocab + 1, dtype=np.float64)
        w = ranks ** -zipf_a
        self.uni_cdf = np.cumsum(w / w.sum())
        self.perm = self.rng.permutation(vocab).astype(np.int64)
        # successors: per token, n_succ tokens drawn from the unigram, Zipf-weighted choice
        self.succ = self.perm[np.minimum(np.searchsorted(self.uni_cdf, self.rng.random((vocab, n_succ))),
                                         vocab - 1)]
        sw = np.arange(1, n_succ + 1, dtype=np.float64) ** -1.0
        self.succ_cdf = np.cumsum(sw / sw.sum())
        self.p_shared, self.p_own = p_shared, p_own
        self.mean_span, self.mean_run, self.p_markov = mean_span, mean_run, p_markov
        self.docs: list[list[int]] = []
        for _ in range(shared_docs):
            n = int(self.rng.integers(128, 2048))
            self.docs.append(self._markov(n, int(self.perm[0])))

    def _unigram(self, n: int) -> np.ndarray:
        return self.perm[np.minimum(np.searchsorted(self.uni_cdf, self.rng.random(n)), self.vocab - 1)]

    def _markov(self, n: int, prev: int) -> list[int]:
        out: list[int] = []
        coin = self.rng.random(n)
        pick = np.searchsorted(self.succ_cdf, self.rng.random(n)).tolist()
        uni = self._unigram(n).tolist()
        succ = self.succ
        pm = self.p_markov
        for i in range(n):
            prev = int(succ[prev, pick[i]]) if coin[i] < pm else uni[i]
            out.append(prev)
        return out

    def sequence(self, n: int, own: list[int] | None = None) -> list[int]:
        """n tokens; ``own`` (e.g. the prompt) is also a source of copied spans."""
        rng = self.rng
        out: list[int] = []
        base = own or []
        while len(out) < n:
            r = rng.random()
            span = 1 + int(rng.geometric(1.0 / self.mean_span))
            if r < self.p_shared:
                d = self.docs[int(rng.integers(len(self.docs)))]
                a = int(rng.integers(len(d)))
                out.extend(d[a:a + span])
            elif r < self.p_shared + self.p_own and (base or out):
                src = base if (base and (not out or rng.random() < 0.5)) else out
                a = int(rng.integers(len(src)))
                out.extend(src[a:a + span])
            else:
                run = 1 + int(rng.geometric(1.0 / self.mean_run))
                out.extend(self._markov(run, out[-1] if out else int(self._unigram(1)[0])))
        return out[:n]
