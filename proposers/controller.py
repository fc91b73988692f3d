"""Adaptive draft length: how many draft tokens each request in a batch should get this step.

The model
---------
One verification pass of a batch of B requests (contexts L_r, S = sum L_r) that drafted k_r
tokens each scores ``T = B + sum(k_r)`` tokens and costs ``c(B, T, S)`` (the cost model below).
It emits ``B + sum_r E_r(k_r)`` tokens in expectation, where ``E_r(k)`` is the sum of the path
acceptance probabilities of the first k draft nodes of request r. The controller picks the k_r
that maximise expected tokens per unit cost of the whole batch step,

    (B + sum_r E_r(k_r)) / c(B, B + sum_r k_r, S).

B and the contexts are fixed for the step; only T varies. Draft nodes arrive best-first, so each
request's marginal gains (its nodes' path probabilities) are taken in order, made non-increasing,
merged across the batch, and the best prefix of the merged list is chosen: for every total T that
is the largest achievable numerator, and the controller keeps the T with the best ratio. When the
batch is compute-bound, c grows linearly in T and no token with a small gain pays for itself, so
little or nothing is drafted. The batch is every request in the step, drafting or not (a row the
engine lets no draft still costs its token and its KV read).

Acceptance probabilities
------------------------
The index's estimates are calibrated online: a table of probability bins counts how often nodes
whose estimate fell in the bin were accepted (given their parent was), starting from
``calibration_prior`` pseudo-observations at the bin's centre. Each tenant scope has its own
table (the unscoped pool one, at most ``max_scopes`` scoped ones, the least recently used
dropped): how often another tenant's drafts were accepted never sizes a request's drafts. Step
timings likewise: every pass corrects the shared cost model, and a pass whose drafting requests
were all of one scope also that scope's own correction, which prices that scope's batches
(``observe_pass``); a batch mixing scopes is priced by the shared one. Each request also carries a
factor, (accepted + prior) / (expected + prior) over its recent drafts (old evidence decays by
``request_decay`` per observation): a request whose drafts keep failing has a small factor and
stops drafting. While it does not draft its evidence decays by ``idle_decay`` per step, so the
factor drifts back to 1 and drafting is tried again ("until evidence returns").

One factor per request cannot tell a request's short matches from its long ones, and they differ:
on the recorded Qwen2.5-Coder traces the first draft token after a match of 0-1 tokens is
accepted 28-46% of the time (agentic loops: 67%), after 16 or more tokens 89-100%, in chat as in
code editing. So each request also keeps the same
decayed (accepted, expected) pair per bucket of a node's matched context length (the draft's root
match plus the node's depth: 0-1, 2-3, 4-7, 8-15, 16+ tokens), a Beta-like posterior whose prior is
``match_prior`` pseudo-observations at the request's overall factor:

    factor(bucket) = (accepted_b + match_prior * factor) / (expected_b + match_prior)

A request that copies long spans but guesses badly after short matches (chat quoting an earlier
answer, an agent reading a file back) then drafts its long copies in full and its short guesses
sparingly. ``match_prior = 0`` turns this off (one factor per request).

Waste cap
---------
When a pass is memory-bound the cost curve is flat and any node with a gain above ``min_gain``
pays for itself, so a weak start (a short match whose first token is a coin flip) would be
followed by a full-budget chain that is rejected as a whole. Each request's chain is therefore
taken only while the expected number of its rejected nodes, ``sum(1 - gain)``, stays within
``max_waste``: a confident copy runs to the budget, a guess stays short. Trees are not capped:
their alternatives are there to be rejected, and the cost curve prices them. What the cap buys
on recorded traces is in benchmarks/results/chain-drafts/summary.md and, with the calibration by
match length, benchmarks/results/match-calibration/summary.md (each step down of the cap trades
drafted tokens per accepted token against tokens per pass; 4 was chosen on half the traces).

Verification cost
-----------------
Measured pass times (``benchmarks/data/h200_cost_curve.md``, a copy of
``../shared/data/h200_cost_curve.md``: one H200, the shapes of Qwen2.5-1.5B, Llama-3.1-8B and
Qwen2.5-32B, batch 1-256, 1-32 tokens per request, contexts 2,048 and 8,192) are not a function
of T alone: at the same T = 256 an 8B pass costs 10.3 ms at B=16, q=16 and 23.6 ms at B=256,
q=1. The GPU model has a fixed part and three that grow::

    c(B, T, S) = fixed
               + kv * max(S, kv_min_batch * L_max)           KV read
               + attention * (S / B) * T                     attention compute
               + slope * (sqrt((T - knee)^2 + width^2) + (T - knee)) / 2     dense (GEMMs)

- the KV read grows with the batch's context S = sum L_r; below ``kv_min_batch`` requests one
  long request's read is latency-bound (a flash call over few heads does not fill the GPU), so
  the term never falls below that of ``kv_min_batch`` requests as long as the longest, L_max;
- attention compute grows with context x tokens scored, sum_r L_r q_r, taken as (S / B) * T
  (exact when contexts are equal; it keeps the cost a function of T for a fixed batch);
- the dense part is flat while the GEMMs are memory-bound and linear (``slope`` per token) once
  they turn compute-bound, around ``knee`` tokens, with a smooth bend of ``width`` tokens.

``specdraft/costfit.py`` fits the parameters per model shape (``python -m specdraft.costfit``;
tests/test_costfit.py re-fits and checks the presets below): a linear least-squares fit of the
relative error for fixed/kv/attention/slope on a grid of kv_min_batch, knee and width. Only
passes scoring q >= 2 tokens per request are fitted: the data's q = 1 column ran another
attention kernel (a plain decode path), so part of its q=1 -> q=2 step is a kernel change.
A step without drafts is costed with the same formula at T = B: with speculation on, an engine
sends every row through the same verification kernels, drafted or not. Relative error of the
fit (q >= 2, max / median): small 8.0% / 1.2%, medium 3.9% / 0.9%, large 5.3% / 1.0%; the
q = 1 cells, not fitted, are over-predicted by up to 123% / 61% / 27% (median 30% / 11% / 7%).

Presets: ``small`` (Qwen2.5-1.5B shape, for models under ~3.5B parameters), ``medium``
(Llama-3.1-8B, up to ~16B), ``large`` (Qwen2.5-32B); ``gpu`` is an alias of ``medium`` (its old
one-curve meaning is gone). ``preset_for_parameters`` maps a parameter count to a preset (the
vLLM adapter estimates it from the model's config). ``cpu-bf16`` and ``cpu-fp32`` are curves in
T only. ``cpu-bf16``: relative cost of one pass appending k tokens, measured at batch 1 with
SmolLM2-135M (context 512) on a 2-core AVX-512 machine (time(k) / time(1) at k = 2, 4, 8, 16, 32,
64: 0.92, 0.96, 1.06, 1.24, 1.64, 2.59; the preset smooths these). ``cpu-fp32``: the passes
vLLM's CPU engine ran in a live run (SmolLM2-135M, float32, 1-5 requests a pass, 2 cores;
``specdraft bench`` records them): time = 36 ms + 1.9 ms per token scored + 4.0 ms per request,
so at a fixed batch each token scored adds about 4.5% of a one-token pass, from the first
(an isolated one-pass measurement of the same model had shown a step of 1.56x at k=2 and a flat
curve to k=8; the engine does not show it). A list of [tokens, cost] points is such a curve too; a dict of the seven
parameters above is a custom model (fit one with ``specdraft.costfit`` on other measurements).

Step timings reported by the adapter correct the model online: each power-of-two bucket of T
keeps an average of observed / predicted (decayed by ``STEP_DECAY`` per observation; predicted
for the batch last sized, unless the caller says which batch ran), applied as a multiplicative correction relative to the lowest bucket
observed (only the shape matters: the ratio is scale-free). The correction runs linearly in
log2 T between the observed buckets' centres (past the highest, the highest's), so a pass size
the engine has not run yet is priced like the sizes around it, and no token is free inside a
bucket.

Everything is deterministic given the same calls in the same order (trace replay relies on it).
"""

