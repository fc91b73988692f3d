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
from dataclasses import dataclass

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
        self.dtype = llm_kwargs.get("dtype", "float32")

    @contextlib.contextmanager
    def engine(self, method: str):
        # memory may have gone to other processes since the plan: check again before each start
        live.plan_engines(self.model, 1, self.dtype)
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


@dataclass
class Workload:
    """What one run sends: ``prompts`` with their ``max_tokens`` (one figure or one per prompt).
    ``waves``: groups of prompt indices sent one group after another, a group only once the one
    before has finished (a session's later turn holds the earlier turn's answer, as ``specdraft
    record`` sends turns); None: every prompt at once."""

    prompts: list[list[int]]
    max_tokens: int | list[int]
    waves: list[list[int]] | None = None


def generate_waves(llm, prompts: list[list[int]], maxes: list[int], waves: list[list[int]],
                   ignore_eos: bool = False) -> live.RunResult:
    """``live.generate`` of each wave in turn (each in one burst), put together in prompt order:
    outputs, seconds and counters summed, every request's latencies; ``first_step``: the first
    wave's."""
    outs: list = [None] * len(prompts)
    secs, lat, firsts = 0.0, [], []
    totals = dict.fromkeys(live.COUNTER_KEYS, 0)
    for wave in waves:
        one = live.generate(llm, [prompts[i] for i in wave], [maxes[i] for i in wave],
                            ignore_eos=ignore_eos)
        for i, o in zip(wave, one.outputs):
            outs[i] = o
        secs += one.seconds
        lat.extend(one.latencies)
        firsts.append(one.first_step)
        for k in live.COUNTER_KEYS:
            totals[k] += one.counters.get(k, 0)
    return live.RunResult(outs, secs, dict(totals, wave_first_steps=firsts), lat,
                          firsts[0] if firsts else None)


def run_interleaved(engines, prompts: list[list[int]], max_tokens, rounds: int, progress,
                    sequential: bool = False, ignore_eos: bool = False,
                    methods: list[str] | None = None, warmup_rounds: int = 0,
                    bar: str | None = None, workloads: dict[str, Workload] | None = None,
                    first_round: int = 0) -> dict:
    """{method: [RunResult per round]}, methods interleaved with the order rotated each round.

    Every run starts from an engine with no cross-request state (prefix cache, global caches):
    a round that sends the same prompts again must not find its own answers from the round
    before. What a method learns within a run (earlier requests, earlier turns) stays.
    ``sequential`` sends one request at a time (batch 1) and keeps per-request counters in
    ``RunResult.counters['per_request']``. ``warmup_rounds`` whole rounds run first, untimed
    and not reported: kernels the CPU build makes per batch shape on first use (oneDNN's
    primitives in bfloat16) are then made before the timed rounds, as on a server that has run
    a while. ``bar``: a label; on a terminal a progress bar counts the runs (warm-up runs
    included), drawn where ``progress`` writes (its ``stream``, see ``live.engine_log``).
    ``workloads`` ({name: Workload}, in place of ``prompts`` and ``max_tokens``): in each
    method's turn every workload runs, one after another, each from a clean slate; the result
    is then {workload: {method: [RunResult per round]}}. ``first_round``: the index of the first
    timed round (it sets the rotation; a round run again keeps its order).
    """
    from specdraft.progress import Progress

    methods = list(methods or engines.engines)
    single = workloads is None
    if single:
        workloads = {"": Workload(prompts, max_tokens)}
    shown = (Progress((warmup_rounds + rounds) * len(methods) * len(workloads), bar, "run",
                      getattr(progress, "stream", None)) if bar else None)
    if shown is not None:
        progress = shown.say  # lines above the bar
    runs: dict[str, dict[str, list]] = {w: {m: [] for m in methods} for w in workloads}
    with shown or contextlib.nullcontext():
        for r in range(first_round - warmup_rounds, first_round + rounds):
            order = methods[r % len(methods):] + methods[: r % len(methods)]
            for m in order:
                with engines.engine(m) as llm:
                    done = [(w, _run_once(llm, wl, sequential, ignore_eos))
                            for w, wl in workloads.items()]
                for w, res in done:
                    if shown is not None:
                        shown.advance()
                    what = f"{m:<12}" + (f" {w}" if w else "")
                    if r < first_round:
                        progress(f"[bench] warm-up round {r - first_round + warmup_rounds + 1}/"
                                 f"{warmup_rounds} {m}{f' {w}' if w else ''}: "
                                 f"{res.tokens / res.seconds:.1f} tok/s (not reported)")
                        continue
                    runs[w][m].append(res)
                    tpot = _median_ms([t for _, t in res.latencies])
                    label = f"{r + 1}/{rounds}" if first_round == 0 else f"{r + 1} again"
                    progress(f"[bench] round {label} {what} "
                             f"{res.tokens / res.seconds:7.1f} tok/s  TPOT {_ms(tpot):>6} ms  accepted "
                             f"{res.counters.get('accepted_tokens', 0):>6}  (cpu pressure: "
                             f"{res.counters['cpu_pressure'] or 'n/a'})")
    return runs[""] if single else runs


