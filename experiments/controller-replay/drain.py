"""A drain-aware rule, clock-free: when the batch has shrunk since the last request was admitted
(nobody took a finished request's slot, so nobody waits), a row whose tokens left are under
``THETA`` times the most any drafting row has left is off the run's critical path: it gets no
draft (its accepted tokens would shorten nothing, and its rejected ones cost a token each).
Every other step is the controller's as shipped. A THETA written "a0.5" applies the rule from
the first step (a closed batch known to be one: nobody ever waits), the bound of the rule;
"tau" puts THETA at 1 / (1 + accepted tokens per drafted row-step so far): a row is off the path
only if, without drafts, it still ends before the row with the most left ends with them.
Replayed on the live engine's schedule (all requests at once, up to CONCURRENCY in flight) and
priced by a live bench's measured passes, as est.py does; the rule is a subclass of the replay's specdraft method, not in the product.

    python experiments/controller-replay/drain.py TRACE WORKLOAD N CONCURRENCY BENCH_JSON CURVE [THETA ...]

Prints, per variant: steps, drafted / accepted, priced seconds and x no drafts."""
import json
import sys

from specdraft.bench import measured_cost, merged_pass_costs, request_limits, select_requests
from specdraft.replay import EngineSchedule, load_trace, replay_engine
from specdraft.replay.methods import METHODS, SpecdraftMethod


class DrainAware(SpecdraftMethod):
    def __init__(self, name, options, limits, theta, always=False):
        super().__init__(name, options)
        self.limits, self.theta, self.always = limits, theta, always
        self.peak, self.admitted, self.cut = 0, False, 0
        self.accepted, self.row_steps = 0, 0  # for "tau": tokens a drafting row gains a step

    def extend(self, key, tokens, num_accepted):
        if num_accepted is not None:
            self.accepted += num_accepted
            self.row_steps += 1
        super().extend(key, tokens, num_accepted)

    def start(self, key, prompt, scope=None):
        self.admitted = True
        super().start(key, prompt, scope)

    def draft_batch(self, keys, budget, batch=None):
        rows = int(batch[0]) if batch is not None else len(keys)
        if self.admitted:
            self.peak, self.admitted = rows, False
        self.peak = max(self.peak, rows)
        if (rows >= self.peak and not self.always) or not keys:
            return super().draft_batch(keys, budget, batch)
        left = {k: self.limits[k - 1] - (self._num[k] - self._prompt[k]) for k in keys}
        most = max(left.values())
        theta = self.theta
        if theta < 0:  # "tau": off the path only if it ends before the longest, drafts or not
            theta = 1.0 / (1.0 + self.accepted / max(1, self.row_steps))
        keep = [k for k in keys if left[k] >= theta * most]
        self.cut += len(keys) - len(keep)
        # with no row kept the step still runs (budget 0): the drafter sees every step
        drafts = dict(zip(keep, super().draft_batch(keep, budget, batch)))
        return [drafts.get(k, ([], [])) for k in keys]


def main():
    trace, workload, n, conc, bench, curve, *thetas = sys.argv[1:]
    recs, _ = select_requests(load_trace(trace), [workload], int(n), 4096)
    lims = request_limits(recs, 128)
    reqs = [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"])
            for r, l in zip(recs, lims)]
    cost = measured_cost(merged_pass_costs(json.load(open(bench))["table"]))
    variants = [("no drafts", lambda: METHODS["no-drafts"]()),
                ("specdraft", lambda: METHODS["specdraft-suffix"](curve))]
    for t in thetas or ["0.5", "0.75", "0.9"]:  # "a0.5": from the first step (nobody ever waits)
        variants.append((f"drain {t}", lambda t=t: DrainAware(
            "specdraft-drain", {"strategy": "suffix", "cost_model": curve}, lims,
            -1.0 if t.lstrip("a") == "tau" else float(t.lstrip("a")), always=t.startswith("a"))))
    base = None
    for name, make in variants:
        m = make()
        r = replay_engine(m, reqs, 16, EngineSchedule(int(conc), 4096, 128, True, None),
                          cost)
        base = base or r["est_seconds"]
        print(f"{workload:9s} c{conc:<3s} {name:12s} steps {r['steps']:4d} drafted "
              f"{r['drafted_tokens']:5d} accepted {r['accepted_tokens']:5d} cut {getattr(m, 'cut', 0):5d} "
              f"est_s {r['est_seconds']:7.2f}  x none {base / r['est_seconds']:.3f}", flush=True)


if __name__ == "__main__":
    main()
