"""Live requests in the global cache (``live_outputs``): on and off, at several batch sizes.

    python experiments/live-outputs/ab.py TRACE [TRACE ...]

writes summary.md (the tables) and ab.json to benchmarks/results/live-outputs/.

With ``live_outputs`` (the default) a request's tokens enter the global index as they arrive, so
requests in flight together draft from each other's output so far; off, the global index holds
finished requests only. Alone (batch 1) a request only meets its own output there again; with
others in flight it may meet theirs. For every trace and workload, specdraft's chain
(``specdraft-suffix``) is replayed with the option on and off at batch 1, 16 and 64 (requests in
arrival order, a session's next turn after its previous one; counts of that batch size), beside
arctic's suffix decoding (vLLM's ``suffix`` defaults: its global tree also takes active requests'
outputs as they grow). Cost model ``medium``, budget 16.

A second table replays what ``specdraft bench`` sends: the first 8 requests of a workload of the
0.5B trace all at once (a session's later turns do not wait: their prompts come from the trace),
128 output tokens each, draft budget 8, batch 8.
"""

from __future__ import annotations

import os
import sys

from specdraft.replay import load_trace, replay
from specdraft.results import write_results

# the results this script writes and reads (it lives in experiments/live-outputs/)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "results",
                   "live-outputs")
BATCHES = (1, 16, 64)
OFF = {"live_outputs": False}


def run_trace(path: str) -> dict:
    recs = load_trace(path)
    res: dict = {}
    for b in BATCHES:
        common = dict(cost_model="medium", batches=(b,))
        arctic = replay(recs, ["arctic-suffix"], **common)["results"]
        on = replay(recs, ["specdraft-suffix"], **common)["results"]
        off = replay(recs, ["specdraft-suffix"], specdraft_options=OFF, **common)["results"]
        for w in arctic:
            res.setdefault(w, {})[str(b)] = {"arctic-suffix": arctic[w]["arctic-suffix"],
                                             "live_outputs on": on[w]["specdraft-suffix"],
                                             "live_outputs off": off[w]["specdraft-suffix"]}
        print(f"[live-outputs] {os.path.basename(path)} batch {b} done", file=sys.stderr, flush=True)
    return res


def run_bench_shape(path: str, workloads=("agentic", "code_edit", "chat")) -> dict:
    recs = load_trace(path)
    res: dict = {}
    for w in workloads:
        part = [dict(r, max_tokens=128, session=None) for r in recs if r["workload"] == w][:8]
        common = dict(cost_model="medium", batches=(8,), budget=8)
        arctic = replay(part, ["arctic-suffix"], **common)["results"][w]["arctic-suffix"]
        on = replay(part, ["specdraft-suffix"], **common)["results"][w]["specdraft-suffix"]
        off = replay(part, ["specdraft-suffix"], specdraft_options=OFF, **common)["results"][w]["specdraft-suffix"]
        res[w] = {"arctic-suffix": arctic, "live_outputs on": on, "live_outputs off": off}
    return res


def fmt(m: dict) -> str:
    return f"{m['tokens_per_pass']:.2f} / {m['drafted_per_accepted']:.2f}"


def main(argv: list[str]) -> int:
    out = {"traces": {}, "bench_shape": None}
    lines = ["| trace | workload | batch | off: tokens/pass / d/a | on: tokens/pass / d/a | on / off | "
             "arctic: tokens/pass / d/a | on / arctic |", "|---|---|---|---|---|---|---|---|"]
    for path in argv:
        name = os.path.basename(path).split(".jsonl")[0]
        res = out["traces"][name] = run_trace(path)
        for w in sorted(res):
            for b in BATCHES:
                r = res[w][str(b)]
                on, off, a = r["live_outputs on"], r["live_outputs off"], r["arctic-suffix"]
                lines.append(f"| {name} | {w} | {b} | {fmt(off)} | {fmt(on)} | "
                             f"{on['tokens_per_pass'] / off['tokens_per_pass']:.3f} | {fmt(a)} | "
                             f"{on['tokens_per_pass'] / a['tokens_per_pass']:.2f} |")
    small = next((p for p in argv if "0.5b" in os.path.basename(p)), None)
    bench_lines = []
    if small:
        res = out["bench_shape"] = run_bench_shape(small)
        bench_lines = ["| workload | accepted: off / on / arctic | target passes: off / on / arctic | "
                       "drafted/acc: off / on / arctic |", "|---|---|---|---|"]
        for w, r in res.items():
            ms = [r["live_outputs off"], r["live_outputs on"], r["arctic-suffix"]]
            bench_lines.append(
                f"| {w} | {' / '.join(str(m['accepted_tokens']) for m in ms)} | "
                f"{' / '.join(str(m['target_passes']) for m in ms)} | "
                f"{' / '.join(format(m['drafted_per_accepted'], '.2f') for m in ms)} |")
    write_results(os.path.join(OUT, "ab.json"), out, tag="live-outputs",
                  say=lambda m: print(m, file=sys.stderr))
    intro = ("Generated by `experiments/live-outputs/ab.py` (see its docstring) from " + ", ".join(f"`{p}`" for p in argv)
             + ". Counts at each batch size (requests in arrival order); d/a: drafted tokens per "
             "accepted token. Cost model `medium`, budget 16.")
    text = intro + "\n\n" + "\n".join(lines) + "\n"
    if bench_lines:
        text += ("\nWhat `specdraft bench` sends (first 8 requests of a workload of `" + small
                 + "` at once, 128 tokens, budget 8, batch 8):\n\n" + "\n".join(bench_lines) + "\n")
    with open(os.path.join(OUT, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