def _run_once(llm, wl: Workload, sequential: bool, ignore_eos: bool) -> live.RunResult:
    """One timed run of a workload on an engine, from a clean slate, with its counters."""
    prompts = wl.prompts
    maxes = wl.max_tokens if isinstance(wl.max_tokens, list) else [wl.max_tokens] * len(prompts)
    warm = [prompts[0][: max(1, min(len(prompts[0]), 32))]]
    # one short untimed request (first-call costs), then a clean slate again
    live.generate(llm, warm, 4)
    reset = live.reset_cross_request_state(llm)
    schedule = live.engine_schedule(llm)
    before = live.proposer_time(llm)
    live.step_times(llm)  # from here: this run's steps
    if sequential:
        outs, secs, per_req, lat = [], 0.0, [], []
        for p, n in zip(prompts, maxes):
            one = live.generate(llm, [p], n, ignore_eos=ignore_eos)
            outs.extend(one.outputs)
            secs += one.seconds
            per_req.append(one.counters)
            lat.extend(one.latencies)
        totals = {k: sum(c[k] for c in per_req) for k in live.COUNTER_KEYS}
        res = live.RunResult(outs, secs, dict(totals, per_request=per_req), lat)
    elif wl.waves is not None:
        res = generate_waves(llm, prompts, maxes, wl.waves, ignore_eos)
    else:
        res = live.generate(llm, prompts, maxes, ignore_eos=ignore_eos)
    after = live.proposer_time(llm) if before is not None else None
    costs = live.pass_costs(llm) if after is not None else None
    res.counters["step_times"] = live.step_times(llm)
    if after is not None:  # specdraft's own counters: time in propose, propose calls
        res.counters["proposer_seconds"] = after[0] - before[0]
        res.counters["proposer_steps"] = after[1] - before[1]
        res.counters["pass_costs"], res.counters["pass_log"] = costs or (None, None)
    res.counters["cpu_pressure"] = live.cpu_pressure()
    res.counters["reset"] = reset
    # the engine's first step: the requests it admitted, read from the run (every one
    # since generate() hands them over in one burst; runs before that drew it by race)
    res.counters["schedule"] = dict(schedule, first_step=(1 if sequential else res.first_step))
    return res


def lookahead_outputs(engines, prompts: list[list[int]], maxes: list[int], k: int) -> list[list[int]]:
    """No speculation's outputs with ``k`` tokens past each request's limit (untimed, caches
    cleared after): what the target would have said where a draft at the limit reaches past it
    (the engine counts those tokens accepted, then cuts the output)."""
    with engines.engine("none") as llm:
        out = live.generate(llm, prompts, [m + k for m in maxes]).outputs
        live.reset_cross_request_state(llm)
    return out


def replay_live(runs: dict, prompts: list[list[int]], k: int, schedule, cost_model: str,
                progress=None, lookahead: list[list[int]] | None = None) -> dict:
    """Each method's live rounds replayed offline: the same prompts, that round's own outputs as
    the truth, all requests sent at once and scheduled as the engine schedules them
    (``schedule``: an ``EngineSchedule``), the same draft bound and the cost model the live
    engine planned with. {method: {drafts, drafted_tokens, accepted_tokens}} summed over rounds,
    beside the live counts they predict. Drafts are judged against ``lookahead`` (no
    speculation's outputs run past the limits) where a run's output is its prefix."""
    from specdraft.replay import METHODS, replay_engine

    # every engine runs the same model and shapes: specdraft's measured passes price them all
    shared = merged_pass_costs({m: {"rounds": [{"pass_costs": x.counters.get("pass_costs")}
                                               for x in rs]} for m, rs in runs.items()})
    out = {}
    for m, rs in runs.items():
        factory = METHODS[live.REPLAY_METHODS[m]]
        tot = dict.fromkeys(live.COUNTER_KEYS + ("est_seconds", "target_steps"), 0)
        for x in rs:
            requests = _judged_requests(prompts, x, lookahead)
            own = x.counters.get("pass_log")  # what this engine's controller was told
            r = replay_engine(factory(cost_model), requests, k, schedule(x),
                              measured_cost(shared, own))
            for key in live.COUNTER_KEYS:
                tot[key] += r[key]
            tot["est_seconds"] += r.get("est_seconds", 0.0)
            tot["target_steps"] += r["steps"]
        out[m] = tot
        if progress:
            progress(f"[bench] replayed {m} ({live.REPLAY_METHODS[m]}): drafted {tot['drafted_tokens']}, accepted "
                     f"{tot['accepted_tokens']}")
    return out


