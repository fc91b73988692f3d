"""How well the controller's path gains predict acceptance, clock-free: one workload of a trace
replayed on the live engine's schedule (priced by a bench's measured passes, as the live
controller's online corrections see them), the Python controller recording, for every node it
sent, the path gain it priced the node at and whether the target accepted it. Prints a
reliability table by gain decile (mean gain, fraction accepted) and, with DEPTH=1, split by the
node's depth in its draft (0, 1, 2, 3+) and the draft's length (< 8, >= 8).

    python experiments/controller-replay/calibration.py TRACE WORKLOAD CONCURRENCY BENCH_JSON CPU_CURVE [NREQ] [PATCH]

PATCH: one of decode_sweep.py's (e.g. global:8:0.99:1). Used in summary.md on chat at 16 in
flight (seed 1, 15 requests, the seed-2 float32 bench's passes)."""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from priced import pass_cost, replay_priced, workload_requests
from specdraft.replay import load_trace
from specdraft.replay.methods import SpecdraftMethod
import specdraft.proposers.controller as C

trace, workload, conc, bench, curve = sys.argv[1:6]
nreq = int(sys.argv[6]) if len(sys.argv) > 6 else 15
if len(sys.argv) > 7 and sys.argv[7].startswith("global:"):
    import experiments
    experiments.global_factor(*map(float, sys.argv[7].split(":")[1:]))
by_depth = os.environ.get("DEPTH") == "1"
_, reqs = workload_requests(load_trace(trace), workload, nreq)
sent = {}  # key -> path gains of the nodes sent (as priced)
cells = collections.defaultdict(lambda: [0.0, 0, 0])  # cell -> [sum of gains, accepted, nodes]
inner_choose, inner_observe = C.DraftLengthController.choose, C.DraftLengthController.observe


def choose(self, keys, drafts, contexts=None, batch=None, match_lens=None):
    counts = inner_choose(self, keys, drafts, contexts, batch, match_lens)
    for r, (key, (parents, probs)) in enumerate(zip(keys, drafts)):
        if counts[r]:
            ml = int(match_lens[r]) if match_lens is not None else 0
            sent[key] = self.path_gains(key, parents, probs, ml)[:counts[r]]
    return counts


def observe(self, key, num_accepted):
    gains = sent.pop(key, None)
    for i, g in enumerate(gains or ()):
        cell = (min(9, int(g * 10)),) + ((min(i, 3), len(gains) >= 8) if by_depth else ())
        c = cells[cell]
        c[0] += g
        c[1] += i < num_accepted
        c[2] += 1
    inner_observe(self, key, num_accepted)


C.DraftLengthController.choose, C.DraftLengthController.observe = choose, observe
method = SpecdraftMethod("specdraft", {"strategy": "suffix", "cost_model": curve, "native": False})
r, decode = replay_priced(method, reqs, int(conc), pass_cost(bench))
print(f"{workload} at {conc}: drafted {r['drafted_tokens']}, accepted {r['accepted_tokens']}, "
      f"decode {decode:.2f} s (priced)")
print("gain decile" + (", depth, long draft" if by_depth else "") + ": nodes, mean gain, accepted")
for cell in sorted(cells):
    g, a, n = cells[cell]
    print(f"{cell}: {n:5d}  {g / n:.3f}  {a / n:.3f}")
