"""vLLM 0.34 verifies drafts fixed width: what the replay predicts for specdraft against vLLM
0.34's own ``suffix`` rule, priced with the measured H200 passes of the Qwen2.5-0.5B shape.

Settings (k = 16, each workload replayed alone at batch 1, 4, 16 and 64 in flight):

- ``specdraft fixed``: specdraft's suffix drafts with ``adaptive: false`` (up to k from its
  index), every decoding row verified k wide, short drafts padded with the last token (vLLM 0.34
  without adaptive verification);
- ``specdraft trimmed``: specdraft's adaptive controller picks each row's length and adaptive
  verification trims the padding (confidence 0), so a row costs 1 + its draft (today's replay);
- ``vllm034-suffix fixed``: vLLM 0.34's suffix rule (``specdraft.replay.Vllm034SuffixMethod``),
  every row verified k wide, padded as vLLM pads it;
- ``no drafts``: the same schedule without speculation, what each speed-up is against.

Pricing: ``specdraft.replay.pricing.h200("qwen2.5-0.5b")`` (passes with drafts: the shape's fit
of ``benchmarks/data/h200_cost_curve_small_shapes.json``'s q >= 2 cells; passes without: its
q = 1 cells). The adaptive controller sizes drafts with the same fit. Clock-free: every number is
a count or a priced count.

    .venv/bin/python experiments/fixed-width/run.py     # writes benchmarks/results/fixed-width/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from specdraft.replay import SpecdraftMethod, Vllm034SuffixMethod, baseline_cost, load_trace
from specdraft.replay import replay_batched
from specdraft.replay.pricing import h200

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRACES = [("benchmarks/traces/qwen2.5-coder-0.5b-seed2.jsonl.gz", ("code_edit", "agentic")),
          ("benchmarks/traces/qwen2.5-coder-0.5b-topk-seed2.jsonl.gz", ("chat",))]
OUT = os.path.join(ROOT, "benchmarks", "results", "fixed-width")
K = 16
BATCHES = (1, 4, 16, 64)
SETTINGS = ("specdraft fixed", "specdraft trimmed", "vllm034-suffix fixed")


def make(setting: str, params: dict):
    """(method, fixed width) of a setting; specdraft as its vLLM adapters make it (chains)."""
    if setting == "vllm034-suffix fixed":
        return Vllm034SuffixMethod(), True
    adaptive = setting == "specdraft trimmed"
    opts = {"strategy": "suffix", "adaptive": adaptive, "cost_model": params}
    return SpecdraftMethod(setting, opts, chain_only=True), not adaptive


def run(batches=BATCHES, workloads=None) -> dict:
    cost = h200("qwen2.5-0.5b")
    records = []
    for path, keep in TRACES:
        records += [r for r in load_trace(os.path.join(ROOT, path)) if r["workload"] in keep]
    names = [w for _, keep in TRACES for w in keep if workloads is None or w in workloads]
    results: dict = {}
    for w in names:
        recs = [r for r in records if r["workload"] == w]
        for b in batches:
            base = baseline_cost(recs, b, cost)
            cell = results.setdefault(w, {}).setdefault(str(b), {"no_drafts_ms": base})
            for s in SETTINGS:
                t0 = time.perf_counter()
                method, fixed = make(s, cost.params)
                r = replay_batched(method, recs, K, b, cost, base, fixed_width=fixed)
                r["cost_ms"] = base / r["est_speedup"]
                r["mean_acceptance_length"] = (1 + r["accepted_tokens"] / r["drafts"]
                                               if r["drafts"] else None)
                r["tokens_per_pass"] = r["output_tokens"] / r["target_passes"]
                r["drafted_per_step"] = r["drafted_tokens"] / max(r["decode_passes"], 1)
                cell[s] = r
                print(f"[fixed-width] {w:9s} b{b:<3d} {s:21s} x{r['est_speedup']:.3f}  "
                      f"MAL {r['mean_acceptance_length'] or 0:.2f}  drafted {r['drafted_tokens']}"
                      f"  accepted {r['accepted_tokens']} ({time.perf_counter() - t0:.1f}s)",
                      flush=True)
    # all workloads together: their no-draft cost over their cost
    results["all"] = {}
    for b in batches:
        cell = results["all"][str(b)] = {"no_drafts_ms": sum(results[w][str(b)]["no_drafts_ms"]
                                                             for w in names)}
        for s in SETTINGS:
            agg = {k: sum(results[w][str(b)][s][k] for w in names)
                   for k in ("cost_ms", "drafted_tokens", "accepted_tokens", "filler_accepted",
                             "draft_slots", "drafts", "decode_passes", "target_passes",
                             "output_tokens", "steps")}
            agg["est_speedup"] = cell["no_drafts_ms"] / agg["cost_ms"]
            agg["mean_acceptance_length"] = 1 + agg["accepted_tokens"] / agg["drafts"]
            agg["tokens_per_pass"] = agg["output_tokens"] / agg["target_passes"]
            agg["drafted_per_step"] = agg["drafted_tokens"] / agg["decode_passes"]
            cell[s] = agg
    return {"settings": {
        "max_draft": K, "batches": list(batches), "settings": list(SETTINGS),
        "traces": [{"path": p, "workloads": list(k)} for p, k in TRACES],
        "requests": {w: sum(r["workload"] == w for r in records) for w in names},
        "pricing": {"table": "benchmarks/data/h200_cost_curve_small_shapes.json",
                    "model": cost.model, "verify_fit": cost.params,
                    "decode_fit": [float(x) for x in cost.decode],
                    "decode_fit_max_error": cost.decode_error},
        "controller_cost_model": cost.params}, "results": results}


def markdown(out: dict) -> str:
    bs = out["settings"]["batches"]
    res = out["results"]
    head = " | ".join(f"b{b}" for b in bs)
    lines = ["Speed-up over no drafts (H200, Qwen2.5-0.5B shape, k=16):", "",
             f"| workload | setting | {head} |", "|---|---|" + "---|" * len(bs)]
    for w in res:
        for s in SETTINGS:
            vals = " | ".join(f"{res[w][str(b)][s]['est_speedup']:.2f}x" for b in bs)
            lines.append(f"| {w} | {s} | {vals} |")
    lines += ["", "specdraft / vllm034-suffix fixed (cost of the suffix rule's run over "
              "specdraft's; > 1: specdraft faster):", "",
              f"| workload | specdraft | {head} |", "|---|---|" + "---|" * len(bs)]
    for w in res:
        for s in SETTINGS[:2]:
            vals = " | ".join(f"{res[w][str(b)][s]['est_speedup'] / res[w][str(b)][SETTINGS[2]]['est_speedup']:.2f}"
                              for b in bs)
            lines.append(f"| {w} | {s.split()[1]} | {vals} |")
    for b in (bs[0], bs[-1]):
        lines += ["", f"Counts at batch {b} (drafted: the method's own tokens; accepted includes "
                  "filler slots accepted, in brackets; MAL = 1 + accepted / rows verified with a "
                  "draft; rows/pass: decoding requests per pass, fewer than the batch where "
                  "sessions wait for their previous turn or the queue drains):", "",
                  "| workload | setting | MAL | tokens/pass | drafted | accepted (filler) | "
                  "drafted/step | rows/pass |", "|---|---|---|---|---|---|---|---|"]
        for w in res:
            for s in SETTINGS:
                r = res[w][str(b)][s]
                lines.append(f"| {w} | {s} | {r['mean_acceptance_length']:.2f} | "
                             f"{r['tokens_per_pass']:.2f} | {r['drafted_tokens']:,} | "
                             f"{r['accepted_tokens']:,} ({r['filler_accepted']:,}) | "
                             f"{r['drafted_per_step']:.1f} | {r['decode_passes'] / r['steps']:.1f} |")
    return "\n".join(lines)


def plot(out: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res, bs = out["results"], out["settings"]["batches"]
    ws = list(res)
    fig, axes = plt.subplots(1, len(ws), figsize=(3.6 * len(ws), 3.6), sharey=True)
    width = 0.8 / len(SETTINGS)
    for ax, w in zip(axes, ws):
        for j, s in enumerate(SETTINGS):
            ax.bar([i + j * width for i in range(len(bs))],
                   [res[w][str(b)][s]["est_speedup"] for b in bs], width, label=s)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(bs))])
        ax.set_xticklabels([f"batch {b}" for b in bs], fontsize=8)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(w, fontsize=10)
    axes[0].set_ylabel("speed-up over no drafts (H200 passes)")
    axes[0].legend(fontsize=7)
    fig.suptitle("k=16, Qwen2.5-0.5B shape: specdraft vs vLLM 0.34's suffix rule", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT, help="folder for replay.json, replay.md, replay.png")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--workloads", nargs="+", help="only these (a quick check)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    out = run(tuple(args.batches), args.workloads)
    with open(os.path.join(args.out, "replay.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    md = markdown(out)
    with open(os.path.join(args.out, "replay.md"), "w", encoding="utf-8") as f:
        f.write(md + "\n")
    plot(out, os.path.join(args.out, "replay.png"))
    print(md)
    print(f"[fixed-width] wrote {args.out}/replay.json, replay.md, replay.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