from __future__ import annotations

import bisect
import math

# Fitted by specdraft/costfit.py to benchmarks/data/h200_cost_curve.md (ms per pass; only ratios
# matter to the controller). tests/test_costfit.py re-fits and compares.
PRESETS = {
    "small": {"fixed": 2.127, "kv": 7.069e-06, "kv_min_batch": 48.0, "attention": 8.171e-08,
              "slope": 0.006923, "knee": 152.0, "width": 256.0},     # Qwen2.5-1.5B shape
    "medium": {"fixed": 5.213, "kv": 3.217e-05, "kv_min_batch": 12.0, "attention": 2.413e-08,
               "slope": 0.02783, "knee": 140.0, "width": 128.0},     # Llama-3.1-8B shape
    "large": {"fixed": 19.17, "kv": 6.096e-05, "kv_min_batch": 12.0, "attention": 1.178e-06,
              "slope": 0.1111, "knee": 128.0, "width": 64.0},        # Qwen2.5-32B shape
}
PARAMS = ("fixed", "kv", "kv_min_batch", "attention", "slope", "knee", "width")
CURVES = {
    # tokens scored in one pass -> relative cost of the pass (batch 1, CPU)
    "cpu-bf16": [(1, 1.0), (2, 1.0), (4, 1.0), (8, 1.06), (16, 1.24), (32, 1.64), (64, 2.59),
                 (128, 4.6)],
    "cpu-fp32": [(1, 1.0), (2, 1.045), (4, 1.135), (8, 1.315), (16, 1.675), (32, 2.4),
                 (64, 3.8), (128, 6.6)],
}
ALIASES = {"gpu": "medium"}  # the name of the former single GPU curve
COST_MODELS = tuple(PRESETS) + tuple(CURVES) + tuple(ALIASES)
# parameter counts between the fitted shapes (geometric means of 1.5B, 8B and 32B)
_SIZE_LIMITS = ((3.5e9, "small"), (16e9, "medium"))

