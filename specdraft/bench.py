"""``specdraft bench``: live side-by-side runs in vLLM on CPU.

The prompts of a trace go through one engine per method (no speculation, vLLM ``ngram``, vLLM
``suffix``, specdraft), interleaved A B C D A B C D ... with the order rotated each round, so a
noisy neighbour hits every method alike. Reported per method: tokens per second, the ratio of
the fastest rounds and the median of per-round ratios against no speculation, vLLM's own
counters (drafts, drafted and accepted tokens; mean acceptance length = 1 + accepted / drafts),
and whether every output is token-identical to no speculation. ``/proc/pressure/cpu`` is logged
with each run so a noisy run is visible.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from specdraft import live


def start_engines(model: str, methods: list[str], k: int, progress, **llm_kwargs) -> dict:
    configs = live.method_configs(k)
    engines = {}
    for m in methods:
        t0 = time.perf_counter()
        progress(f"[bench] starting vLLM engine for {m} ...")
        engines[m] = live.make_llm(model, configs[m], **llm_kwargs)
        progress(f"[bench] {m}: ready in {time.perf_counter() - t0:.0f}s")
    return engines


def run_interleaved(engines: dict, prompts: list[list[int]], max_tokens, rounds: int, progress,
                    sequential: bool = False, ignore_eos: bool = False) -> dict:
    """{method: [RunResult per round]}; ``sequential`` sends one request at a time (batch 1)
    and keeps per-request counters in ``RunResult.counters['per_request']``."""
    methods = list(engines)
    runs: dict[str, list] = {m: [] for m in methods}
    maxes = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    for r in range(rounds):
        order = methods[r % len(methods):] + methods[: r % len(methods)]
        for m in order:
            llm = engines[m]
            if sequential:
                outs, secs, per_req = [], 0.0, []
                for p, n in zip(prompts, maxes):
                    one = live.generate(llm, [p], n, ignore_eos=ignore_eos)
                    outs.extend(one.outputs)
                    secs += one.seconds
                    per_req.append(one.counters)
                totals = {k: sum(c[k] for c in per_req) for k in live.SPEC_COUNTERS.values()}
                res = live.RunResult(outs, secs, dict(totals, per_request=per_req))
            else:
                res = live.generate(llm, prompts, maxes, ignore_eos=ignore_eos)
            res.counters["cpu_pressure"] = live.cpu_pressure()
            runs[m].append(res)
            progress(f"[bench] round {r + 1}/{rounds} {m:<12} {res.tokens / res.seconds:7.1f} tok/s"
                     f"  (cpu pressure: {res.counters['cpu_pressure'] or 'n/a'})")
    return runs


def summarize(runs: dict, reference: list[list[int]] | None = None) -> dict:
    base = runs["none"]
    ref = reference if reference is not None else base[0].outputs
    table = {}
    for m, rs in runs.items():
        c = {k: sum(x.counters.get(k, 0) for x in rs) for k in live.SPEC_COUNTERS.values()}
        tps = [x.tokens / x.seconds for x in rs]
        table[m] = {
            "tokens_per_s_median": statistics.median(tps),
            "tokens_per_s": tps,
            "speedup_ratio_of_min": min(x.seconds for x in base) / min(x.seconds for x in rs),
            "speedup_median_per_round": statistics.median(b.seconds / x.seconds for b, x in zip(base, rs)),
            "mean_acceptance_length": (1 + c["accepted_tokens"] / c["drafts"]) if c["drafts"] else 1.0,
            "drafts": c["drafts"], "drafted_tokens": c["drafted_tokens"],
            "accepted_tokens": c["accepted_tokens"],
            "identical_to_no_spec": all(all(o == e for o, e in zip(x.outputs, ref)) for x in rs),
            "cpu_pressure": [x.counters.get("cpu_pressure") for x in rs],
        }
    return table


def format_table(table: dict) -> str:
    hdr = (f"{'method':<12} {'tok/s':>7} {'x min':>6} {'x med':>6} {'MAL':>5} {'drafted':>8} "
           f"{'accepted':>9} {'identical':>9}")
    lines = [hdr, "-" * len(hdr)]
    for m, t in table.items():
        lines.append(f"{m:<12} {t['tokens_per_s_median']:>7.1f} {t['speedup_ratio_of_min']:>6.2f} "
                     f"{t['speedup_median_per_round']:>6.2f} {t['mean_acceptance_length']:>5.2f} "
                     f"{t['drafted_tokens']:>8} {t['accepted_tokens']:>9} "
                     f"{'yes' if t['identical_to_no_spec'] else 'NO':>9}")
    lines.append("x min: ratio of the fastest rounds to no speculation's; x med: median of per-round "
                 "ratios; MAL: mean acceptance length (1 + accepted / drafts)")
    return "\n".join(lines)


def plot(table: dict, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    methods = list(table)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, m in enumerate(methods):
        axes[0].scatter([i] * len(table[m]["tokens_per_s"]), table[m]["tokens_per_s"], color="grey", s=12)
    axes[0].bar(range(len(methods)), [table[m]["tokens_per_s_median"] for m in methods])
    axes[0].set_title("tokens per second (bar: median; dots: rounds)")
    axes[1].bar(range(len(methods)), [table[m]["mean_acceptance_length"] for m in methods])
    axes[1].set_title("mean acceptance length")
    for ax in axes:
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=20)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_results(path: str, payload: dict, table: dict, title: str, progress) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1)
    progress(f"[bench] results: {path}")
    png = os.path.splitext(path)[0] + ".png"
    try:
        plot(table, png, title)
        progress(f"[bench] chart: {png}")
    except ImportError:
        progress("[bench] matplotlib not installed: no chart")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specdraft bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, help="trace JSONL from specdraft record (its prompts "
                    "and max_tokens are used; outputs are checked against it)")
    ap.add_argument("--model", help="model name or folder (default: the trace's model)")
    ap.add_argument("--methods", nargs="+", default=["none", "vllm-ngram", "vllm-suffix", "specdraft"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=8)
    ap.add_argument("--limit", type=int, help="use only the first N requests")
    ap.add_argument("--sequential", action="store_true", help="one request at a time (batch 1)")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    from specdraft.models import MODELS, model_path
    from specdraft.replay import load_trace
    if "none" not in args.methods:
        ap.error("--methods must include 'none' (the reference)")
    try:
        records = load_trace(args.traces)[: args.limit]
    except (OSError, ValueError) as e:
        print(f"specdraft bench: {e}", file=sys.stderr)
        return 2
    fits = [r for r in records if len(r["prompt_token_ids"]) + len(r["output_token_ids"]) <= args.max_model_len]
    if len(fits) < len(records):
        progress(f"[bench] skipping {len(records) - len(fits)} requests longer than --max-model-len")
    records = fits
    name = args.model or records[0].get("model") or "smollm2-135m"
    path = str(model_path(name)) if name in MODELS else name
    prompts = [r["prompt_token_ids"] for r in records]
    maxes = [min(int(r.get("max_tokens") or len(r["output_token_ids"])), len(r["output_token_ids"]))
             for r in records]
    progress(f"[bench] {len(records)} requests from {args.traces}, model {name}, methods "
             f"{' '.join(args.methods)}, {args.rounds} rounds")
    engines = start_engines(path, args.methods, args.num_speculative_tokens, progress,
                            max_model_len=args.max_model_len, max_num_seqs=8)
    runs = run_interleaved(engines, prompts, maxes, args.rounds, progress, sequential=args.sequential)
    recorded = [r["output_token_ids"][:n] for r, n in zip(records, maxes)]
    table = summarize(runs)
    matches_trace = all(o == e for o, e in zip(runs["none"][0].outputs, recorded))
    title = (f"{name}: {len(records)} requests, k={args.num_speculative_tokens}, "
             f"{args.rounds} interleaved rounds, float32 CPU")
    print()
    print(title)
    print(format_table(table))
    print(f"no-speculation outputs identical to the trace: {'yes' if matches_trace else 'NO'}")
    write_results(args.json, {"settings": vars(args), "table": table,
                              "no_spec_matches_trace": matches_trace}, table, title, progress)
    return 0 if all(t["identical_to_no_spec"] for t in table.values()) else 1
