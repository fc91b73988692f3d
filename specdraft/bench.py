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
import contextlib
import os
import statistics
import sys
import time

from specdraft import live
from specdraft.results import write_results


class LoadedEngines:
    """Every method's engine loaded at once (when the memory plan allows)."""

    mode = "together"

    def __init__(self, model: str, methods: list[str], k: int, progress, **llm_kwargs):
        configs = live.method_configs(k)
        self.engines = {}
        for m in methods:
            t0 = time.perf_counter()
            progress(f"[bench] starting the vLLM engine for {m} ...")
            self.engines[m] = live.make_llm(model, configs[m], **llm_kwargs)
            progress(f"[bench] {m}: ready in {time.perf_counter() - t0:.0f}s")

    @classmethod
    def of(cls, engines: dict) -> "LoadedEngines":
        """Engines started elsewhere ({method: vllm.LLM})."""
        self = cls.__new__(cls)
        self.engines = dict(engines)
        return self

    @contextlib.contextmanager
    def engine(self, method: str):
        yield self.engines[method]

    def close(self) -> None:
        for m in list(self.engines):
            live.shutdown(self.engines.pop(m))


class EnginesOneAtATime:
    """One engine at a time: started for each run and shut down after it (start-up not timed).
    A fresh engine has no cross-request state, so nothing needs clearing."""

    mode = "one-at-a-time"

    def __init__(self, model: str, methods: list[str], k: int, progress, **llm_kwargs):
        self.model, self.configs, self.progress, self.llm_kwargs = (
            model, live.method_configs(k), progress, llm_kwargs)

    @contextlib.contextmanager
    def engine(self, method: str):
        # memory may have gone to other processes since the plan: check again before each start
        live.plan_engines(self.model, 1)
        t0 = time.perf_counter()
        self.progress(f"[bench] starting the vLLM engine for {method} ...")
        llm = live.make_llm(self.model, self.configs[method], **self.llm_kwargs)
        self.progress(f"[bench] {method}: ready in {time.perf_counter() - t0:.0f}s")
        try:
            yield llm
        finally:
            live.shutdown(llm)
            del llm

    def close(self) -> None:
        pass


def start_engines(model: str, methods: list[str], k: int, progress, plan: live.EnginePlan | None = None,
                  **llm_kwargs):
    """The engines for ``methods``, loaded together or one at a time as ``plan`` says."""
    cls = EnginesOneAtATime if plan is not None and plan.mode == "one-at-a-time" else LoadedEngines
    return cls(model, methods, k, progress, **llm_kwargs)


def run_interleaved(engines, prompts: list[list[int]], max_tokens, rounds: int, progress,
                    sequential: bool = False, ignore_eos: bool = False,
                    methods: list[str] | None = None) -> dict:
    """{method: [RunResult per round]}, methods interleaved with the order rotated each round.

    Every run starts from an engine with no cross-request state (prefix cache, global caches):
    a round that sends the same prompts again must not find its own answers from the round
    before. What a method learns within a run (earlier requests, earlier turns) stays.
    ``sequential`` sends one request at a time (batch 1) and keeps per-request counters in
    ``RunResult.counters['per_request']``.
    """
    methods = list(methods or engines.engines)
    runs: dict[str, list] = {m: [] for m in methods}
    maxes = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    warm = [prompts[0][: max(1, min(len(prompts[0]), 32))]]
    for r in range(rounds):
        order = methods[r % len(methods):] + methods[: r % len(methods)]
        for m in order:
            with engines.engine(m) as llm:
                # one short untimed request (first-call costs), then a clean slate again
                live.generate(llm, warm, 4)
                reset = live.reset_cross_request_state(llm)
                before = live.proposer_time(llm)
                if sequential:
                    outs, secs, per_req = [], 0.0, []
                    for p, n in zip(prompts, maxes):
                        one = live.generate(llm, [p], n, ignore_eos=ignore_eos)
                        outs.extend(one.outputs)
                        secs += one.seconds
                        per_req.append(one.counters)
                    totals = {k: sum(c[k] for c in per_req) for k in live.COUNTER_KEYS}
                    res = live.RunResult(outs, secs, dict(totals, per_request=per_req))
                else:
                    res = live.generate(llm, prompts, maxes, ignore_eos=ignore_eos)
                after = live.proposer_time(llm) if before is not None else None
            if after is not None:  # specdraft's own figures: time in propose, propose calls
                res.counters["proposer_seconds"] = after[0] - before[0]
                res.counters["proposer_steps"] = after[1] - before[1]
            res.counters["cpu_pressure"] = live.cpu_pressure()
            res.counters["reset"] = reset
            runs[m].append(res)
            progress(f"[bench] round {r + 1}/{rounds} {m:<12} {res.tokens / res.seconds:7.1f} tok/s"
                     f"  accepted {res.counters.get('accepted_tokens', 0):>6}"
                     f"  (cpu pressure: {res.counters['cpu_pressure'] or 'n/a'})")
    return runs