# Weight an observed pass size keeps at each new observation of that size: about the last 50
# passes count (noise on a busy machine averages out) and the measurements outweigh the prior
# (w up to 50 / (50 + prior)); at 0.9 the prior kept 29% of its shape for good.
STEP_DECAY = 0.98

_NUM_BINS = 20
_MAX_PROB = 0.995


def preset_for_parameters(num_params: float) -> str:
    """The GPU preset for a model of ``num_params`` parameters."""
    for limit, name in _SIZE_LIMITS:
        if num_params < limit:
            return name
    return "large"


def parameter_count(hidden_size: int, num_layers: int, intermediate_size: int, vocab_size: int,
                    num_heads: int | None = None, num_kv_heads: int | None = None,
                    tied_embeddings: bool = False) -> float:
    """Parameters of a dense decoder from its config (attention, gated MLP, embeddings)."""
    h = float(hidden_size)
    kv = h if not num_heads or not num_kv_heads else h * num_kv_heads / num_heads
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * float(intermediate_size)
    return num_layers * per_layer + (1 if tied_embeddings else 2) * vocab_size * h


def preset_for_config(config) -> str:
    """small / medium / large from a Hugging Face model config (``medium`` if it lacks sizes)."""
    cfg = getattr(config, "text_config", None) or config  # multimodal: the language model
    try:
        n = parameter_count(int(cfg.hidden_size), int(cfg.num_hidden_layers),
                            int(cfg.intermediate_size), int(cfg.vocab_size),
                            getattr(cfg, "num_attention_heads", None),
                            getattr(cfg, "num_key_value_heads", None),
                            bool(getattr(cfg, "tie_word_embeddings", False)))
    except (AttributeError, TypeError, ValueError):
        return "medium"
    return preset_for_parameters(n)


def cost_spec(model) -> tuple[tuple[float, ...], list[tuple[float, float]]]:
    """(the seven parameters, curve points) of a preset name, a curve or a parameter dict."""
    if isinstance(model, str):
        model = ALIASES.get(model, model)
        if model in CURVES:
            model = CURVES[model]
        else:
            model = PRESETS[model]
    if isinstance(model, dict):
        return tuple(float(model.get(k, 0.0)) for k in PARAMS), []
    points = sorted((float(t), float(c)) for t, c in model)
    return (0.0,) * len(PARAMS), points


