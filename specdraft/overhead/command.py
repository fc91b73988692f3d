"""The ``specdraft overhead`` command line: options, the run over every batch size, the table and
the JSON report (settings, results, the host)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from specdraft.cli import parser as cli_parser
from specdraft.live import cpu_pressure
from specdraft.overhead.driver import generate, run_batch
from specdraft.overhead.methods import METHODS
from specdraft.overhead.table import format_overhead_table
from specdraft.results import write_results

DEFAULTS = dict(prompt_tokens=4096, output_tokens=1024, global_cache_tokens=1_000_000, budget=16,
                batches="1,16,64,256", block_steps=8, vocab=32000, max_depth=24, seed=0, ngram_min=2, ngram_max=5,
                prefill_prompt_tokens=64)


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser("specdraft overhead",
                   "Proposer cost per request-step, each method driven through the object vLLM "
                   "calls: specdraft vs vLLM suffix (arctic-inference) vs vLLM n-gram, interleaved.")
    p.add_argument("--json", metavar="FILE", help="write the results here (JSON)")
    p.add_argument("--table", metavar="FILE",
                   help="print the markdown table of a results file written by --json, and exit")
    p.add_argument("--prompt-tokens", type=int, default=DEFAULTS["prompt_tokens"], help="prompt length of the timed requests")
    p.add_argument("--output-tokens", type=int, default=DEFAULTS["output_tokens"], help="tokens each timed request generates")
    p.add_argument("--global-cache-tokens", type=int, default=DEFAULTS["global_cache_tokens"],
                   help="global cache budget, pre-filled before timing")
    p.add_argument("--budget", type=int, default=DEFAULTS["budget"], help="draft budget (tokens)")
    p.add_argument("--batches", default=DEFAULTS["batches"],
                   help="comma-separated batch sizes (concurrent requests), one run each")
    p.add_argument("--block-steps", type=int, default=DEFAULTS["block_steps"],
                   help="steps per timed block; methods alternate block by block")
    p.add_argument("--vocab", type=int, default=DEFAULTS["vocab"], help="vocabulary size of the synthetic streams")
    p.add_argument("--max-depth", type=int, default=DEFAULTS["max_depth"],
                   help="suffix depth (specdraft max_depth, arctic max_tree_depth)")
    p.add_argument("--ngram-min", type=int, default=DEFAULTS["ngram_min"], help="prompt_lookup_min")
    p.add_argument("--ngram-max", type=int, default=DEFAULTS["ngram_max"], help="prompt_lookup_max")
    p.add_argument("--prefill-prompt-tokens", type=int, default=DEFAULTS["prefill_prompt_tokens"],
                   help="prompt length of the pre-fill requests (their outputs fill the cache)")
    p.add_argument("--methods", default=",".join(METHODS),
                   help="comma-separated subset of " + ",".join(METHODS))  # checked in main
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the synthetic streams")
    p.add_argument("--specdraft-adaptive", action="store_true",
                   help="specdraft sizes drafts with its adaptive controller (GPU cost model, 8B shape). Off "
                        "by default: it then drafts what the index proposes up to the budget, as "
                        "the peers do, so the methods do comparable work; on, it drafts little or "
                        "nothing at large batches, where verification is compute-bound")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(format_overhead_table(json.load(f)))
        return 0
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        print(f"specdraft overhead: unknown method(s) {bad}; use {', '.join(METHODS)}",
              file=sys.stderr)
        return 2
    try:
        batches = [int(b) for b in str(args.batches).split(",") if b.strip()]
    except ValueError:
        print(f"specdraft overhead: --batches must be comma-separated integers, got "
              f"{args.batches!r}", file=sys.stderr)
        return 2
    from specdraft.adapters import installed_vllm_version, vllm_adapter

    adapter = vllm_adapter()  # every method is driven through vLLM's objects
    t_all = time.perf_counter()
    skipped: dict[str, str] = {}
    by_batch = {}
    pressure = cpu_pressure()
    streams = generate(args, max(batches))
    for batch in batches:
        by_batch[str(batch)] = run_batch(args, batch, methods, adapter, skipped, streams)
    report = {
        "benchmark": "specdraft overhead",
        "unit": "microseconds per request-step: one propose call over the batch (the step's "
                "request events, sync, drafts), divided by the requests in it",
        "statistic": "us_per_request_step: median over blocks; _min: fastest block; ratios: "
                     "ratio of the methods' fastest blocks, and median of interleaved block ratios",
        "settings": {
            "batches": batches, "prompt_tokens": args.prompt_tokens,
            "output_tokens": args.output_tokens, "global_cache_tokens": args.global_cache_tokens,
            "draft_budget": args.budget, "block_steps": args.block_steps, "vocab": args.vocab,
            "max_depth": args.max_depth, "seed": args.seed, "ngram_min": args.ngram_min,
            "ngram_max": args.ngram_max, "prefill_prompt_tokens": args.prefill_prompt_tokens,
            "vllm": installed_vllm_version(),
            "specdraft": "SuffixProposer.propose (chain drafts; adaptive length controller "
                         + ("on, gpu (8B) cost model)" if args.specdraft_adaptive else "off)"),
            "arctic": {k: v for k, v in adapter.SUFFIX_DEFAULTS.items()
                       if k != "suffix_decoding_max_cached_requests"},
            "generator": "StreamGen: Zipf(1.1) unigram + 8-successor Markov chain + copied spans "
                         "(30% from 300 shared docs, 25% from own prompt/output; geometric spans, mean 24)",
        },
        "batches": by_batch,
        "skipped": skipped,
        "total_s": round(time.perf_counter() - t_all, 2),
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "cpus": os.cpu_count(), "platform": platform.platform(),
                 "cpu_pressure_before": pressure, "cpu_pressure_after": cpu_pressure()},
    }
    print(format_overhead_table(report))
    for name, why in skipped.items():
        print(f"{name:<10} skipped: {why}")
    if args.json:
        write_results(args.json, report, tag="overhead")
    return 0
