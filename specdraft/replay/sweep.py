"""Every method over a trace, per workload and batch size (``replay``): the counts at the
first batch size, and each batch size's estimated speedup and draft length."""

from __future__ import annotations

import time

from specdraft.proposers.controller import CostModel
from specdraft.replay.batched import baseline_cost, replay_batched
from specdraft.replay.methods import METHODS


def _replay_method(factory, records: list[dict], budget: int, workloads, cost_model, batches,
                   progress, specdraft_options: dict | None = None,
                   baselines: dict | None = None, advance=None,
                   fixed_width: bool = False) -> tuple[dict, float]:
    """Per workload: counts at batch 1, and each batch's est. speedup and draft length; each
    (workload, batch) run starts from a fresh method (its caches see only that workload).
    ``baselines`` keeps each (workload, batch)'s no-draft cost for the next method."""
    baselines = {} if baselines is None else baselines
    per_w = {}
    seconds = 0.0
    cm = CostModel(cost_model)
    for w in workloads:
        recs = [r for r in records if r["workload"] == w]
        agg = None
        for b in batches:
            if (w, b) not in baselines:  # the same for every method: not timed
                baselines[w, b] = baseline_cost(recs, b, cm)
            t0 = time.perf_counter()
            method = (factory(cost_model, specdraft_options) if getattr(factory, "specdraft", False)
                      else factory(cost_model))
            r = replay_batched(method, recs, budget, b, cm, baselines[w, b], fixed_width)
            if b == batches[0]:
                seconds += time.perf_counter() - t0
            if agg is None:
                agg = {k: r[k] for k in ("requests", "target_passes", "drafted_tokens",
                                         "accepted_tokens", "drafts", "output_tokens")}
                agg["batch"] = {}
            agg["batch"][str(b)] = {
                "est_speedup": r["est_speedup"],
                "drafted_per_step": r["drafted_tokens"] / r["decode_passes"] if r["decode_passes"] else 0.0,
                "tokens_per_pass": r["output_tokens"] / r["target_passes"],
                "requests": r["requests"]}
        per_w[w] = agg
        if progress:
            progress(f"[replay]   {w}: done")
        if advance is not None:
            advance()
    return per_w, seconds


def default_cost_model(records: list[dict]) -> str:
    """The GPU preset for the size of the trace's model (from its name: "...-1.5b", "-135m")."""
    import re

    from specdraft.proposers.controller import preset_for_parameters
    sizes = []
    for r in records:
        m = re.search(r"(\d+(?:\.\d+)?)([bm])\b", str(r.get("model", "")).lower())
        if m:
            sizes.append(float(m.group(1)) * (1e9 if m.group(2) == "b" else 1e6))
    return preset_for_parameters(max(sizes)) if sizes else "medium"


def replay(records: list[dict], methods: list[str], budget: int = 16, cost_model=None,
           batches=(1, 16, 64), progress=None, specdraft_options: dict | None = None,
           advance=None, fixed_width: bool = False) -> dict:
    """Replay every method over the records, per workload, at each batch size.

    The counts (passes, drafted, accepted) are those of batch ``batches[0]``; each batch size
    adds its est. speedup under ``cost_model`` (default: the preset for the trace's model size)
    and its draft tokens per decode step. Adaptive specdraft methods size drafts with that cost
    model, seeing the whole batch. ``specdraft_options`` override the options of every specdraft
    method (ablations). ``advance()``, if given, is called as each method finishes a workload.
    ``fixed_width``: every decoding row is verified ``budget`` wide (``replay_batched``).
    """
    cost_model = cost_model or default_cost_model(records)
    batches = list(batches)
    workloads = sorted({r["workload"] for r in records})
    results: dict = {w: {} for w in workloads}
    speed: dict = {}
    baselines: dict = {}  # (workload, batch) -> no-draft cost, shared by the methods
    for mname in methods:
        if mname not in METHODS:
            raise ValueError(f"unknown method {mname!r}; accepted: {', '.join(METHODS)}")
        per_w, secs = _replay_method(METHODS[mname], records, budget, workloads, cost_model,
                                     batches, progress, specdraft_options, baselines, advance,
                                     fixed_width)
        total_out = sum(a["output_tokens"] for a in per_w.values())
        speed[mname] = {"seconds": secs, "replayed_tokens_per_s": total_out / secs if secs else 0.0}
        for w, agg in per_w.items():
            agg["tokens_per_pass"] = agg["output_tokens"] / agg["target_passes"]
            agg["mean_acceptance_length"] = (1 + agg["accepted_tokens"] / agg["drafts"]
                                             if agg["drafts"] else None)
            agg["drafted_per_accepted"] = (agg["drafted_tokens"] / agg["accepted_tokens"]
                                           if agg["accepted_tokens"] else None)
            results[w][mname] = agg
        if progress:
            progress(f"[replay] {mname}: done, {secs:.1f}s at batch {batches[0]} "
                     f"({speed[mname]['replayed_tokens_per_s']:,.0f} tokens/s)")
    return {"results": results, "speed": speed, "settings": {
        "max_draft": budget, "methods": methods, "cost_model": cost_model, "batches": batches,
        "requests": len(records), "models": sorted({str(r.get("model")) for r in records}),
        "specdraft_options": specdraft_options or {}, "fixed_width": fixed_width}}
