"""Controller changes tried by decode_sweep.py (PATCH=...), applied to the Python controller."""
import specdraft.proposers.controller as C

NB, NM = C._NUM_BINS, C._NUM_MATCH


class _JointCalibration:
    """A scope's calibration per (probability bin, match bucket)."""
    __slots__ = ("acc", "n", "cal", "timing")

    def __init__(self):
        self.acc = [0.0] * (NB * NM)
        self.n = [0.0] * (NB * NM)
        self.cal = [((i // NM) + 0.5) / NB for i in range(NB * NM)]
        self.timing = {}


def _gains(self, key, parents, probs, match_len, node, f=None):
    """The controller's path gains with each node's acceptance from ``node(p, m, x)`` (raw
    probability, match bucket, the request's factor for that bucket), capped and made
    non-increasing as the controller does; ``f``: the request factor (default the controller's)."""
    f = self.request_factor(key) if f is None else f
    fm = None
    ev = self._requests.get(key)
    if self.match_prior > 0 and ev is not None:
        mp = self.match_prior
        fm = [(ev.m_acc[m] + mp * f) / (ev.m_exp[m] + mp) for m in range(NM)]
    out, depth, run = [], [], 1.0
    for i, p in enumerate(probs):
        par = parents[i]
        dep = depth[par] + 1 if par >= 0 else 0
        depth.append(dep)
        m = C.match_bucket(match_len + dep)
        q = min(C._MAX_PROB, node(p, m, f if fm is None else fm[m]))
        g = q * out[par] if par >= 0 else q
        run = min(run, g)
        out.append(run)
    return out


def joint_calibration():
    def update_bin(self, c, b, accepted):
        c.n[b] += 1.0
        c.acc[b] += 1.0 if accepted else 0.0
        prior = self.calibration_prior
        c.cal[b] = (c.acc[b] + prior * ((b // NM) + 0.5) / NB) / (c.n[b] + prior)

    def observe(self, key, num_accepted):
        ev = self._requests.get(key)
        if ev is None or ev.sent_probs is None:
            return
        probs, ev.sent_probs = ev.sent_probs, None
        a = max(0, min(num_accepted, len(probs)))
        expected, d = 0.0, self.request_decay
        c = ev.cal if ev.cal is not None else self._resolve(key)
        for i, p in enumerate(probs[: a + 1]):
            m = C.match_bucket(ev.sent_match + i)
            b = self._bin(p) * NM + m
            self._update_bin(c, b, i < a)
            expected += c.cal[b]
            if self.match_prior > 0:
                ev.m_acc[m] = d * ev.m_acc[m] + (i < a)
                ev.m_exp[m] = d * ev.m_exp[m] + c.cal[b]
        ev.accepted = d * ev.accepted + a
        ev.expected = d * ev.expected + expected

    def path_gains(self, key, calibration, parents, probs, match_len):
        cal = calibration.cal
        return _gains(self, key, parents, probs, match_len,
                      lambda p, m, x: cal[min(int(p * NB), NB - 1) * NM + m] * x)

    C._Calibration = _JointCalibration
    C.DraftLengthController._update_bin = update_bin
    C.DraftLengthController.observe = observe
    C.DraftLengthController._path_gains = path_gains


def first_gain_gate(threshold):
    inner = C.DraftLengthController._path_gains

    def gated(self, key, calibration, parents, probs, match_len):
        out = inner(self, key, calibration, parents, probs, match_len)
        return [0.0] * len(out) if out and out[0] < threshold else out

    C.DraftLengthController._path_gains = gated


def streak_boost(floor):
    """After a draft accepted whole, the request's next draft is taken as a copy that goes on:
    each node's calibrated acceptance is at least ``floor`` (until a draft is cut short)."""
    inner_observe = C.DraftLengthController.observe
    inner_gains = C.DraftLengthController._path_gains
    full = {}

    def observe(self, key, num_accepted):
        ev = self._requests.get(key)
        if ev is not None and ev.sent_probs is not None:
            full[id(ev)] = num_accepted >= len(ev.sent_probs)
        inner_observe(self, key, num_accepted)

    def path_gains(self, key, calibration, parents, probs, match_len):
        ev = self._requests.get(key)
        if ev is None or not full.get(id(ev)):
            return inner_gains(self, key, calibration, parents, probs, match_len)
        out, depth = [], []
        base = inner_gains(self, key, calibration, parents, [max(p, 0.0) for p in probs], match_len)
        run = 1.0
        for i, par in enumerate(parents):
            # the node's own acceptance from the inner gains (ratio to its parent's), floored
            own = base[i] / base[par] if par >= 0 and base[par] > 0 else base[i]
            q = min(C._MAX_PROB, max(own, floor))
            g = q * out[par] if par >= 0 else q
            run = min(run, g)
            out.append(run)
        return out

    C.DraftLengthController.observe = observe
    C.DraftLengthController._path_gains = path_gains


def global_factor(prior, decay, cap):
    """One factor per controller on the path gains of the nodes it sent: (accepted + prior) /
    (sum of the sent nodes' path gains + prior), old drafts decayed by ``decay`` per draft, at
    most ``cap``; every node's path gain is multiplied by it. The request factors correct the
    per-node (conditional) acceptance over the nodes a draft reached; this one corrects what the
    controller prices, the expected accepted count of whole drafts."""
    inner_choose = C.DraftLengthController.choose
    inner_observe = C.DraftLengthController.observe
    inner_gains = C.DraftLengthController._path_gains
    state = {}  # controller id -> [accepted, predicted, {key: predicted of the draft in flight}]

    def factor(self):
        s = state.setdefault(id(self), [0.0, 0.0, {}])
        return min(cap, (s[0] + prior) / (s[1] + prior))

    def path_gains(self, key, calibration, parents, probs, match_len):
        g = factor(self)
        return [min(x * g, C._MAX_PROB) for x in inner_gains(self, key, calibration, parents, probs, match_len)]

    def choose(self, keys, drafts, contexts=None, batch=None, match_lens=None):
        counts = inner_choose(self, keys, drafts, contexts, batch, match_lens)
        s, g = state.setdefault(id(self), [0.0, 0.0, {}]), factor(self)
        for r, (key, (parents, probs)) in enumerate(zip(keys, drafts)):
            if counts[r]:
                ml = int(match_lens[r]) if match_lens is not None else 0
                sent = path_gains(self, key, self._calibration(key), parents, probs, ml)[:counts[r]]
                s[2][key] = sum(sent) / g  # the gains before this factor
        return counts

    def observe(self, key, num_accepted):
        s = state.setdefault(id(self), [0.0, 0.0, {}])
        predicted = s[2].pop(key, None)
        ev = self._requests.get(key)
        if predicted is not None and ev is not None and ev.sent_probs is not None:
            s[0] = decay * s[0] + min(num_accepted, len(ev.sent_probs))
            s[1] = decay * s[1] + predicted
        inner_observe(self, key, num_accepted)

    C.DraftLengthController.choose = choose
    C.DraftLengthController.observe = observe
    C.DraftLengthController._path_gains = path_gains


def bounded_boost():
    """A request or match factor above 1 closes part of a node's gap to certainty instead of
    multiplying its acceptance: q = 1 - (1 - c) / f (below 1, q = c * f as before), so a factor
    of 1.2 takes 0.85 to 0.875, not to the 0.995 cap."""
    def path_gains(self, key, calibration, parents, probs, match_len):
        cal = calibration.cal

        def node(p, m, x):
            c = cal[min(int(p * NB), NB - 1)]
            return c * x if x <= 1.0 else 1.0 - (1.0 - c) / x
        return _gains(self, key, parents, probs, match_len, node)

    C.DraftLengthController._path_gains = path_gains

def factor_variant(cap=float("inf"), up_prior=None, short_cap=None):
    """The request and match factors bounded: at most ``cap``; a request factor above 1 taken
    with ``up_prior`` pseudo-observations instead of ``request_prior`` (one lucky draft boosts
    less); at most ``short_cap`` on nodes whose matched context is under 4 tokens."""
    def path_gains(self, key, calibration, parents, probs, match_len):
        ev = self._requests.get(key)
        f = 1.0
        if ev is not None:
            f = (ev.accepted + self.request_prior) / (ev.expected + self.request_prior)
            if up_prior is not None and f > 1.0:
                f = (ev.accepted + up_prior) / (ev.expected + up_prior)
        cal = calibration.cal

        def node(p, m, x):
            x = min(x, cap)
            if short_cap is not None and m <= 1:
                x = min(x, short_cap)
            return cal[min(int(p * NB), NB - 1)] * x
        return _gains(self, key, parents, probs, match_len, node, f)

    C.DraftLengthController._path_gains = path_gains


def prior_scale(s):
    """Each probability bin's calibration starts at ``s`` times the bin's centre (a cold
    controller trusts the index's probabilities less)."""
    class Cal(C._Calibration):
        __slots__ = ()
        def __init__(self):
            super().__init__()
            self.cal = [s * (b + 0.5) / NB for b in range(NB)]
    def update_bin(self, c, b, accepted):
        c.n[b] += 1.0
        if accepted:
            c.acc[b] += 1.0
        prior = self.calibration_prior
        c.cal[b] = (c.acc[b] + prior * s * (b + 0.5) / NB) / (c.n[b] + prior)
    C._Calibration = Cal
    C.DraftLengthController._update_bin = update_bin
