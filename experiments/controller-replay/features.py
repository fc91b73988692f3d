"""What predicts that a draft has any token accepted: each request of a workload replayed alone
(in trace order, finished ones into the global cache), specdraft's index drafting up to 16 tokens
at every step (no controller), the draft judged against the trace's continuation (first 128
output tokens). Prints P(at least one token accepted) and the rejected tokens by the draft's
match length, its first token's probability, and whether the request's previous draft had any /
all of its tokens accepted.

    python experiments/controller-replay/features.py TRACE WORKLOAD
"""
import sys, collections, math
from specdraft.replay import load_trace
from specdraft.proposers import make_drafter
from specdraft.bench import select_requests, request_limits
trace = load_trace(sys.argv[1])
wls = sys.argv[2].split(",")
rows = []
for wl in wls:
    recs, _ = select_requests(trace, [wl], 40, 8192)
    d = make_drafter({"strategy": "suffix", "adaptive": False})
    for i, r in enumerate(recs):
        p, out = list(r["prompt_token_ids"]), list(r["output_token_ids"])
        key = f"{wl}{i}"
        d.start(key, p)
        pos = 1; d.extend(key, out[:1], None)
        prev_any, prev_full, ema = None, None, 0.5
        while pos < min(len(out), 128):
            t = d.draft(key, 16)
            toks = t.token_ids if t.is_chain() else t.best_path().token_ids
            probs = t.chain_probs()
            a = 0
            while a < len(toks) and pos + a < len(out) and out[pos + a] == toks[a]: a += 1
            if toks:
                rows.append(dict(wl=wl, ml=t.match_len, p1=probs[0], n=len(toks), prev_any=prev_any,
                                 prev_full=prev_full, ema=ema, a=a))
                prev_any, prev_full = a > 0, a == len(toks)
                ema = 0.7 * ema + 0.3 * (a > 0)
            emit = out[pos:pos + a + 1]
            d.extend(key, emit, a if toks else None)
            pos += len(emit)
        d.finish(key)
N = len(rows); base = sum(r["a"] > 0 for r in rows) / N
print(f"{wls} drafts {N}, P(any accepted) {base:.2f}")
def table(name, f):
    g = collections.defaultdict(lambda: [0, 0, 0])
    for r in rows:
        k = f(r); g[k][0] += 1; g[k][1] += r["a"] > 0; g[k][2] += r["n"] - r["a"]
    print(" ", name, " ".join(f"{k}:{v[1]/v[0]:.2f}(n{v[0]},rej{v[2]})" for k, v in sorted(g.items(), key=lambda kv: str(kv[0]))))
table("match_len", lambda r: min(r["ml"], 16) if r["ml"] < 4 else (4 if r["ml"] < 8 else (8 if r["ml"] < 16 else 16)))
table("p1", lambda r: round(min(r["p1"], 0.99), 1))
table("prev_any", lambda r: r["prev_any"])
table("prev_full", lambda r: r["prev_full"])
table("ema", lambda r: round(r["ema"], 1))
table("ml>=4 & p1>=.5", lambda r: (r["ml"] >= 4, r["p1"] >= 0.5))