def _judged_requests(prompts: list[list[int]], run, lookahead: list[list[int]] | None) -> list:
    """A round's requests for ``replay_engine``: (prompt, output, truth), the truth being no
    speculation's output past the limits where the round's output is its prefix."""
    truths = lookahead or run.outputs
    return [(p, o, t if t[:len(o)] == o else o)
            for p, o, t in zip(prompts, run.outputs, truths) if o]


def replay_ceiling(runs: dict, prompts: list[list[int]], k: int, schedule,
                   lookahead: list[list[int]] | None = None) -> dict | None:
    """About the fastest any drafter could have run: no speculation's outputs replayed with
    drafts that are always right (an oracle), on the engine's schedule and priced by the
    measured passes, ``L`` tokens a step for L in 1, 2, 4, ..., k, or per step the L that
    emits the most tokens per second of that pass (``draft_length`` "per step"); the fastest
    of these, summed over rounds. None without measured passes. A method's distance to it is
    what better drafts could still win; it is not a strict bound (a drafter that sizes each
    request's draft on its own could do a little better)."""
    from specdraft.replay import OracleMethod, replay_engine

    shared = merged_pass_costs({m: {"rounds": [{"pass_costs": x.counters.get("pass_costs")}
                                               for x in rs]} for m, rs in runs.items()})
    if not shared or "none" not in runs:
        return None
    cost = measured_cost(shared)
    lengths = sorted({min(k, 1 << i) for i in range(k.bit_length() + 1)} | {k})
    best = None
    for length in lengths + [None]:
        tot = {"draft_length": length or "per step", "est_seconds": 0.0, "target_steps": 0,
               "accepted_tokens": 0}
        for x in runs["none"]:
            requests = _judged_requests(prompts, x, lookahead)
            oracle = OracleMethod(length, {tuple(p): t for p, _, t in requests},
                                  lambda rows, tokens: cost(1 << 62, rows, tokens))
            r = replay_engine(oracle, requests, k, schedule(x), cost)
            tot["est_seconds"] += r["est_seconds"]
            tot["target_steps"] += r["steps"]
            tot["accepted_tokens"] += r["accepted_tokens"]
        if best is None or tot["est_seconds"] < best["est_seconds"]:
            best = tot
    return best


def measured_cost(pass_costs: list[list] | None, pass_log: list[list] | None = None):
    """``pass_cost(step, rows, tokens) -> seconds`` from a run's measured passes: the time the
    live controller was told for that step (``pass_log``: [rows, tokens, seconds] in order) while
    the replay's pass has the same shape, else the shape's mean (``pass_costs``: [rows, tokens,
    passes, mean seconds]), else the nearest size measured with as many rows. None without
    measurements (nothing is reported)."""
    if not pass_costs:
        return None
    log = pass_log or []
    exact = {(r, t): s for r, t, _, s in pass_costs}
    by_rows: dict[int, list] = {}
    for r, t, _, s in pass_costs:
        by_rows.setdefault(r, []).append((t, s))

    def cost(step: int, rows: int, tokens: int) -> float | None:
        if step < len(log) and log[step][0] == rows and log[step][1] == tokens:
            return log[step][2]
        if (rows, tokens) in exact:
            return exact[rows, tokens]
        near = by_rows.get(rows)
        return min(near, key=lambda ts: abs(ts[0] - tokens))[1] if near else None
    return cost


def run_schedule(run, max_num_seqs: int):
    """The engine schedule a run had (one request at a time when ``max_num_seqs`` is 1)."""
    from specdraft.replay import EngineSchedule

    # the first step holds the requests that had reached the engine (recorded from vLLM's
    # stamps: since live.generate hands them over in one burst, all it admits; older runs raced
    # an engine that stepped on the first; runs without stamps: the first)
    sched = dict(run.counters["schedule"], max_num_seqs=max_num_seqs)
    if sched.get("first_step") is None:
        sched["first_step"] = 1
    return EngineSchedule(**sched)


def add_replayed(table: dict, replayed: dict) -> None:
    """Puts each method's ``replayed`` counts and the live/replayed gaps into its table row."""
    for m, rep in replayed.items():
        t = table[m]
        t["replayed"] = rep
        t["replay_gap"] = {key: (t[key] / rep[key] - 1 if rep[key] else None)
                           for key in ("drafted_tokens", "accepted_tokens")}
    base = replayed.get("none", {}).get("est_seconds")
    for m, rep in replayed.items():  # the speedup the replay predicts from the measured passes
        rep["est_speedup"] = base / rep["est_seconds"] if base and rep.get("est_seconds") else None


# Rounds disagree when a method's accepted tokens (clock-free: the rounds send the same requests
# to a clean engine, so they should match up to batching effects) differ by more than this share,
# or its per-round speedups against no speculation by more than SPEED_MARGIN (a noisy machine).
COUNT_MARGIN = 0.05
SPEED_MARGIN = 0.25