# Rounds disagree when a method's accepted tokens (clock-free: the rounds send the same requests
# to a clean engine, so they should match up to batching effects) differ by more than this share,
# or its per-round speedups against no speculation by more than SPEED_MARGIN (a noisy machine).
COUNT_MARGIN = 0.05
SPEED_MARGIN = 0.25


def mean_acceptance_length(counters: dict) -> float | None:
    """vLLM's definition: 1 + accepted / drafts (None without any draft)."""
    return 1 + counters["accepted_tokens"] / counters["drafts"] if counters.get("drafts") else None


def summarize(runs: dict, reference: list[list[int]] | None = None) -> dict:
    """Per method: summary over rounds, the cold (first) round and every round; ``disagreement``
    lists the methods whose rounds disagree by more than the margins above."""
    base = runs["none"]
    ref = reference if reference is not None else base[0].outputs
    table = {}
    for m, rs in runs.items():
        c = {k: sum(x.counters.get(k, 0) for x in rs) for k in live.COUNTER_KEYS}
        tps = [x.tokens / x.seconds for x in rs]
        per_round = []
        for b, x in zip(base, rs):
            rc = {k: x.counters.get(k, 0) for k in live.COUNTER_KEYS}
            per_round.append({"tokens_per_s": x.tokens / x.seconds, "seconds": x.seconds,
                              "speedup": b.seconds / x.seconds,
                              "mean_acceptance_length": mean_acceptance_length(rc), **rc,
                              "identical_to_no_spec": x.outputs == ref,
                              "cpu_pressure": x.counters.get("cpu_pressure"),
                              "reset": x.counters.get("reset"),
                              "proposer_share": (x.counters["proposer_seconds"] / x.seconds
                                                 if "proposer_seconds" in x.counters else None),
                              "proposer_us_per_step": (
                                  1e6 * x.counters["proposer_seconds"] / x.counters["proposer_steps"]
                                  if x.counters.get("proposer_steps") else None)})
        accepted = [p["accepted_tokens"] for p in per_round]
        speedups = [p["speedup"] for p in per_round]
        count_spread = (max(accepted) / min(accepted) - 1) if min(accepted) > 0 else (
            0.0 if max(accepted) == 0 else float("inf"))
        speed_spread = max(speedups) / min(speedups) - 1
        table[m] = {
            "tokens_per_s_median": statistics.median(tps),
            "tokens_per_s": tps,
            "speedup_ratio_of_min": min(x.seconds for x in base) / min(x.seconds for x in rs),
            "speedup_median_per_round": statistics.median(speedups),
            "cold_tokens_per_s": per_round[0]["tokens_per_s"],
            "cold_speedup": per_round[0]["speedup"],
            "mean_acceptance_length": mean_acceptance_length(c),
            "drafts": c["drafts"], "drafted_tokens": c["drafted_tokens"],
            "accepted_tokens": c["accepted_tokens"],
            "identical_to_no_spec": all(p["identical_to_no_spec"] for p in per_round),
            "rounds": per_round,
            "accepted_spread": count_spread,
            "speedup_spread": speed_spread,
            "rounds_disagree": count_spread > COUNT_MARGIN or (m != "none" and speed_spread > SPEED_MARGIN),
            "cpu_pressure": [x.counters.get("cpu_pressure") for x in rs],
            # specdraft's time inside propose over the run's wall time (None for the peers,
            # whose proposers report no such figure)
            "proposer_share": (sum(x.counters["proposer_seconds"] for x in rs)
                               / sum(x.seconds for x in rs)
                               if all("proposer_seconds" in x.counters for x in rs) else None),
        }
    return table


