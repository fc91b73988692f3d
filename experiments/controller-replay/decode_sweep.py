"""The controller's options against vLLM `suffix` (arctic) on decode, clock-free: each setting's
workload of a trace (the first NREQ requests, default 40) replayed on the live engine's schedule,
every pass priced by the passes the seed-2 bench of that shape and dtype measured; the seconds of
the passes without a prefill chunk (what 1/TPOT measures) are compared, arctic's over specdraft's
(the whole run's in brackets). Each variant is a JSON dict of drafter options ("cost_model"
defaults to the curve the vLLM adapter picks for the dtype); then their geometric mean and worst
setting. PATCH=joint calibrates per (probability bin, match bucket) instead of per bin;
PATCH=gate:T sends nothing when a draft's first calibrated gain is below T; PATCH=streak:Q takes
each node's acceptance as at least Q after a draft accepted whole (all on the Python controller:
pass "native": false).

    NREQ=40 python experiments/controller-replay/decode_sweep.py TRACE '{}' '{"max_waste": 16}'
"""
import json, math, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from priced import CHAT_16_FP32, SETTINGS, replay_priced, seed2_cost, workload_requests
from specdraft.replay import load_trace
from specdraft.replay.methods import METHODS

patch = os.environ.get("PATCH", "")
if patch:
    import experiments
    if patch == "joint":
        experiments.joint_calibration()
    elif patch.startswith("gate:"):
        experiments.first_gain_gate(float(patch.split(":")[1]))
    elif patch.startswith("streak:"):
        experiments.streak_boost(float(patch.split(":")[1]))
    elif patch.startswith("factor:"):
        experiments.factor_variant(**json.loads(patch[len("factor:"):]))
    elif patch.startswith("prior:"):
        experiments.prior_scale(float(patch.split(":")[1]))
    elif patch == "boost":
        experiments.bounded_boost()
    elif patch.startswith("global:"):
        experiments.global_factor(*map(float, patch.split(":")[1:]))
against_none = os.environ.get("NONE") == "1"
if against_none:
    SETTINGS = SETTINGS + [CHAT_16_FP32]
trace = load_trace(sys.argv[1])
variants = [json.loads(v) for v in sys.argv[2:]] or [{}]
nreq = int(os.environ.get("NREQ", "40"))
data = {}
for wl, conc, bench, curve in SETTINGS:
    recs, reqs = workload_requests(trace, wl, nreq)
    if not recs:
        continue  # the trace has no such workload
    cost = seed2_cost(bench)

    def run(method):
        r, decode = replay_priced(method, reqs, conc, cost)
        return decode, r["est_seconds"]

    arctic = run(METHODS["arctic-suffix"]())
    none = run(METHODS["no-drafts"]()) if against_none else None
    row = []
    for v in variants:
        v = dict(v)
        s = run(METHODS["specdraft-suffix"](v.pop("cost_model", curve), v or None))
        row.append((arctic[0] / s[0], arctic[1] / s[1]) + ((none[0] / s[0],) if none else ()))
    data[bench] = row
    print(f"{bench:20s} " + " ".join(f"{x[0]:.3f} ({x[1]:.3f})" + (f" x none {x[2]:.3f}" if none else "")
                                     for x in row), flush=True)
gmean = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for i, v in enumerate(variants):
    ds = [data[b][i][0] for b in data]
    line = f"{json.dumps(v)}: decode geometric mean {gmean(ds):.3f}, worst {min(ds):.3f}"
    if against_none:
        ns = [data[b][i][2] for b in data]
        line += f"; x none geometric mean {gmean(ns):.3f}, worst {min(ns):.3f}"
    print(line)
