"""The ceiling of draft-length control: one workload of a trace replayed on the live engine's
schedule (as est.py), each pass priced by a live bench's measured passes, for a method's drafts
as sent and the same drafts cut to what the target accepts (the trace's own continuation decides):
"-exact", a controller that knows each draft's accepted length and sends exactly that; "-nz", one
that only knows whether a draft will have any token accepted (sends the draft whole or nothing).
`sd-fixed-exact` is the most any length controller over specdraft's index can reach on this
schedule; `sd-ctl` is specdraft's controller; `arctic` is vLLM `suffix`. Besides the whole run
("est_s", prefill included) it prices decode alone: the passes with no prefill chunk (at most 17
tokens a row), the run's share that 1/TPOT measures.

    python ceiling.py TRACE WORKLOAD CONCURRENCY BENCH_JSON [CPU_CURVE]

A pass shape the bench never measured is priced as the nearest size it measured with as many
rows (``specdraft.bench.measured_cost``), which flatters drafts longer than any it ran.
Used on the seed-1 traces with the seed-2 benches' measured passes (summary.md)."""
import json, sys
from specdraft.replay import load_trace, replay_engine, EngineSchedule
from specdraft.replay.methods import METHODS, Method
from specdraft.bench import select_requests, request_limits, measured_cost, merged_pass_costs


class Cut(Method):
    """``inner``'s drafts (chains), cut to the accepted prefix ("exact") or sent whole only when
    some token is accepted ("nz"); ``truths``: prompt -> prompt + the target's continuation."""

    def __init__(self, inner, truths, mode="exact"):
        self.inner, self.truths, self.mode = inner, truths, mode
        self.name = f"{inner.name}-{mode}"
        self.ends_in_step = getattr(inner, "ends_in_step", False)
        self.req = {}  # key -> [truth, position of the next token]

    def start(self, key, prompt, scope=None):
        self.req[key] = [self.truths[tuple(prompt)], len(prompt)]
        self.inner.start(key, prompt, scope)

    def extend(self, key, tokens, num_accepted):
        self.req[key][1] += len(tokens)
        self.inner.extend(key, tokens, num_accepted)

    def draft_batch(self, keys, budget, batch=None):
        out = []
        for k, (toks, _) in zip(keys, self.inner.draft_batch(keys, budget, batch)):
            truth, pos = self.req[k]
            a = 0
            while a < len(toks) and pos + a < len(truth) and truth[pos + a] == toks[a]:
                a += 1
            toks = toks[:a] if self.mode == "exact" else (toks if a else [])
            out.append((toks, list(range(-1, len(toks) - 1))))
        return out

    def report_step(self, tokens, seconds):
        report = getattr(self.inner, "report_step", None)
        if report is not None:
            report(tokens, seconds)

    def finish(self, key):
        self.req.pop(key, None)
        self.inner.finish(key)


trace, workload, conc, costjson = sys.argv[1:5]
conc = int(conc)
curve = sys.argv[5] if len(sys.argv) > 5 else "cpu-bf16"
recs, _ = select_requests(load_trace(trace), [workload], 15, 8192)
lims = request_limits(recs, 128)
reqs = [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"]) for r, l in zip(recs, lims)]
truths = {tuple(r["prompt_token_ids"]): list(r["prompt_token_ids"]) + list(r["output_token_ids"]) for r in recs}
cost = measured_cost(merged_pass_costs(json.load(open(costjson))["table"]))
variants = [("no-drafts", lambda: METHODS["no-drafts"]()),
            ("arctic", lambda: METHODS["arctic-suffix"]()),
            ("arctic-exact", lambda: Cut(METHODS["arctic-suffix"](), truths)),
            ("sd-ctl", lambda: METHODS["specdraft-suffix"](curve)),
            ("sd-ctl-exact", lambda: Cut(METHODS["specdraft-suffix"](curve), truths)),
            ("sd-ctl-nz", lambda: Cut(METHODS["specdraft-suffix"](curve), truths, "nz")),
            ("sd-fixed-exact", lambda: Cut(METHODS["specdraft-suffix-fixed"](curve), truths)),
            ("sd-fixed-nz", lambda: Cut(METHODS["specdraft-suffix-fixed"](curve), truths, "nz"))]
ref = {}
for name, make in variants:
    decode = [0.0]

    def priced(step, rows, tokens):
        c = cost(step, rows, tokens)
        if c and tokens <= rows * 17:  # no prefill chunk in this pass: decode
            decode[0] += c
        return c

    r = replay_engine(make(), reqs, 16, EngineSchedule(conc, 4096, 128, True, 7), priced)
    run = (r["est_seconds"], decode[0])
    ref.setdefault("none", run)
    if name == "arctic":
        ref["arctic"] = run
    none, arctic = ref["none"], ref.get("arctic")
    print(f"{workload} c{conc} {name:15s} steps {r['steps']:4d} drafted {r['drafted_tokens']:5d} "
          f"accepted {r['accepted_tokens']:5d} | run {run[0]:6.2f}s x none {none[0] / run[0]:.3f} "
          f"x arctic {arctic[0] / run[0] if arctic else float('nan'):.3f} | decode {run[1]:6.2f}s "
          f"x none {none[1] / run[1]:.3f} x arctic {arctic[1] / run[1] if arctic else float('nan'):.3f}",
          flush=True)
