"""Does a warm controller win where a cold one loses? Each setting of decode_sweep.py (with chat
at 16 in float32) replayed twice on the live engine's schedule, priced by the seed-2 benches'
passes: a first replay, then a second on fresh caches and request state whose controller starts
from the first's learned statistics (CARRY: "cal" the per-bin calibration, "cost" the pass-cost
corrections, default both), as a server that has run a while has them; the bench clears both
every round. Prints each setting's decode seconds over arctic's and no drafts', cold and carried.

    NREQ=15 python experiments/controller-replay/warm_start.py TRACE
"""
import copy, math, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from priced import CHAT_16_FP32, SETTINGS, replay_priced, seed2_cost, workload_requests
from specdraft.replay import load_trace
from specdraft.replay.methods import METHODS, SpecdraftMethod
trace = load_trace(sys.argv[1]); nreq = int(os.environ.get("NREQ", "15"))
mode = os.environ.get("CARRY", "cal+cost")
xa, xn = [], []
for wl, conc, bench, curve in SETTINGS + [CHAT_16_FP32]:
    recs, reqs = workload_requests(trace, wl, nreq)
    if not recs:
        continue
    cost = seed2_cost(bench)
    run = lambda m: replay_priced(m, reqs, conc, cost)
    dn, da = run(METHODS["no-drafts"]())[1], run(METHODS["arctic-suffix"]())[1]
    opts = {"strategy": "suffix", "cost_model": curve, "native": False}
    m1 = SpecdraftMethod("sd", opts); r1, d1 = run(m1)
    m2 = SpecdraftMethod("sd", opts)
    c1, c2 = m1.drafter.controller, m2.drafter.controller
    if "cal" in mode:  # the per-bin calibration
        for name in ("acc", "n", "cal"):
            setattr(c2._default, name, list(getattr(c1._default, name)))
    if "cost" in mode:  # the pass timings (shared, and those of the unscoped pool's batches)
        c2.cost_model._obs = copy.deepcopy(c1.cost_model._obs)
        c2._default.timing = copy.deepcopy(c1._default.timing)
    r2, d2 = run(m2)
    xa.append(da / d2); xn.append(dn / d2)
    print(f"{bench:18s} cold: x arctic {da/d1:.3f} x none {dn/d1:.3f} (d{r1['drafted_tokens']} a{r1['accepted_tokens']}) | carried: x arctic {da/d2:.3f} x none {dn/d2:.3f} (d{r2['drafted_tokens']} a{r2['accepted_tokens']})", flush=True)
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print(f"carried {mode}: x arctic mean {g(xa):.3f} worst {min(xa):.3f}; x none worst {min(xn):.3f}")
