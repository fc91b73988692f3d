"""Adaptive draft length: how many draft tokens each request in a batch should get this step.

The model
---------
One verification pass scores ``T = B + sum(k_r)`` tokens for a batch of B requests that drafted
k_r tokens each, and costs ``c(T)`` (the cost curve). It emits ``B + sum_r E_r(k_r)`` tokens in
expectation, where ``E_r(k)`` is the sum of the path acceptance probabilities of the first k draft
nodes of request r. The controller picks the k_r that maximise expected tokens per unit cost,

    (B + sum_r E_r(k_r)) / c(B + sum_r k_r).

Draft nodes arrive best-first, so each request's marginal gains (its nodes' path probabilities)
are taken in order, made non-increasing, merged across the batch, and the best prefix of the
merged list is chosen: for every total T that is the largest achievable numerator, and the
controller keeps the T with the best ratio. When the batch is compute-bound, c grows linearly
and no token with gain < 1 pays for itself, so nothing is drafted.

Acceptance probabilities
------------------------
The index's estimates are calibrated online: a table of probability bins counts how often nodes
whose estimate fell in the bin were accepted (given their parent was), starting from
``calibration_prior`` pseudo-observations at the bin's centre. Each request also carries a
factor, (accepted + prior) / (expected + prior) over its recent drafts (old evidence decays by
``request_decay`` per observation): a request whose drafts keep failing has a small factor and
stops drafting. While it does not draft its evidence decays by ``idle_decay`` per step, so the
factor drifts back to 1 and drafting is tried again ("until evidence returns").

Waste cap
---------
When a pass is memory-bound the cost curve is flat and any node with a gain above ``min_gain``
pays for itself, so a weak start (a short match whose first token is a coin flip) would be
followed by a full-budget chain that is rejected as a whole. Each request's chain is therefore
taken only while the expected number of its rejected nodes, ``sum(1 - gain)``, stays within
``max_waste``: a confident copy runs to the budget, a guess stays short. Trees are not capped:
their alternatives are there to be rejected, and the cost curve prices them. What the cap buys
on recorded traces is in benchmarks/results/chain-drafts/summary.md (smaller caps cut more
waste and start to cost tokens per pass).

Cost curve
----------
Presets hold relative pass costs measured per tokens scored (``gpu``: memory-bound until 128
tokens, then linear; ``cpu-bf16`` and ``cpu-fp32``: measured on a 2-core AVX-512 machine, see
NOTES). Step timings reported by the adapter correct the curve online: each power-of-two bucket of
T keeps an average of observed / predicted, applied as a multiplicative correction (only the
shape matters: the ratio is scale-free).

Everything is deterministic given the same calls in the same order (trace replay relies on it).
"""

from __future__ import annotations

import bisect
import math

CURVES = {
    # tokens scored in one pass -> relative cost of the pass
    "gpu": [(1, 1.0), (16, 1.0), (64, 1.05), (128, 1.15), (256, 1.9), (512, 3.6), (1024, 7.0)],
    "cpu-bf16": [(1, 1.0), (2, 1.0), (4, 1.0), (8, 1.06), (16, 1.24), (32, 1.64), (64, 2.59),
                 (128, 4.6)],
    "cpu-fp32": [(1, 1.0), (2, 1.56), (4, 1.56), (8, 1.56), (16, 1.83), (32, 2.52), (64, 3.78),
                 (128, 6.6)],
}

_NUM_BINS = 20
_MAX_PROB = 0.995


class CostModel:
    def __init__(self, curve="gpu", prior: float = 4.0):
        points = CURVES[curve] if isinstance(curve, str) else [tuple(p) for p in curve]
        points = sorted((float(t), float(c)) for t, c in points)
        self._t = [p[0] for p in points]
        self._c = [p[1] for p in points]
        self._prior = prior
        self._obs: dict[int, list[float]] = {}  # bucket -> [decayed sum of ratios, decayed count]
        self._memo: dict[float, float] = {}

    def base_cost(self, tokens: float) -> float:
        t, c = self._t, self._c
        if tokens <= t[0]:
            return c[0]
        i = bisect.bisect_left(t, tokens)
        if i == len(t):  # extrapolate the last segment
            i = len(t) - 1
        t0, t1, c0, c1 = t[i - 1], t[i], c[i - 1], c[i]
        return c0 + (c1 - c0) * (tokens - t0) / (t1 - t0)

    @staticmethod
    def _bucket(tokens: float) -> int:
        return int(math.log2(max(1.0, tokens)))

    def _factor(self, bucket: int) -> float:
        """Observed / predicted cost in ``bucket``, relative to the lowest bucket observed."""
        obs = self._obs.get(bucket)
        if obs is None:
            return 1.0
        ref = self._obs[min(self._obs)]
        rel = (obs[0] / obs[1]) / (ref[0] / ref[1])
        w = obs[1] / (obs[1] + self._prior)
        return 1.0 + w * (rel - 1.0)

    def cost(self, tokens: float) -> float:
        c = self._memo.get(tokens)
        if c is None:
            c = self._memo[tokens] = self._cost(tokens)
        return c

    def _cost(self, tokens: float) -> float:
        # a floor of 0.2% of a pass per extra token: scoring a token is never quite free (KV
        # writes, sampling), so among equally good choices the shorter draft wins
        return self.base_cost(tokens) * self._factor(self._bucket(tokens)) + 0.002 * (tokens - 1)

    def observe(self, tokens: int, seconds: float) -> None:
        """A verification pass that scored ``tokens`` tokens took ``seconds``."""
        if tokens <= 0 or seconds <= 0:
            return
        self._memo.clear()
        obs = self._obs.setdefault(self._bucket(tokens), [0.0, 0.0])
        obs[0] = 0.9 * obs[0] + seconds / self.base_cost(tokens)
        obs[1] = 0.9 * obs[1] + 1.0


