"""Does a warm controller win where a cold one loses? Each setting of decode_sweep.py (with chat
at 16 in float32) replayed twice on the live engine's schedule, priced by the seed-2 benches'
passes: a first replay, then a second on fresh caches and request state whose controller starts
from the first's learned statistics (CARRY: "cal" the per-bin calibration, "cost" the pass-cost
corrections, default both), as a server that has run a while has them; the bench clears both
every round. Prints each setting's decode seconds over arctic's and no drafts', cold and carried.

    NREQ=15 python warm_start.py TRACE
"""
import copy, math, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from priced import pass_cost, replay_priced, workload_requests
from specdraft.replay import load_trace
from specdraft.replay.methods import METHODS, SpecdraftMethod
SETTINGS = [("agentic", 4, "agentic-c4-bf16", "cpu-bf16"), ("agentic", 4, "agentic-c4-fp32", "cpu-fp32"),
            ("code_edit", 4, "code-edit-c4-bf16", "cpu-bf16"), ("code_edit", 4, "code-edit-c4-fp32", "cpu-fp32"),
            ("chat", 4, "chat-c4-bf16", "cpu-bf16"), ("agentic", 16, "agentic-c16-bf16", "cpu-bf16"),
            ("code_edit", 16, "code-edit-c16-bf16", "cpu-bf16"), ("chat", 16, "chat-c16-bf16", "cpu-bf16"),
            ("chat", 16, "chat-c16-fp32", "cpu-fp32")]
trace = load_trace(sys.argv[1]); nreq = int(os.environ.get("NREQ", "15"))
mode = os.environ.get("CARRY", "cal+cost")
xa, xn = [], []
for wl, conc, bench, curve in SETTINGS:
    recs, reqs = workload_requests(trace, wl, nreq)
    if not recs:
        continue
    cost = pass_cost(os.path.join(HERE, "..", f"bench-seed2-{bench}.json"))
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