class CostModel:
    """Cost of one verification pass of a batch (see the module docstring), corrected online."""

    def __init__(self, model="medium", prior: float = 4.0):
        params, points = cost_spec(model)
        (self.fixed, self.kv, self.kv_min_batch, self.attention, self.slope, self.knee,
         self.width) = params
        self._t = [p[0] for p in points]
        self._c = [p[1] for p in points]
        self._prior = prior
        self._obs: dict[int, list[float]] = {}  # bucket -> [decayed sum of ratios, decayed count]
        # a floor of 0.2% of a one-token pass per extra token: scoring a token is never quite
        # free (KV writes, sampling), so among equally good choices the shorter draft wins
        self._floor = 0.002 * self.base_cost(1.0, 1, 0.0, 0.0)
        self.batch = (1, 0.0, 0.0)  # (requests, context, longest) of the batch last sized

    def _curve(self, tokens: float) -> float:
        t, c = self._t, self._c
        if tokens <= t[0]:
            return c[0]
        i = bisect.bisect_left(t, tokens)
        if i == len(t):  # extrapolate the last segment
            i = len(t) - 1
        t0, t1, c0, c1 = t[i - 1], t[i], c[i - 1], c[i]
        return c0 + (c1 - c0) * (tokens - t0) / (t1 - t0)

    def base_cost(self, tokens: float, requests: int = 1, context: float = 0.0,
                  longest: float | None = None) -> float:
        """Predicted cost of a pass scoring ``tokens`` for ``requests`` requests whose contexts
        sum to ``context`` (the longest: ``longest``; default: all equal)."""
        if longest is None:
            longest = context / requests if requests > 0 else 0.0
        c = self.fixed + self.kv * max(context, self.kv_min_batch * longest)
        if requests > 0:
            c += self.attention * (context / requests) * tokens
        x = tokens - self.knee
        c += self.slope * (math.sqrt(x * x + self.width * self.width) + x) * 0.5
        if self._t:
            c += self._curve(tokens)
        return c

    @staticmethod
    def _bucket(tokens: float) -> int:
        return int(math.log2(max(1.0, tokens)))

    def _factor(self, tokens: float, timing: dict | None = None) -> float:
        """Observed / predicted cost of a pass scoring ``tokens``, relative to the lowest bucket
        observed: each observed bucket's factor sits at its centre (log2 T = b + 0.5) and the
        factor runs linearly in log2 T between observed centres (past the highest, the
        highest's; below the lowest, 1). So a pass size the engine has not run yet is priced
        like the sizes around it, not like the prior, and no token is free inside a bucket (a
        factor constant per bucket made every size up to the bucket's top look free).
        ``timing``: the observations to use (default: every pass's, ``_obs``)."""
        obs_t = self._obs if timing is None else timing
        if not obs_t:
            return 1.0
        x = math.log2(max(1.0, tokens))
        lo = hi = None
        for b in sorted(obs_t):
            if b + 0.5 <= x:
                lo = b
            else:
                hi = b
                break
        if lo is None:
            return 1.0
        f_lo = self._observed_factor(obs_t[lo], obs_t)
        if hi is None:
            return f_lo
        f_hi = self._observed_factor(obs_t[hi], obs_t)
        return f_lo + (f_hi - f_lo) * (x - (lo + 0.5)) / (hi - lo)

    def _observed_factor(self, obs: list[float], timing: dict) -> float:
        ref = timing[min(timing)]
        rel = (obs[0] / obs[1]) / (ref[0] / ref[1])
        w = obs[1] / (obs[1] + self._prior)
        return 1.0 + w * (rel - 1.0)

    def cost(self, tokens: float, requests: int = 1, context: float = 0.0,
             longest: float | None = None, timing: dict | None = None) -> float:
        return (self.base_cost(tokens, requests, context, longest) * self._factor(tokens, timing)
                + self._floor * (tokens - 1))

    def observe(self, tokens: int, seconds: float, requests: int | None = None,
                context: float | None = None, longest: float | None = None,
                timing: dict | None = None) -> None:
        """A verification pass that scored ``tokens`` tokens took ``seconds``; its batch is the
        one last sized (``self.batch``) unless given. ``timing``: the observations it goes into
        (default: every pass's)."""
        if tokens <= 0 or seconds <= 0:
            return
        if requests is None:
            requests, context, longest = self.batch
        pred = self.base_cost(float(tokens), requests, float(context or 0.0), longest)
        obs = (self._obs if timing is None else timing).setdefault(self._bucket(tokens), [0.0, 0.0])
        obs[0] = STEP_DECAY * obs[0] + seconds / pred
        obs[1] = STEP_DECAY * obs[1] + 1.0


_NUM_MATCH = 5  # match-length buckets: 0-1, 2-3, 4-7, 8-15, 16+ tokens of matched context


def match_bucket(m: int) -> int:
    """Bucket of a node's matched context length (root match + the node's depth)."""
    b = 0
    while m > 1 and b < _NUM_MATCH - 1:
        m >>= 1
        b += 1
    return b


