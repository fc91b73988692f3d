"""Where specdraft's controller leaves accepted tokens out: one workload of a trace replayed on the
live engine's schedule (as est.py) with two drafters fed the same events in lockstep, the
controller's (whose drafts the replay verifies) and the same index drafting what it proposes
(fixed). Per draft call it counts where the controller sent nothing though the fixed candidate
would have had tokens accepted, and where the controller's draft was accepted whole but shorter
than what the fixed candidate would have had accepted.

    python experiments/controller-replay/why.py TRACE WORKLOAD CONCURRENCY BENCH_JSON ['{"option": value, "_noreport": true}']

The JSON holds drafter options for the controller's drafter; "_noreport": no pass timings reach it
(the cost curve alone)."""
import json, sys, collections
from specdraft.replay import load_trace, replay_engine, EngineSchedule
from specdraft.replay.methods import Method, METHODS
from specdraft.replay.engine import accepted_length
from specdraft.bench import select_requests, request_limits, measured_cost, merged_pass_costs

trace, workload, conc, costjson = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
opts = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
NOREP = opts.pop("_noreport", False)
recs, _ = select_requests(load_trace(trace), [workload], 15, 8192)
lims = request_limits(recs, 128)
reqs = [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"]) for r, l in zip(recs, lims)]
d = json.load(open(costjson))
shared = merged_pass_costs(d["table"])
cost = measured_cost(shared)

class Twin(Method):
    ends_in_step = True
    def __init__(self):
        self.a = METHODS["specdraft-suffix"]("cpu-bf16", opts or None) if opts else METHODS["specdraft-suffix"]("cpu-bf16")
        self.b = METHODS["specdraft-suffix-fixed"]("cpu-bf16")
        self.truth = {}; self.pos = {}; self.log = []
    def start(self, key, prompt, scope=None):
        self.a.start(key, prompt); self.b.start(key, prompt)
        for p, o, t in reqs:
            if p == prompt: self.truth[key] = t
        self.pos[key] = 0
    def extend(self, key, toks, acc):
        self.a.extend(key, toks, acc); self.b.extend(key, toks, None); self.pos[key] += len(toks)
    def draft_batch(self, keys, budget, batch=None):
        da = self.a.draft_batch(keys, budget, batch)
        db = self.b.draft_batch(keys, budget, batch)
        for k, x, y in zip(keys, da, db):
            t = self.truth[k][self.pos[k]:]
            self.log.append((k, len(keys), len(x[0]), accepted_length(x[0], x[1], t) if x[0] else 0,
                             len(y[0]), accepted_length(y[0], y[1], t) if y[0] else 0))
        return da
    def report_step(self, tokens, seconds):
        self.a.report_step(tokens, seconds)
    def finish(self, key):
        self.a.finish(key); self.b.finish(key)

m = Twin()
r = replay_engine(m, reqs, 16, EngineSchedule(conc, 4096, 128, True, 7), None if NOREP else (lambda s, rows, t: cost(s, rows, t)))
print({k: r[k] for k in ("drafts", "drafted_tokens", "accepted_tokens", "steps")}, "est_s", round(r.get("est_seconds", 0), 1))
L = m.log
n = len(L)
zero = [x for x in L if x[2] == 0]
zero_cand = [x for x in zero if x[4] > 0]
zero_good = [x for x in zero_cand if x[5] > 0]
print(f"draft calls {n}; adaptive sent none {len(zero)}; of those fixed had a candidate {len(zero_cand)}; candidate would have got >=1 accepted {len(zero_good)}, tokens lost {sum(x[5] for x in zero_good)}")
short = [x for x in L if 0 < x[2] and x[3] == x[2] and x[5] > x[3]]
print(f"adaptive all-accepted but shorter than fixed's accepted: {len(short)}, tokens lost {sum(x[5]-x[3] for x in short)}")
print("sent by adaptive: tokens", sum(x[2] for x in L), "accepted", sum(x[3] for x in L), "| fixed would: ", sum(x[4] for x in L), sum(x[5] for x in L))
by_rows = collections.defaultdict(lambda: [0, 0, 0])
for x in L:
    c = by_rows[min(x[1], 4)]; c[0] += 1; c[1] += x[2] == 0 and x[4] > 0; c[2] += x[2] == 0 and x[5] > 0
print("by rows (calls, none-sent-with-candidate, of which good):", dict(by_rows))