class _RequestEvidence:
    __slots__ = ("accepted", "expected", "sent_probs")

    def __init__(self):
        self.accepted = 0.0
        self.expected = 0.0
        self.sent_probs: list[float] | None = None  # raw probs of the chain last sent


class DraftLengthController:
    def __init__(self, cost_model: CostModel | None = None, calibration_prior: float = 8.0,
                 request_prior: float = 1.0, request_decay: float = 0.9, idle_decay: float = 0.9,
                 min_gain: float = 0.1, max_waste: float = 8.0):
        self.cost_model = cost_model or CostModel()
        self.min_gain = min_gain
        self.max_waste = max_waste
        self.calibration_prior = calibration_prior
        self.request_prior = request_prior
        self.request_decay = request_decay
        self.idle_decay = idle_decay
        self._bin_acc = [0.0] * _NUM_BINS
        self._bin_n = [0.0] * _NUM_BINS
        self._cal = [(b + 0.5) / _NUM_BINS for b in range(_NUM_BINS)]  # calibrated(p) per bin
        self._requests: dict[object, _RequestEvidence] = {}
        self.chosen_lengths: dict[int, int] = {}  # histogram of chosen draft lengths

    # ---------------------------------------------------------- calibration
    @staticmethod
    def _bin(p: float) -> int:
        return min(_NUM_BINS - 1, max(0, int(p * _NUM_BINS)))

    def calibrated(self, p: float) -> float:
        return self._cal[self._bin(p)]

    def _update_bin(self, b: int, accepted: bool) -> None:
        self._bin_n[b] += 1.0
        if accepted:
            self._bin_acc[b] += 1.0
        prior = self.calibration_prior
        self._cal[b] = (self._bin_acc[b] + prior * (b + 0.5) / _NUM_BINS) / (self._bin_n[b] + prior)

    def request_factor(self, key) -> float:
        ev = self._requests.get(key)
        if ev is None:
            return 1.0
        return (ev.accepted + self.request_prior) / (ev.expected + self.request_prior)

    def forget(self, key) -> None:
        self._requests.pop(key, None)

    def observe(self, key, num_accepted: int) -> None:
        """The target accepted ``num_accepted`` tokens of the draft last sent for ``key``."""
        ev = self._requests.get(key)
        if ev is None or ev.sent_probs is None:
            return
        probs = ev.sent_probs
        ev.sent_probs = None
        a = max(0, min(num_accepted, len(probs)))
        expected = 0.0
        for i, p in enumerate(probs[: a + 1]):
            b = self._bin(p)
            self._update_bin(b, i < a)
            expected += self._cal[b]
        d = self.request_decay
        ev.accepted = d * ev.accepted + a
        ev.expected = d * ev.expected + expected

    # ------------------------------------------------------------ selection
    def path_gains(self, key, parents, probs) -> list[float]:
        """Calibrated path acceptance probability of each node, made non-increasing."""
        f = self.request_factor(key)
        cal = self._cal
        out: list[float] = []
        run = 1.0
        for i, p in enumerate(probs):
            b = int(p * _NUM_BINS)
            q = cal[b if b < _NUM_BINS else _NUM_BINS - 1] * f
            if q > _MAX_PROB:
                q = _MAX_PROB
            par = parents[i]
            g = q * out[par] if par >= 0 else q
            if g < run:
                run = g
            out.append(run)
        return out

    def choose(self, keys, drafts) -> list[int]:
        """Number of nodes to keep from each draft (best-first trees or chains).

        ``drafts`` are (parents, probs) pairs in node order. Returns one count per request.
        """
        B = len(keys)
        gains = []  # (-gain, request): each request's gains are non-increasing already
        for r, (key, (parents, probs)) in enumerate(zip(keys, drafts)):
            # chains only: a tree's alternatives are there to be rejected
            cap = self.max_waste if all(p == i - 1 for i, p in enumerate(parents)) else math.inf
            waste = 0.0
            for g in self.path_gains(key, parents, probs):
                if g < self.min_gain:
                    break  # the rest are below the floor too
                waste += 1.0 - g
                if waste > cap:
                    break  # the chain would waste more than max_waste tokens in expectation
                gains.append((-g, r))
        if B > 1:
            gains.sort()
        cm = self.cost_model
        best_j, best_ratio = 0, B / cm.cost(B) if B else 0.0
        num = float(B)
        for j, (ng, _) in enumerate(gains, start=1):
            num -= ng
            ratio = num / cm.cost(B + j)
            if ratio > best_ratio:
                best_j, best_ratio = j, ratio
        counts = [0] * B
        for _, r in gains[:best_j]:
            counts[r] += 1
        for key, k in zip(keys, counts):
            self.chosen_lengths[k] = self.chosen_lengths.get(k, 0) + 1
            ev = self._requests.get(key)
            if k == 0 and ev is not None:
                ev.accepted *= self.idle_decay
                ev.expected *= self.idle_decay
        return counts

    def sent(self, key, probs) -> None:
        """Record the raw probabilities of the chain actually sent (for ``observe``)."""
        ev = self._requests.get(key)
        if ev is None:
            ev = self._requests[key] = _RequestEvidence()
        ev.sent_probs = list(probs) if probs else None