class _Calibration:
    """A scope's controller state: observed acceptance per raw-probability bin, calibrated(p)
    per bin, and the step timings of the passes its requests had to themselves."""
    __slots__ = ("acc", "n", "cal", "timing")

    def __init__(self):
        self.acc = [0.0] * _NUM_BINS
        self.n = [0.0] * _NUM_BINS
        self.cal = [(b + 0.5) / _NUM_BINS for b in range(_NUM_BINS)]
        self.timing: dict[int, list[float]] = {}  # CostModel observations (bucket -> [sum, n])


class _RequestEvidence:
    __slots__ = ("accepted", "expected", "sent_probs", "sent_match", "m_acc", "m_exp", "cal")

    def __init__(self):
        self.cal: _Calibration | None = None         # its scope's calibration (bound when sent)
        self.accepted = 0.0
        self.expected = 0.0
        self.sent_probs: list[float] | None = None  # raw probs of the chain last sent
        self.sent_match = 0                         # its root match length
        self.m_acc = [0.0] * _NUM_MATCH             # accepted nodes per match bucket (decayed)
        self.m_exp = [0.0] * _NUM_MATCH             # their calibrated expectation


class DraftLengthController:
    def __init__(self, cost_model: CostModel | None = None, calibration_prior: float = 8.0,
                 request_prior: float = 1.0, request_decay: float = 0.9, idle_decay: float = 0.9,
                 min_gain: float = 0.1, max_waste: float = 4.0, match_prior: float = 2.0,
                 max_scopes: int = 1024):
        self.cost_model = cost_model or CostModel()
        self.match_prior = match_prior
        self.min_gain = min_gain
        self.max_waste = max_waste
        self.calibration_prior = calibration_prior
        self.request_prior = request_prior
        self.request_decay = request_decay
        self.idle_decay = idle_decay
        # calibration per tenant scope (a scope's acceptance says nothing to another's drafts):
        # the unscoped pool's, and at most max_scopes scoped ones (least recently used dropped)
        self.max_scopes = max(1, int(max_scopes))
        self._default = _Calibration()
        self._scoped: dict[str, _Calibration] = {}  # insertion order: least recently used first
        self.scope_of = None  # key -> its scope (str) or None: set by the drafter that owns keys
        self._batch_cal: _Calibration | None = None  # the one scope of the batch last sized
        self._requests: dict[object, _RequestEvidence] = {}
        self.chosen_lengths: dict[int, int] = {}  # histogram of chosen draft lengths

    # ---------------------------------------------------------- calibration
    @staticmethod
    def _bin(p: float) -> int:
        return min(_NUM_BINS - 1, max(0, int(p * _NUM_BINS)))

    def calibrated(self, p: float, scope: str | None = None) -> float:
        """The calibrated acceptance of a node of raw probability ``p`` in ``scope``."""
        cal = self._default if scope is None else self._scoped.get(scope)
        return (cal.cal if cal is not None else _Calibration().cal)[self._bin(p)]

    def _resolve(self, key) -> "_Calibration":
        """The calibration of ``key``'s scope (made on first use; the oldest scope's dropped
        past max_scopes, its live requests keeping theirs)."""
        scope = self.scope_of(key) if self.scope_of is not None else None
        if scope is None:
            return self._default
        cal = self._scoped.pop(scope, None)
        if cal is None:
            cal = _Calibration()
            if len(self._scoped) >= self.max_scopes:
                del self._scoped[next(iter(self._scoped))]
        self._scoped[scope] = cal  # most recently used last
        return cal

    def _calibration(self, key) -> "_Calibration":
        ev = self._requests.get(key)
        return ev.cal if ev is not None and ev.cal is not None else self._resolve(key)

    def _update_bin(self, c: "_Calibration", b: int, accepted: bool) -> None:
        c.n[b] += 1.0
        if accepted:
            c.acc[b] += 1.0
        prior = self.calibration_prior
        c.cal[b] = (c.acc[b] + prior * (b + 0.5) / _NUM_BINS) / (c.n[b] + prior)

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
        d = self.request_decay
        c = ev.cal if ev.cal is not None else self._resolve(key)
        for i, p in enumerate(probs[: a + 1]):
            b = self._bin(p)
            self._update_bin(c, b, i < a)
            expected += c.cal[b]
            if self.match_prior > 0:
                m = match_bucket(ev.sent_match + i)
                ev.m_acc[m] = d * ev.m_acc[m] + (i < a)
                ev.m_exp[m] = d * ev.m_exp[m] + c.cal[b]
        ev.accepted = d * ev.accepted + a
        ev.expected = d * ev.expected + expected

    # ------------------------------------------------------------ selection
    def observe_pass(self, tokens: int, seconds: float) -> None:
        """A verification pass of the batch last sized scored ``tokens`` in ``seconds``: every
        pass corrects the shared cost model; a pass whose drafting requests were all of one
        scope also corrects that scope's own (a batch of one scope is priced by it, so the
        passes of other tenants never size its drafts)."""
        self.cost_model.observe(tokens, seconds)
        if self._batch_cal is not None:
            self.cost_model.observe(tokens, seconds, timing=self._batch_cal.timing)

    def path_gains(self, key, parents, probs, match_len: int = 0) -> list[float]:
        """Calibrated path acceptance probability of each node, made non-increasing."""
        return self._path_gains(key, self._calibration(key), parents, probs, match_len)

    def _path_gains(self, key, calibration, parents, probs, match_len: int) -> list[float]:
        f = self.request_factor(key)
        fm = None
        if self.match_prior > 0:
            ev = self._requests.get(key)
            if ev is not None:
                mp = self.match_prior
                fm = [(ev.m_acc[m] + mp * f) / (ev.m_exp[m] + mp) for m in range(_NUM_MATCH)]
        cal = calibration.cal
        out: list[float] = []
        depth: list[int] = []
        run = 1.0
        for i, p in enumerate(probs):
            b = int(p * _NUM_BINS)
            par = parents[i]
            dep = depth[par] + 1 if par >= 0 else 0
            depth.append(dep)
            q = cal[b if b < _NUM_BINS else _NUM_BINS - 1] * (
                f if fm is None else fm[match_bucket(match_len + dep)])
            if q > _MAX_PROB:
                q = _MAX_PROB
            g = q * out[par] if par >= 0 else q
            if g < run:
                run = g
            out.append(run)
        return out

    def choose(self, keys, drafts, contexts=None, batch=None, match_lens=None) -> list[int]:
        """Number of nodes to keep from each draft (best-first trees or chains).

        ``drafts`` are (parents, probs) pairs in node order, ``contexts`` the requests' context
        lengths (tokens in their KV cache; default 0). ``batch`` = (requests, context, longest)
        describes the whole pass when it holds more than these requests (rows that may not
        draft); by default it is these requests. Returns one count per request.
        """
        B = len(keys)
        if batch is None:
            ctx = [0] * B if contexts is None else [int(c) for c in contexts]
            batch = (B, float(sum(ctx)), float(max(ctx, default=0)))
        R, S, longest = int(batch[0]), float(batch[1]), float(batch[2])
        gains = []  # (-gain, request): each request's gains are non-increasing already
        single, mixed = None, False  # the requests' one scope (None: several, or none)
        for r, (key, (parents, probs)) in enumerate(zip(keys, drafts)):
            ml = int(match_lens[r]) if match_lens is not None else 0
            calibration = self._calibration(key)
            if r == 0:
                single = calibration
            elif calibration is not single:
                mixed = True
            # chains only: a tree's alternatives are there to be rejected
            cap = self.max_waste if all(p == i - 1 for i, p in enumerate(parents)) else math.inf
            waste = 0.0
            for g in self._path_gains(key, calibration, parents, probs, ml):
                if g < self.min_gain:
                    break  # the rest are below the floor too
                waste += 1.0 - g
                if waste > cap:
                    break  # the chain would waste more than max_waste tokens in expectation
                gains.append((-g, r))
        if B > 1:
            gains.sort()
        cm = self.cost_model
        cm.batch = (R, S, longest)
        if mixed:
            single = None
        self._batch_cal = single
        timing = single.timing if single is not None else None
        best_j, best_ratio = 0, R / cm.cost(R, R, S, longest, timing) if R else 0.0
        num = float(R)
        for j, (ng, _) in enumerate(gains, start=1):
            num -= ng
            ratio = num / cm.cost(R + j, R, S, longest, timing)
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
                for m in range(_NUM_MATCH):
                    ev.m_acc[m] *= self.idle_decay
                    ev.m_exp[m] *= self.idle_decay
        return counts

    def sent(self, key, probs, match_len: int = 0) -> None:
        """Record the raw probabilities of the chain actually sent (for ``observe``)."""
        ev = self._requests.get(key)
        if ev is None:
            ev = self._requests[key] = _RequestEvidence()
        if ev.cal is None:
            ev.cal = self._resolve(key)
        ev.sent_probs = list(probs) if probs else None
        ev.sent_match = int(match_len)
