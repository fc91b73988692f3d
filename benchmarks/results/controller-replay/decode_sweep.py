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

    NREQ=40 python decode_sweep.py TRACE '{}' '{"max_waste": 16}'
"""
import json, math, os, sys
from specdraft.replay import load_trace, replay_engine, EngineSchedule
from specdraft.replay.methods import METHODS
from specdraft.bench import select_requests, request_limits, measured_cost, merged_pass_costs

SETTINGS = [("agentic", 4, "agentic-c4-bf16", "cpu-bf16"), ("agentic", 4, "agentic-c4-fp32", "cpu-fp32"),
            ("code_edit", 4, "code-edit-c4-bf16", "cpu-bf16"), ("code_edit", 4, "code-edit-c4-fp32", "cpu-fp32"),
            ("chat", 4, "chat-c4-bf16", "cpu-bf16"), ("agentic", 16, "agentic-c16-bf16", "cpu-bf16"),
            ("code_edit", 16, "code-edit-c16-bf16", "cpu-bf16"), ("chat", 16, "chat-c16-bf16", "cpu-bf16")]
HERE = os.path.dirname(os.path.abspath(__file__))
patch = os.environ.get("PATCH", "")
if patch:
    sys.path.insert(0, HERE)
    import experiments
    if patch == "joint":
        experiments.joint_calibration()
    elif patch.startswith("gate:"):
        experiments.first_gain_gate(float(patch.split(":")[1]))
    elif patch.startswith("streak:"):
        experiments.streak_boost(float(patch.split(":")[1]))
trace = load_trace(sys.argv[1])
variants = [json.loads(v) for v in sys.argv[2:]] or [{}]
nreq = int(os.environ.get("NREQ", "40"))
data = {}
for wl, conc, bench, curve in SETTINGS:
    recs, _ = select_requests(trace, [wl], nreq, 8192)
    if not recs:
        continue  # the trace has no such workload
    lims = request_limits(recs, 128)
    reqs = [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"]) for r, l in zip(recs, lims)]
    path = os.path.join(HERE, "..", f"bench-seed2-{bench}.json")
    cost = measured_cost(merged_pass_costs(json.load(open(path))["table"]))

    def run(method):
        decode = [0.0]

        def priced(step, rows, tokens):
            c = cost(step, rows, tokens)
            if c and tokens <= rows * 17:  # no prefill chunk in this pass
                decode[0] += c
            return c
        r = replay_engine(method, reqs, 16, EngineSchedule(conc, 4096, 128, True, 7), priced)
        return decode[0], r["est_seconds"]

    arctic = run(METHODS["arctic-suffix"]())
    row = []
    for v in variants:
        v = dict(v)
        s = run(METHODS["specdraft-suffix"](v.pop("cost_model", curve), v or None))
        row.append((arctic[0] / s[0], arctic[1] / s[1]))
    data[bench] = row
    print(f"{bench:20s} " + " ".join(f"{d:.3f} ({w:.3f})" for d, w in row), flush=True)
for i, v in enumerate(variants):
    ds = [data[b][i][0] for b in data]
    print(f"{json.dumps(v)}: decode geometric mean {math.exp(sum(map(math.log, ds)) / len(ds)):.3f}, "
          f"worst {min(ds):.3f}")
