"""Ablation summary of the chain-draft defaults from the replay results in
benchmarks/results/chain-drafts/ (written by run.sh beside this file).

    python experiments/chain-drafts/summary.py > benchmarks/results/chain-drafts/summary.md

Per trace and workload: output tokens per target pass and drafted tokens per accepted token of
arctic's suffix decoding (vLLM defaults) and of specdraft's chain (``specdraft-suffix``) with the
defaults and with each change turned off; "x" is tokens per pass over arctic's. (The committed
JSON files were written before replay reported batches; their ``mean_acceptance_length`` is what
replay now calls ``tokens_per_pass``, which is read when present.)
"""

import json
import os
import sys

# the results this script writes and reads (it lives in experiments/chain-drafts/)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "results",
                   "chain-drafts")
RUNS = [("", "defaults"), ("-max_waste64", "max_waste off"), ("-local_weight1", "local_weight 1"),
        ("-before", "both off")]


def tpp(m: dict) -> float:
    """Output tokens per target pass (older result files named it mean_acceptance_length)."""
    return m["tokens_per_pass"] if "tokens_per_pass" in m else m["mean_acceptance_length"]


def main() -> int:
    names = sorted(f[:-5] for f in os.listdir(OUT)
                   if f.endswith(".json") and not any(f[:-5].endswith(s) for s, _ in RUNS[1:]))
    out = ["| trace | workload | arctic tokens/pass | arctic d/a | "
           + " | ".join(f"{label} x | {label} d/a" for _, label in RUNS)
           + " | tree x | tree nodes/acc |",
           "|" + "---|" * (4 + 2 * len(RUNS) + 2)]
    for name in names:
        runs = {}
        for suffix, _ in RUNS:
            path = os.path.join(OUT, name + suffix + ".json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    runs[suffix] = json.load(f)["results"]
        base = runs[""]
        for w, methods in base.items():
            arc = methods["arctic-suffix"]
            row = [name, w, f"{tpp(arc):.2f}", f"{arc['drafted_per_accepted']:.2f}"]
            for suffix, _ in RUNS:
                a = runs.get(suffix, {}).get(w, {}).get("specdraft-suffix")
                row += ([f"{tpp(a) / tpp(arc):.2f}",
                         f"{a['drafted_per_accepted']:.2f}"] if a else ["-", "-"])
            t = methods.get("specdraft-tree")
            row += ([f"{tpp(t) / tpp(arc):.2f}",
                     f"{t['drafted_per_accepted']:.2f}"] if t else ["-", "-"])
            out.append("| " + " | ".join(row) + " |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