def _median_ms(seconds: list) -> float | None:
    """Median of the values that exist, in milliseconds (None when none does)."""
    vals = [1e3 * v for v in seconds if v is not None]
    return statistics.median(vals) if vals else None


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _median(vals: list) -> float | None:
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def mean_acceptance_length(counters: dict) -> float | None:
    """vLLM's definition: 1 + accepted / drafts (None without any draft)."""
    return 1 + counters["accepted_tokens"] / counters["drafts"] if counters.get("drafts") else None


def summarize(runs: dict, reference: list[list[int]] | None = None, *, k: int) -> dict:
    """Per method: summary over rounds, the cold (first) round and every round; ``disagreement``
    lists the methods whose rounds disagree by more than the margins above. ``k``: the draft
    bound, which tells decode steps from prefill steps (step_summary)."""
    base = runs["none"]
    ref = reference if reference is not None else base[0].outputs
    table = {}
    for m, rs in runs.items():
        c = {k: sum(x.counters.get(k, 0) for x in rs) for k in live.COUNTER_KEYS}
        tps = [x.tokens / x.seconds for x in rs]
        per_round = []
        for b, x in zip(base, rs):
            rc = {k: x.counters.get(k, 0) for k in live.COUNTER_KEYS}
            tpot = _median_ms([t for _, t in x.latencies])
            base_tpot = _median_ms([t for _, t in b.latencies])
            same = [o == e for o, e in zip(x.outputs, ref)]
            per_round.append({"tokens_per_s": x.tokens / x.seconds, "seconds": x.seconds,
                              "speedup": b.seconds / x.seconds,
                              # vLLM's serving-benchmark latencies: median over requests
                              "ttft_ms_median": _median_ms([t for t, _ in x.latencies]),
                              "tpot_ms_median": tpot,
                              "decode_tokens_per_s": 1e3 / tpot if tpot else None,
                              "decode_speedup": _ratio(base_tpot, tpot),
                              "output_tokens": x.tokens,
                              # target passes each request took (its prefill's first included):
                              # every output token not accepted from a draft costs one
                              "target_passes": x.tokens - rc["accepted_tokens"],
                              "mean_acceptance_length": mean_acceptance_length(rc), **rc,
                              "identical_to_no_spec": x.outputs == ref,
                              "identical_fraction": sum(same) / len(same) if same else 1.0,
                              "cpu_pressure": x.counters.get("cpu_pressure"),
                              "reset": x.counters.get("reset"),
                              "schedule": x.counters.get("schedule"),
                              # specdraft's measured passes: [rows, tokens, passes, mean seconds]
                              "pass_costs": x.counters.get("pass_costs"),
                              "pass_log": x.counters.get("pass_log"),
                              # every engine's steps: [requests, tokens, steps, mean seconds]
                              "step_times": x.counters.get("step_times"),
                              "steps": step_summary(x.counters.get("step_times"), k),
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
            "identical_fraction": min(p["identical_fraction"] for p in per_round),
            "target_passes": sum(p["target_passes"] for p in per_round),
            # tokens each pass verified per request (its own + the draft's)
            "tokens_verified_per_pass": (sum(p["target_passes"] + p["drafted_tokens"]
                                             for p in per_round)
                                         / max(1, sum(p["target_passes"] for p in per_round))),
            "ttft_ms_median": _median([p["ttft_ms_median"] for p in per_round]),
            "tpot_ms_median": _median([p["tpot_ms_median"] for p in per_round]),
            "decode_tokens_per_s_median": _median([p["decode_tokens_per_s"] for p in per_round]),
            "decode_speedup_median_per_round": _median([p["decode_speedup"] for p in per_round]),
            "steps": _median_steps([p["steps"] for p in per_round]),
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
    if PEER in table:  # each method against vLLM suffix, round by round (median of ratios)
        peer = table[PEER]["rounds"]
        for t in table.values():
            t["vs_suffix"] = {
                "tokens_per_s": _median([p["tokens_per_s"] / q["tokens_per_s"]
                                         for p, q in zip(t["rounds"], peer)]),
                "decode": _median([_ratio(q["tpot_ms_median"], p["tpot_ms_median"])
                                   for p, q in zip(t["rounds"], peer)])}
    return table


def step_summary(step_times: list[list] | None, k: int) -> dict | None:
    """Where a run's time went, from its timed engine steps ([requests, tokens, steps, mean
    seconds] per shape): all steps, decode steps (every request scores at most its own token
    and k draft tokens) and steps that also prefill (more tokens than that)."""
    if not step_times:
        return None
    out = {"steps": 0, "seconds": 0.0, "decode_steps": 0, "decode_seconds": 0.0,
           "decode_tokens": 0, "decode_requests": 0, "prefill_steps": 0, "prefill_seconds": 0.0}
    for rows, tokens, n, mean in step_times:
        out["steps"] += n
        out["seconds"] += n * mean
        if tokens <= rows * (k + 1):
            out["decode_steps"] += n
            out["decode_seconds"] += n * mean
            out["decode_tokens"] += n * tokens
            out["decode_requests"] += n * rows
        else:
            out["prefill_steps"] += n
            out["prefill_seconds"] += n * mean
    d = out["decode_steps"]
    out["decode_ms_per_step"] = 1e3 * out["decode_seconds"] / d if d else None
    out["decode_tokens_per_step"] = out["decode_tokens"] / d if d else None
    out["decode_requests_per_step"] = out["decode_requests"] / d if d else None
    return out


def _median_steps(rounds: list[dict | None]) -> dict | None:
    """Each figure of the rounds' step summaries, median of rounds (None if any is missing)."""
    if not rounds or any(r is None for r in rounds):
        return None
    return {key: _median([r[key] for r in rounds]) for key in rounds[0]}


def format_steps_table(table: dict) -> str:
    """Where each method's time went (median of rounds): engine steps and their seconds, split
    into decode steps and steps that also prefill, tokens scored and ms per decode step."""
    rows = [(m, t["steps"]) for m, t in table.items() if t.get("steps")]
    if not rows:
        return ""
    hdr = (f"{'method':<12} {'steps':>6} {'seconds':>8} {'decode':>7} {'dec s':>7} "
           f"{'tok/step':>8} {'req/step':>8} {'ms/step':>8} {'prefill':>8} {'pre s':>7}")
    lines = [hdr, "-" * len(hdr)]
    for m, st in rows:
        lines.append(f"{m:<12} {st['steps']:>6.0f} {st['seconds']:>8.1f} {st['decode_steps']:>7.0f} "
                     f"{st['decode_seconds']:>7.1f} {_num(st['decode_tokens_per_step']):>8} "
                     f"{_num(st['decode_requests_per_step']):>8} {_num(st['decode_ms_per_step']):>8} "
                     f"{st['prefill_steps']:>8.0f} {st['prefill_seconds']:>7.1f}")
    lines.append("engine steps timed from one execute_model call to the next (median of rounds): "
                 "decode steps score at most each request's token and its draft; prefill steps "
                 "also prefill; tok/step, req/step, ms/step: per decode step")
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


PEER = "vllm-suffix"  # the built-in every ratio is also taken against


def _mal(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def format_live_summary(table: dict) -> list[str]:
    """The summary over rounds, one line per method (with its header): the table ``specdraft
    demo`` and ``bench`` print first, and README's first screen shows (``specdraft report``)."""
    peer = PEER in table
    hdr = (f"{'method':<12} {'tok/s':>7} {'x min':>6} {'x med':>6} {'cold':>6} {'TTFT ms':>8} "
           f"{'TPOT ms':>8} {'dec x':>6} " + (f"{'/suffix':>7} {'dec/suf':>7} " if peer else "")
           + f"{'MAL':>5} {'drafted':>8} {'accepted':>9} {'identical':>9}")
    lines = [hdr, "-" * len(hdr)]
    for m, t in table.items():
        ident = ("yes" if t["identical_to_no_spec"] else f"{t['identical_fraction']:.0%}")
        vs = (f"{_x(t['vs_suffix']['tokens_per_s']):>7} {_x(t['vs_suffix']['decode']):>7} "
              if peer else "")
        lines.append(f"{m:<12} {t['tokens_per_s_median']:>7.1f} {t['speedup_ratio_of_min']:>6.2f} "
                     f"{t['speedup_median_per_round']:>6.2f} {t['cold_speedup']:>6.2f} "
                     f"{_ms(t['ttft_ms_median']):>8} {_ms(t['tpot_ms_median']):>8} "
                     f"{_x(t['decode_speedup_median_per_round']):>6} {vs}"
                     f"{_mal(t['mean_acceptance_length']):>5} {t['drafted_tokens']:>8} "
                     f"{t['accepted_tokens']:>9} {ident:>9}")
    return lines


def format_rounds_warnings(table: dict) -> list[str]:
    """One line per method whose rounds disagree beyond the margins."""
    return [f"WARNING: {m}'s rounds disagree (accepted tokens spread {t['accepted_spread']:.0%}, "
            f"margin {COUNT_MARGIN:.0%}; speedup spread {t['speedup_spread']:.0%}, margin "
            f"{SPEED_MARGIN:.0%}): a noisy machine or state carried between rounds"
            for m, t in table.items() if t["rounds_disagree"]]


def format_live_table(table: dict) -> str:
    """The summary over rounds, the cold round, then one line per method and round."""
    peer = PEER in table
    lines = format_live_summary(table)
    lines.append("tok/s: end to end (prefill included), median of rounds; x min: ratio of the fastest "
                 "rounds to no speculation's; x med: median of per-round ratios; cold: round 1's "
                 "ratio; TTFT, TPOT: vLLM's serving-benchmark definitions, median over requests "
                 "(then rounds); dec x: decode speed (1/TPOT) against no speculation"
                 + ("; /suffix, dec/suf: end-to-end and decode speed against vLLM suffix (median "
                    "of per-round ratios)" if peer else "")
                 + "; MAL: mean acceptance length (1 + accepted / drafts); identical: outputs "
                 "token-identical to no speculation (else the share of requests that are)")
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
    lines += format_rounds_warnings(table)
    return "\n".join(lines)


def format_replay_gaps(table: dict, cost_model: str, ceiling: dict | None = None) -> str:
    """Live counts against their offline replay (``replayed``), one line per method, and the
    ceiling any drafter could reach (``replay_ceiling``)."""
    lines = [f"replay of the live outputs (same prompts, concurrency and draft bound; cost model "
             f"{cost_model}): live / replayed"]
    for m, t in table.items():
        if "replayed" not in t:
            continue
        r, g = t["replayed"], t["replay_gap"]
        est = (f"  est. x none {r['est_speedup']:.2f} ({r['target_steps']} steps, "
               f"{r['est_seconds']:.1f} s of measured passes)" if r.get("est_speedup") else "")
        lines.append(f"  {m:<12} drafted {t['drafted_tokens']} / {r['drafted_tokens']} "
                     f"({_pct(g['drafted_tokens'])})  accepted {t['accepted_tokens']} / "
                     f"{r['accepted_tokens']} ({_pct(g['accepted_tokens'])})  drafts "
                     f"{t['drafts']} / {r['drafts']}" + est)
    if ceiling and ceiling["est_seconds"]:
        best = ceiling["est_seconds"]
        times = ", ".join(f"{m} {t['replayed']['est_seconds'] / best:.2f}x"
                          for m, t in table.items() if t.get("replayed", {}).get("est_seconds"))
        length = ceiling["draft_length"]
        lines.append(f"  ceiling (drafts always right, "
                     f"{'the best length each step' if length == 'per step' else f'{length} tokens a step at most'}): "
                     f"{best:.1f} s of measured passes; each method's replayed time against it: "
                     f"{times}")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def plot_live(table: dict, path: str, title: str, rotation: int = 20) -> None:
    """Tokens per second end to end and decode speed (1/TPOT) by method (bars: medians; dots:
    rounds, round 1 in red), and what decides speed: draft tokens accepted and rejected per
    output token (the target passes saved against the extra tokens every pass verifies)."""
    import textwrap

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    methods = list(table)
    xs = range(len(methods))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4))
    for ax, key, rounds_key, what in (
            (axes[0], "tokens_per_s_median", "tokens_per_s", "tokens per second, end to end"),
            (axes[1], "decode_tokens_per_s_median", "decode_tokens_per_s",
             "decode tokens per second per request (1 / TPOT)")):
        ax.bar(xs, [table[m][key] or 0 for m in methods], color="#9bb7d4")
        for i, m in enumerate(methods):
            vals = [p[rounds_key] for p in table[m]["rounds"]]
            ax.scatter([i] * (len(vals) - 1), vals[1:], color="grey", s=12, zorder=3)
            ax.scatter([i], vals[:1], color="tab:red", s=14, zorder=3)
        ax.set_title(f"{what}\n(bar: median; dots: rounds, red: round 1)", fontsize=9)
    out = [sum(p["output_tokens"] for p in table[m]["rounds"]) or 1 for m in methods]
    acc = [table[m]["accepted_tokens"] / n for m, n in zip(methods, out)]
    rej = [(table[m]["drafted_tokens"] - table[m]["accepted_tokens"]) / n
           for m, n in zip(methods, out)]
    axes[2].bar(xs, acc, color="tab:green", label="accepted (a target pass saved each)")
    axes[2].bar(xs, rej, bottom=acc, color="tab:grey", label="rejected (verified for nothing)")
    axes[2].set_title("draft tokens per output token", fontsize=9)
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=rotation)
    fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def merged_pass_costs(table: dict, method: str = "specdraft") -> list[list]:
    """[rows, tokens, passes, mean seconds] over every round of ``method`` (its measured passes)."""
    cells: dict = {}
    for p in table.get(method, {}).get("rounds", []):
        for rows, tokens, n, mean in p.get("pass_costs") or ():
            c = cells.setdefault((rows, tokens), [0, 0.0])
            c[0] += n
            c[1] += n * mean
    return [[r, t, n, s / n] for (r, t), (n, s) in sorted(cells.items())]


