"""One ``specdraft overhead`` run: the streams (``generate``), then for each batch size the
methods built and timed block by block, interleaved (``run_batch``)."""

from __future__ import annotations

import gc
import statistics
import sys
import time

import numpy as np

from specdraft.overhead.methods import TimedArctic, TimedMethod, TimedNgram, TimedSpecdraft
from specdraft.overhead.streams import StreamGen


def log(msg: str) -> None:
    print(f"[overhead] {msg}", file=sys.stderr, flush=True)


def _ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def generate(args, max_batch: int):
    """The streams: pre-fill requests, then max_batch prompts and outputs (a batch of b requests
    takes the first b)."""
    t0 = time.perf_counter()
    gen = StreamGen(args.seed, vocab=args.vocab)
    prefill = []
    total = 0
    while total < args.global_cache_tokens and args.output_tokens > 0:
        p = gen.sequence(args.prefill_prompt_tokens)
        o = np.asarray(gen.sequence(args.output_tokens, own=p), dtype=np.int32)
        prefill.append((np.asarray(p, dtype=np.int32), o))
        total += len(o)
    prompts = [gen.sequence(args.prompt_tokens) for _ in range(max_batch)]
    truths = [gen.sequence(args.output_tokens, own=p) for p in prompts]
    gen_s = time.perf_counter() - t0
    log(f"generated {len(prefill)} pre-fill requests ({total:,} tokens), {max_batch} prompts x "
        f"{args.prompt_tokens} + outputs x {args.output_tokens} in {gen_s:.1f}s")
    return prefill, prompts, truths, gen_s


def run_batch(args, batch: int, methods: list[str], adapter, skipped: dict, streams) -> dict:
    prefill, all_prompts, all_truths, gen_s = streams
    prompts, truths = all_prompts[:batch], all_truths[:batch]
    runners: list[tuple[str, TimedMethod]] = []
    for name in methods:
        try:
            if name == "specdraft":
                m = TimedSpecdraft(prompts, truths, args.budget, args, prefill, adapter)
            elif name == "arctic":
                m = TimedArctic(prompts, truths, args.budget, args, prefill, adapter)
            else:
                m = TimedNgram(prompts, truths, args.budget, args, adapter)
        except Exception as e:  # noqa: BLE001 - reported, and the others still run
            skipped[name] = f"{type(e).__name__}: {e}"
            log(f"{name}: SKIPPED ({skipped[name]})")
            continue
        log(f"batch {batch}: {name} ready (pre-fill {m.prefill_s:.1f}s)")
        runners.append((name, m))
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    try:
        while any(not m.done() for _, m in runners):
            for _, m in runners:
                if not m.done():
                    m.run_block(args.block_steps)
    finally:
        gc.enable()
    timing_s = time.perf_counter() - t0
    results = {name: m.summary() for name, m in runners}
    for name, m in runners:
        results[name]["us_per_request_step_min"] = round(min(m.block_us), 3) if m.block_us else None
    blocks = {name: m.block_us for name, m in runners}
    ratios = {}
    sd = blocks.get("specdraft")
    for peer in ("arctic", "ngram"):
        pb = blocks.get(peer)
        if sd and pb:
            pairs = [a / b for a, b in zip(sd, pb) if b > 0]
            ratios[f"specdraft_over_{peer}"] = {
                "ratio_of_minimums": _ratio(min(sd), min(pb)),
                "median_of_block_ratios": round(statistics.median(pairs), 3) if pairs else None,
                "ratio_of_medians": _ratio(statistics.median(sd), statistics.median(pb)),
            }
    log(f"batch {batch}: timed in {timing_s:.1f}s")
    return {"results": results, "ratios": ratios,
            "timing": {"generate_s": round(gen_s, 2), "interleaved_s": round(timing_s, 2)}}
