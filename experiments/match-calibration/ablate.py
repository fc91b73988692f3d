"""Ablation of the chain-draft waste controls, on a tuning half and a held-out half of each trace.

    python experiments/match-calibration/ablate.py TRACE [TRACE ...] [--held-out TRACE ...]

writes summary.md (the tables) and one JSON file per trace to benchmarks/results/match-calibration/.

Each trace is split in two: requests of a workload alternate between the halves in arrival order
(a multi-turn session stays whole: sessions alternate). The defaults were chosen on half 0 (the
even-indexed requests and sessions); half 1 was only looked at afterwards. ``max_waste`` 4 is the
smallest cap that kept tokens per pass at 1.2x arctic's or more on half 0's code editing (both
traces) and agentic loops. For every half and
workload, specdraft's chain (``specdraft-suffix``) is replayed with each option set below and
compared with arctic's suffix decoding (vLLM's ``suffix`` defaults) on the same requests: output
tokens per target pass and drafted tokens per accepted token, each as a ratio to arctic's
("x"; a d/a ratio below 1 wastes less than arctic). The tree strategy (verified as a tree) is
reported beside it with its nodes per accepted token. Traces after ``--held-out`` were recorded
after the defaults were fixed: they are replayed whole (half "all"). Counts at batch 1, cost model ``medium``,
draft budget 16; a JSON file with every figure is written per trace (in benchmarks/results/match-calibration/).
"""

from __future__ import annotations

import os
import sys

from specdraft.replay import load_trace, replay
from specdraft.results import write_results

# the results this script writes and reads (it lives in experiments/match-calibration/)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "results",
                   "match-calibration")
# (label, specdraft options): the shipped defaults and each change turned off or pushed further
RUNS = [
    ("defaults", {}),
    ("match_prior 0", {"match_prior": 0}),
    ("max_waste 8", {"max_waste": 8}),
    ("before (match_prior 0, max_waste 8)", {"match_prior": 0, "max_waste": 8}),
    ("max_waste 2", {"max_waste": 2}),
    ("max_waste 3", {"max_waste": 3}),
    ("min_gain 0.2", {"min_gain": 0.2}),
]


def halves(records: list[dict]) -> tuple[list[dict], list[dict]]:
    out: tuple[list[dict], list[dict]] = ([], [])
    seen: dict = {}
    for r in records:
        w, s = r["workload"], r.get("session")
        key = (w, s) if s else (w, len([k for k in seen if k[0] == w]))
        idx = seen.setdefault(key, len([k for k in seen if k[0] == w]))
        out[idx % 2].append(r)
    return out


def run(path: str, split: bool = True) -> dict:
    recs = load_trace(path)
    res: dict = {}
    for h, part in enumerate(halves(recs) if split else (recs,)):
        common = dict(cost_model="medium", batches=(1,))
        arctic = replay(part, ["arctic-suffix"], **common)["results"]
        tree = replay(part, ["specdraft-tree"], **common)["results"]
        for w in arctic:
            res.setdefault(w, {})[str(h)] = {"requests": sum(r["workload"] == w for r in part),
                                             "arctic-suffix": arctic[w]["arctic-suffix"],
                                             "specdraft-tree": tree[w]["specdraft-tree"]}
        for label, opts in RUNS:
            out = replay(part, ["specdraft-suffix"], specdraft_options=opts, **common)["results"]
            for w in out:
                res[w][str(h)][label] = out[w]["specdraft-suffix"]
    return res


def table(name: str, res: dict, split: bool = True) -> str:
    head = ["trace", "workload", "half", "requests", "arctic tokens/pass", "arctic d/a"]
    for label, _ in RUNS:
        head += [f"{label} x", f"{label} d/a x"]
    head += ["tree tokens/pass x", "tree nodes/acc"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in sorted(res):
        for h in sorted(res[w]):
            r = res[w][h]
            a = r["arctic-suffix"]
            half = ("tune" if h == "0" else "held-out") if split else "all"
            row = [name, w, half, str(r["requests"]),
                   f"{a['tokens_per_pass']:.2f}", f"{a['drafted_per_accepted']:.2f}"]
            for label, _ in RUNS:
                m = r[label]
                row += [f"{m['tokens_per_pass'] / a['tokens_per_pass']:.2f}",
                        f"{m['drafted_per_accepted'] / a['drafted_per_accepted']:.2f}"]
            t = r["specdraft-tree"]
            row += [f"{t['tokens_per_pass'] / a['tokens_per_pass']:.2f}", f"{t['drafted_per_accepted']:.2f}"]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parts = []
    split = True
    traces = []
    for arg in argv:
        if arg == "--held-out":
            split = False
            continue
        traces.append(arg)
        name = os.path.basename(arg).split(".jsonl")[0]
        res = run(arg, split)
        write_results(os.path.join(OUT, name + ".json"),
                      {"trace": arg, "split": split, "runs": dict(RUNS), "results": res},
                      tag="ablate", say=lambda m: print(m, file=sys.stderr))
        parts.append(table(name, res, split))
    argv = traces
    intro = ("Generated by `experiments/match-calibration/ablate.py` (see its docstring) from "
             + ", ".join(f"`{p}`" for p in argv) + ". \"x\": specdraft-suffix over arctic-suffix "
             "on the same requests (tokens per pass; drafted per accepted, below 1: less waste). "
             "Defaults: `match_prior` 2, `max_waste` 4, `min_gain` 0.1, `local_weight` 6; each "
             "other column changes what its label says. Batch 1, cost model `medium`, budget 16.")
    with open(os.path.join(OUT, "summary.md"), "w", encoding="utf-8") as f:
        f.write(intro + "\n\n" + "\n\n".join(parts) + "\n")
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
