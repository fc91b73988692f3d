"""The controller against vLLM `suffix` (arctic), clock-free: one workload of a trace replayed on
the live engine's schedule (all requests at once, up to CONCURRENCY in flight, 4,096 tokens a step,
128-token blocks, prefix caching), each pass priced by the pass costs a live bench measured
(``measured_cost`` of a bench JSON: the same model and dtype on this machine), for no drafts,
arctic, specdraft's controller on the CPU curve, specdraft drafting what its index proposes
(fixed) and the controller on the GPU curve (``medium``).

    python experiments/controller-replay/est.py TRACE WORKLOAD CONCURRENCY BENCH_JSON [CPU_CURVE]

Used on the seed-1 traces with the seed-2 benches' measured passes (summary.md)."""
import json, sys
from specdraft.replay import load_trace, replay_engine, EngineSchedule
from specdraft.replay.methods import METHODS
from specdraft.bench import select_requests, request_limits, measured_cost, merged_pass_costs
trace, workload, conc, costjson = sys.argv[1:5]
conc = int(conc)
recs, _ = select_requests(load_trace(trace), [workload], 15, 8192)
lims = request_limits(recs, 128)
reqs = [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"]) for r, l in zip(recs, lims)]
cost = measured_cost(merged_pass_costs(json.load(open(costjson))["table"]))
dtype_curve = sys.argv[5] if len(sys.argv) > 5 else "cpu-bf16"
variants = [("no-drafts", None, None), ("arctic-suffix", None, None), ("specdraft-suffix", dtype_curve, None),
            ("specdraft-suffix-fixed", dtype_curve, None), ("specdraft-suffix", "medium", None)]
base = None
for name, cm, ov in variants:
    m = METHODS[name](cm) if cm else METHODS[name]()
    r = replay_engine(m, reqs, 16, EngineSchedule(conc, 4096, 128, True, 7), lambda s, rows, t: cost(s, rows, t))
    base = base or r["est_seconds"]
    print(f"{name:24s} {str(cm):9s} steps {r['steps']:4d} drafted {r['drafted_tokens']:5d} accepted {r['accepted_tokens']:5d} est_s {r['est_seconds']:.2f}  x none {base / r['est_seconds']:.3f}", flush=True)