def _mal(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def format_live_table(table: dict) -> str:
    """The summary over rounds, the cold round, then one line per method and round."""
    hdr = (f"{'method':<12} {'tok/s':>7} {'x min':>6} {'x med':>6} {'cold':>6} {'MAL':>5} "
           f"{'drafted':>8} {'accepted':>9} {'identical':>9}")
    lines = [hdr, "-" * len(hdr)]
    for m, t in table.items():
        lines.append(f"{m:<12} {t['tokens_per_s_median']:>7.1f} {t['speedup_ratio_of_min']:>6.2f} "
                     f"{t['speedup_median_per_round']:>6.2f} {t['cold_speedup']:>6.2f} "
                     f"{_mal(t['mean_acceptance_length']):>5} {t['drafted_tokens']:>8} "
                     f"{t['accepted_tokens']:>9} {'yes' if t['identical_to_no_spec'] else 'NO':>9}")
    lines.append("x min: ratio of the fastest rounds to no speculation's; x med: median of per-round "
                 "ratios; cold: round 1's ratio; MAL: mean acceptance length (1 + accepted / drafts)")
    lines.append("")
    lines.append(f"{'round':<5} " + " ".join(f"{m:>22}" for m in table))
    n = len(next(iter(table.values()))["rounds"])
    for r in range(n):
        cells = []
        for t in table.values():
            p = t["rounds"][r]
            cells.append(f"{p['tokens_per_s']:>7.1f} tok/s {p['speedup']:>4.2f}x {_mal(p['mean_acceptance_length']):>4}")
        lines.append(f"{r + 1:<5} " + " ".join(f"{c:>22}" for c in cells))
    lines.append("per round: tokens per second, ratio to no speculation in that round, MAL")
    for m, t in table.items():
        if t.get("proposer_share") is not None:
            us = [p["proposer_us_per_step"] for p in t["rounds"] if p.get("proposer_us_per_step")]
            lines.append(f"{m}: propose took {t['proposer_share']:.2%} of the runs' wall time"
                         + (f" ({statistics.median(us):.0f} us per engine step, median of rounds)"
                            if us else ""))
    for m, t in table.items():
        if t["rounds_disagree"]:
            lines.append(f"WARNING: {m}'s rounds disagree (accepted tokens spread {t['accepted_spread']:.0%}, "
                         f"margin {COUNT_MARGIN:.0%}; speedup spread {t['speedup_spread']:.0%}, margin "
                         f"{SPEED_MARGIN:.0%}): a noisy machine or state carried between rounds")
    return "\n".join(lines)


def plot_live(table: dict, path: str, title: str) -> None:
    """Tokens per second by method (bar: median; dots: rounds, round 1 in red) and MAL."""
    import textwrap

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    methods = list(table)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    axes[0].bar(range(len(methods)), [table[m]["tokens_per_s_median"] for m in methods], color="#9bb7d4")
    for i, m in enumerate(methods):
        tps = table[m]["tokens_per_s"]
        axes[0].scatter([i] * (len(tps) - 1), tps[1:], color="grey", s=12, zorder=3)
        axes[0].scatter([i], tps[:1], color="tab:red", s=14, zorder=3)
    axes[0].set_title("tokens per second (bar: median; dots: rounds, red: round 1)", fontsize=9)
    axes[1].bar(range(len(methods)), [table[m]["mean_acceptance_length"] or 0 for m in methods])
    axes[1].set_title("mean acceptance length (1 + accepted / drafts)", fontsize=9)
    for ax in axes:
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=20)
    fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def engine_plan(model_dir: str, num_engines: int, progress) -> live.EnginePlan:
    """The memory plan, printed in one line; MemoryPlanError when not even one engine fits."""
    plan = live.plan_engines(model_dir, num_engines)
    progress(f"[bench] {plan.describe()}")
    return plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specdraft bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, help="trace JSONL from specdraft record (its prompts "
                    "and max_tokens are used; outputs are checked against it)")
    ap.add_argument("--model", help="model name or folder (default: the trace's model)")
    ap.add_argument("--methods", nargs="+", default=["none", "vllm-ngram", "vllm-suffix", "specdraft"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=8)
    ap.add_argument("--workload", nargs="+", help="use only these workloads' requests")
    ap.add_argument("--limit", type=int, help="use only the first N requests")
    ap.add_argument("--max-tokens", type=int, help="cap every request's output tokens")
    ap.add_argument("--sequential", action="store_true", help="one request at a time (batch 1)")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--max-num-seqs", type=int, default=8, help="vLLM's batch limit (default 8)")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="run engines one at a time even when they fit in memory together")
    ap.add_argument("--json", required=True)
    ap.add_argument("--log", help="where vLLM's own output goes (default: next to --json, .log)")
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    from specdraft.models import resolve_model
    from specdraft.replay import load_trace
    if why := live.methods_error(args.methods):
        ap.error(why)
    try:
        records = load_trace(args.traces)
    except (OSError, ValueError) as e:
        print(f"specdraft bench: {e}", file=sys.stderr)
        return 2
    if args.workload:
        missing = sorted(set(args.workload) - {r["workload"] for r in records})
        if missing:
            ap.error(f"--workload: {', '.join(missing)} not in {args.traces} (it has "
                     f"{', '.join(sorted({r['workload'] for r in records}))})")
        records = [r for r in records if r["workload"] in args.workload]
    records = records[: args.limit]
    fits = [r for r in records if len(r["prompt_token_ids"]) + len(r["output_token_ids"]) <= args.max_model_len]
    if len(fits) < len(records):
        progress(f"[bench] skipping {len(records) - len(fits)} requests longer than --max-model-len")
    records = fits
    name = args.model or records[0].get("model") or "smollm2-135m"
    path = resolve_model(name)
    prompts = [r["prompt_token_ids"] for r in records]
    maxes = [min(int(r.get("max_tokens") or len(r["output_token_ids"])), len(r["output_token_ids"]),
                 args.max_tokens or 1 << 30) for r in records]
    progress(f"[bench] {len(records)} requests from {args.traces}, model {name}, methods "
             f"{' '.join(args.methods)}, {args.rounds} rounds")
    try:
        plan = engine_plan(path, len(args.methods), progress)
    except live.MemoryPlanError as e:
        print(f"specdraft bench: {e}", file=sys.stderr)
        return 2
    if args.one_at_a_time:
        plan.mode = "one-at-a-time"
    log_path = args.log or os.path.splitext(args.json)[0] + ".log"
    progress(f"[bench] vLLM's output goes to {log_path}")
    with live.engine_log(log_path) as say:
        engines = start_engines(path, args.methods, args.num_speculative_tokens, say, plan,
                                max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs)
        try:
            runs = run_interleaved(engines, prompts, maxes, args.rounds, say,
                                   sequential=args.sequential, methods=args.methods)
        except live.MemoryPlanError as e:
            say(f"specdraft bench: {e}")
            return 2
        finally:
            engines.close()
    recorded = [r["output_token_ids"][:n] for r, n in zip(records, maxes)]
    table = summarize(runs)
    matches_trace = all(o == e for o, e in zip(runs["none"][0].outputs, recorded))
    title = (f"{name}: {len(records)} requests, k={args.num_speculative_tokens}, "
             f"{args.rounds} interleaved rounds ({plan.mode}), caches cleared before every run, "
             f"float32 CPU")
    print()
    print(title)
    print(format_live_table(table))
    print(f"no-speculation outputs identical to the trace: {'yes' if matches_trace else 'NO'}")
    write_results(args.json, {"settings": vars(args), "memory_plan": vars(plan), "table": table,
                              "no_spec_matches_trace": matches_trace},
                  plot=lambda png: plot_live(table, png, title), say=progress, tag="bench")
    return 0 if all(t["identical_to_no_spec"] for t in table.values()) else 1
