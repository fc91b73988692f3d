"""The controller's options against vLLM `suffix` (arctic) on many settings at once, clock-free:
each workload of a trace (the first LIMIT requests, default 15; WLS, default agentic, code_edit,
chat) replayed at 16 and 4 in flight on the live engine's schedule, every pass priced by the
passes the seed-2 bfloat16 bench of that shape measured (chat's for workloads without a bench).
Prints arctic's priced seconds over specdraft's for each variant (a JSON list of option dicts),
then their geometric mean and minimum over the settings.

    LIMIT=40 WLS=agentic,code_edit,chat python experiments/controller-replay/sweep.py TRACE '[{}, {"match_prior": 0.0}]'
"""
import json, sys
from specdraft.replay import load_trace, replay_engine, EngineSchedule
from specdraft.replay.methods import METHODS
from specdraft.bench import select_requests, request_limits, measured_cost, merged_pass_costs
trace = sys.argv[1]
variants = json.loads(sys.argv[2])
import os
LIMIT = int(os.environ.get("LIMIT", "15"))
WLS = os.environ.get("WLS", "agentic,code_edit,chat").split(",")
PRICE = {"agentic": "agentic", "code_edit": "code-edit"}
settings = [(wl, c, f"{PRICE.get(wl, 'chat')}-c{c}") for c in (16, 4) for wl in WLS]
recs_all = load_trace(trace)
res = {}
for wl, conc, tag in settings:
    recs, _ = select_requests(recs_all, [wl], LIMIT, 8192)
    lims = request_limits(recs, 128)
    reqs = [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"]) for r, l in zip(recs, lims)]
    cost = measured_cost(merged_pass_costs(json.load(open(f"benchmarks/results/bench-seed2-{tag}-bf16.json"))["table"]))
    pc = lambda s, rows, t: cost(s, rows, t)
    a = replay_engine(METHODS["arctic-suffix"](), reqs, 16, EngineSchedule(conc, 4096, 128, True, 7), pc)["est_seconds"]
    row = []
    for v in variants:
        r = replay_engine(METHODS["specdraft-suffix"]("cpu-bf16", v or None), reqs, 16, EngineSchedule(conc, 4096, 128, True, 7), pc)
        row.append(a / r["est_seconds"])
    tag = f"{wl}-c{conc}"
    print(f"{tag:18s} " + " ".join(f"{x:.3f}" for x in row), flush=True)
    res[tag] = row
import math
print("geomean           " + " ".join(f"{math.exp(sum(math.log(res[t][i]) for t in res)/len(res)):.3f}" for i in range(len(variants))))
print("min               " + " ".join(f"{min(res[t][i] for t in res):.3f}" for i in range(len(variants))))
