"""The ceiling of draft-length control: one workload of a trace replayed on the live engine's
schedule (as est.py), each pass priced by a live bench's measured passes, for a method's drafts
as sent and the same drafts cut to what the target accepts (the trace's own continuation decides):
"-exact", a controller that knows each draft's accepted length and sends exactly that; "-nz", one
that only knows whether a draft will have any token accepted (sends the draft whole or nothing).
`sd-fixed-exact` is the most any length controller over specdraft's index can reach on this
schedule; `sd-ctl` is specdraft's controller; `arctic` is vLLM `suffix`. Besides the whole run
("est_s", prefill included) it prices decode alone: the passes with no prefill chunk (at most 17
tokens a row), the run's share that 1/TPOT measures.

    python experiments/controller-replay/ceiling.py TRACE WORKLOAD CONCURRENCY BENCH_JSON [CPU_CURVE]

A pass shape the bench never measured is priced as the nearest size it measured with as many
rows (``specdraft.bench.measured_cost``), which flatters drafts longer than any it ran.
Used on the seed-1 traces with the seed-2 benches' measured passes (summary.md)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from priced import pass_cost, replay_priced, workload_requests
from specdraft.replay import load_trace
from specdraft.replay.methods import METHODS, Method


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
recs, reqs = workload_requests(load_trace(trace), workload, 15)
truths = {tuple(r["prompt_token_ids"]): list(r["prompt_token_ids"]) + list(r["output_token_ids"]) for r in recs}
cost = pass_cost(costjson)
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
    r, decode = replay_priced(make(), reqs, conc, cost)
    run = (r["est_seconds"], decode)
    ref.setdefault("none", run)
    if name == "arctic":
        ref["arctic"] = run
    none, arctic = ref["none"], ref.get("arctic")
    print(f"{workload} c{conc} {name:15s} steps {r['steps']:4d} drafted {r['drafted_tokens']:5d} "
          f"accepted {r['accepted_tokens']:5d} | run {run[0]:6.2f}s x none {none[0] / run[0]:.3f} "
          f"x arctic {arctic[0] / run[0] if arctic else float('nan'):.3f} | decode {run[1]:6.2f}s "
          f"x none {none[1] / run[1]:.3f} x arctic {arctic[1] / run[1] if arctic else float('nan'):.3f}",
          flush=True)