def plot_pass_costs(costs: list[list], k: int, path: str, title: str) -> None:
    """What a target pass cost on the running engine, by tokens scored (left: mean time per
    shape, dot area = passes, colour = requests in the batch), and the draft lengths the
    controller chose against it (right: draft tokens per request per decode pass)."""
    import textwrap

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    if costs:
        rows = [c[0] for c in costs]
        sc = axes[0].scatter([c[1] for c in costs], [1e3 * c[3] for c in costs],
                             s=[4 + 2 * c[2] ** 0.5 for c in costs], c=rows, cmap="viridis")
        fig.colorbar(sc, ax=axes[0], label="requests in the pass")
        decode = [c for c in costs if c[1] <= c[0] * (k + 1)]
        per_req: dict[int, int] = {}
        for r, t, n, _ in decode:
            d = round((t - r) / r)
            per_req[d] = per_req.get(d, 0) + n
        xs = sorted(per_req)
        axes[1].bar(xs, [per_req[x] for x in xs], color="#9bb7d4")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("tokens scored in the pass")
    axes[0].set_ylabel("ms per pass (mean)")
    axes[0].set_title("measured pass cost (decode passes and prefill chunks)", fontsize=9)
    axes[1].set_xlabel("draft tokens per request in the pass (decode passes)")
    axes[1].set_ylabel("passes")
    axes[1].set_title("draft lengths chosen", fontsize=9)
    fig.suptitle(textwrap.fill(title, 120), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def engine_plan(model_dir: str, num_engines: int, progress, dtype: str = "float32") -> live.EnginePlan:
    """The memory plan, printed in one line; MemoryPlanError when not even one engine fits."""
    plan = live.plan_engines(model_dir, num_engines, dtype)
    progress(f"[bench] {plan.describe()}")
    return plan


def select_requests(records: list[dict], workloads, limit, max_model_len) -> tuple[list[dict], int]:
    """The requests a bench sends (of ``workloads``, the first ``limit``, those that fit), and
    how many were left out for their length."""
    if workloads:
        records = [r for r in records if r["workload"] in workloads]
    records = records[:limit]
    fits = [r for r in records if len(r["prompt_token_ids"]) + len(r["output_token_ids"]) <= max_model_len]
    return fits, len(records) - len(fits)


def request_limits(records: list[dict], max_tokens: int | None) -> list[int]:
    return [min(int(r.get("max_tokens") or len(r["output_token_ids"])), len(r["output_token_ids"]),
                max_tokens or 1 << 30) for r in records]


def replay_saved(path: str) -> int:
    """``--replay-only``: the replay of a saved bench run, from its JSON (outputs, measured pass
    costs, schedules), written back into it."""
    import json

    from specdraft.replay import load_trace
    with open(path) as f:
        saved = json.load(f)
    s = saved["settings"]
    records, _ = select_requests(load_trace(s["traces"]), s.get("workload"), s.get("limit"),
                                 s["max_model_len"])
    prompts = [r["prompt_token_ids"] for r in records]
    table = saved["table"]
    runs = {m: [live.RunResult(outs, 1.0, {"pass_costs": p.get("pass_costs"),
                                            "pass_log": p.get("pass_log"),
                                            "schedule": p.get("schedule")})
                for outs, p in zip(saved["outputs"][m], table[m]["rounds"])]
            for m in saved["outputs"]}
    batch = 1 if s.get("sequential") else s["max_num_seqs"]
    cost_model = saved["replay_cost_model"]
    add_replayed(table, replay_live(runs, prompts, s["num_speculative_tokens"],
                                    lambda run: run_schedule(run, batch), cost_model,
                                    lambda msg: print(msg, flush=True),
                                    saved.get("lookahead_outputs")))
    saved["replay_ceiling"] = replay_ceiling(runs, prompts, s["num_speculative_tokens"],
                                             lambda run: run_schedule(run, batch),
                                             saved.get("lookahead_outputs"))
    print(format_replay_gaps(table, cost_model, saved["replay_ceiling"]))
    write_results(path, saved, say=lambda msg: print(msg, flush=True), tag="bench")
    return 0


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The options ``bench`` and ``demo`` share: methods, rounds, draft bound, dtype."""
    ap.add_argument("--methods", nargs="+", default=["none", "vllm-ngram", "vllm-suffix", "specdraft"],
                    choices=list(live.method_configs()), metavar="METHOD",
                    help=f"methods to compare, among {', '.join(live.method_configs())}; 'none' "
                    "(no speculation) is required: it is the reference")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="whole rounds run first, untimed and not reported: the CPU build makes "
                    "its matmul kernels per batch shape on first use (about 1.3 ms per layer "
                    "and new shape), and speculation runs many shapes")
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=8,
                    help="draft bound of every speculative method")
    ap.add_argument("--dtype", choices=live.DTYPES, default="float32",
                    help="target dtype (bfloat16 outputs may drift from no speculation: the share "
                    "of identical requests is reported instead)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specdraft bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--traces", help="trace JSONL from specdraft record (its prompts and "
                    "max_tokens are used; outputs are checked against it); required unless "
                    "--replay-only")
    ap.add_argument("--model", help="model name or folder (default: the trace's model)")
    add_run_arguments(ap)
    ap.add_argument("--workload", nargs="+", help="use only these workloads' requests")
    ap.add_argument("--limit", type=int, help="use only the first N requests")
    ap.add_argument("--max-tokens", type=int, help="cap every request's output tokens")
    ap.add_argument("--sequential", action="store_true", help="one request at a time (batch 1)")
    ap.add_argument("--max-model-len", type=int, default=8192, help="vLLM's max_model_len")
    ap.add_argument("--max-num-seqs", type=int, default=8,
                    help="vLLM's batch limit: requests in flight together (all are sent at once)")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="run engines one at a time even when they fit in memory together")
    ap.add_argument("--json", required=True, help="where the results go (a .png chart beside it)")
    ap.add_argument("--log", help="where vLLM's own output goes (default: next to --json, .log)")
    ap.add_argument("--replay-only", action="store_true", help="no engine: replay the live outputs "
                    "saved in --json again (its settings are used) and rewrite its replayed counts")
    args = ap.parse_args(argv)
    if args.replay_only:
        return replay_saved(args.json)
    if not args.traces:
        ap.error("--traces is required (unless --replay-only)")

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
    records, skipped = select_requests(records, args.workload, args.limit, args.max_model_len)
    if skipped:
        progress(f"[bench] skipping {skipped} requests longer than --max-model-len")
    name = args.model or records[0].get("model") or "smollm2-135m"
    path = resolve_model(name)
    prompts = [r["prompt_token_ids"] for r in records]
    maxes = request_limits(records, args.max_tokens)
    progress(f"[bench] {len(records)} requests from {args.traces}, model {name}, methods "
             f"{' '.join(args.methods)}, {args.rounds} rounds")
    try:
        plan = engine_plan(path, len(args.methods), progress, args.dtype)
    except live.MemoryPlanError as e:
        print(f"specdraft bench: {e}", file=sys.stderr)
        return 2
    if args.one_at_a_time:
        plan.mode = "one-at-a-time"
    log_path = args.log or os.path.splitext(args.json)[0] + ".log"
    progress(f"[bench] vLLM's output goes to {log_path}")
    with live.engine_log(log_path) as say:
        engines = start_engines(path, args.methods, args.num_speculative_tokens, say, plan,
                                max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                                dtype=args.dtype)
        try:
            runs = run_interleaved(engines, prompts, maxes, args.rounds, say,
                                   sequential=args.sequential, methods=args.methods,
                                   warmup_rounds=args.warmup_rounds, bar="[bench] runs")
            say("[bench] no speculation past the limits (untimed), for the replay ...")
            lookahead = lookahead_outputs(engines, prompts, maxes, args.num_speculative_tokens)
        except live.MemoryPlanError as e:
            say(f"specdraft bench: {e}")
            return 2
        finally:
            engines.close()
    recorded = [r["output_token_ids"][:n] for r, n in zip(records, maxes)]
    table = summarize(runs, k=args.num_speculative_tokens)
    from specdraft.adapters import vllm_adapter
    cost_model = vllm_adapter().cpu_cost_model(args.dtype)  # what the live engine planned with
    batch = 1 if args.sequential else args.max_num_seqs
    add_replayed(table, replay_live(runs, prompts, args.num_speculative_tokens,
                                    lambda run: run_schedule(run, batch), cost_model, progress,
                                    lookahead))
    ceiling = replay_ceiling(runs, prompts, args.num_speculative_tokens,
                             lambda run: run_schedule(run, batch), lookahead)
    matches_trace = all(o == e for o, e in zip(runs["none"][0].outputs, recorded))
    title = (f"{name}: {len(records)} requests, {batch} at a time, k={args.num_speculative_tokens}, "
             f"{args.rounds} interleaved rounds after {args.warmup_rounds} untimed ({plan.mode}), "
             f"caches cleared before every run, "
             f"{args.dtype} CPU")
    print()
    print(title)
    print(format_live_table(table))
    if steps := format_steps_table(table):
        print(steps)
    print(format_replay_gaps(table, cost_model, ceiling))
    print(f"no-speculation outputs identical to the trace: {'yes' if matches_trace else 'NO'}")
    write_results(args.json, {"settings": vars(args), "memory_plan": vars(plan), "table": table,
                              "replay_cost_model": cost_model, "replay_ceiling": ceiling,
                              # every round's outputs, to replay the run again offline
                              "outputs": {m: [x.outputs for x in rs] for m, rs in runs.items()},
                              "lookahead_outputs": lookahead,
                              "no_spec_matches_trace": matches_trace},
                  plot=lambda png: plot_live(table, png, title), say=progress, tag="bench")
    costs = merged_pass_costs(table)
    if costs:
        png = os.path.splitext(args.json)[0] + "-pass-costs.png"
        plot_pass_costs(costs, args.num_speculative_tokens, png,
                        f"specdraft's passes: {title}")
        progress(f"[bench] pass costs: {png}")
    # float32 must be token-identical to no speculation; bfloat16 only reports the share
    exact = args.dtype == "float32"
    return 0 if not exact or all(t["identical_to_no_spec"] for t in table.values()) else 1
