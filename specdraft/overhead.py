"""``specdraft overhead``: proposer cost per request-step, each method driven the way vLLM drives it.

Every method is called through the object vLLM's model runner calls, with the arguments it passes
(vLLM internals are reached only through specdraft's version adapter):

  specdraft  ``SuffixProposer.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)``,
             preceded by the runner hooks' events (step begin with the requests that ended, the
             bound StepView over the runner's batch): the whole path a user pays, one native call
             per step inside. Its native-core-only time (inside that call) is reported beside it,
             so the Python share is visible.
  arctic     vLLM 0.32's ``SuffixDecodingProposer.propose(k, input_batch, sampled_token_ids)``
             (arctic-inference's C++ suffix tree), built by its own ``__init__``; max_tree_depth
             24, vLLM's defaults max_spec_factor 1.0 and min_token_prob 0.1.
  ngram      vLLM's ``NgramProposer.propose(k, sampled_token_ids, num_tokens_no_spec,
             token_ids_cpu)`` (numba batch path), built by its own ``__init__`` (JIT warm-up),
             prompt_lookup_min/max 2/5.

The runner's own work (writing the sampled tokens into its token buffer, building the scheduler
output) is done for every method outside the timed call.

Workload (all methods see the same token streams):

* Token streams come from a seeded generator (``StreamGen``): a Zipf(1.1) unigram over the
  vocabulary mixed with a sparse first-order Markov chain (each token has 8 likely successors,
  Zipf-weighted), interrupted by copied spans: from a pool of shared "documents" (boilerplate,
  templates: repeats *across* requests, what a global cache can exploit) and from the request's
  own prompt and output so far (repeats *within* a request: quoting, code edits). Span lengths are
  geometric (mean ~24 tokens). Drafts therefore hit sometimes, not always.
* The global caches are pre-filled before timing with earlier synthetic requests whose outputs
  total ``--global-cache-tokens`` (specdraft: start/extend/finish; arctic: start_request /
  add_active_response / stop_request with max_cached_requests sized to the same token budget).
* The measured batch: each size in ``--batches`` is one run, with that many requests of
  ``--prompt-tokens`` prompts and pre-generated ground-truth outputs of ``--output-tokens``.
  Each step, every live request appends what a verifier would have emitted after the method's
  previous draft: the longest draft prefix that matches the ground truth, plus one token (so each
  method advances at its own acceptance rate over the same streams; the report includes tokens
  per step). A request that ends is reported to specdraft with the next step's events (vLLM's
  ``finished_req_ids``), so feeding it to the global cache is inside the timed step; arctic's
  ``stop_request`` is timed separately (``finish_ms_per_request``).
* Methods alternate in blocks of ``--block-steps`` steps (A B C A B C ...); each block's time
  divided by its request-steps is one sample. On a shared machine single timings swing widely:
  the report gives each method's fastest block and median block, and specdraft's ratios to the
  peers as the ratio of fastest blocks and the median of interleaved block ratios.

Usage: ``specdraft overhead --json FILE`` (or ``python -m specdraft.overhead``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

from specdraft.cli import parser as cli_parser
from specdraft.live import cpu_pressure
from specdraft.results import write_results

DEFAULTS = dict(prompt_tokens=4096, output_tokens=1024, global_cache_tokens=1_000_000, budget=16,
                batches="1,16,64,256", block_steps=8, vocab=32000, max_depth=24, seed=0, ngram_min=2, ngram_max=5,
                prefill_prompt_tokens=64)


def log(msg: str) -> None:
    print(f"[overhead] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ streams
class StreamGen:
    """Seeded synthetic token streams: Zipf unigram + sparse Markov chain + copied spans."""

    def __init__(self, seed: int, vocab: int = 32000, zipf_a: float = 1.1, n_succ: int = 8,
                 shared_docs: int = 300, p_shared: float = 0.30, p_own: float = 0.25,
                 mean_span: float = 24.0, mean_run: float = 16.0, p_markov: float = 0.7):
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab
        ranks = np.arange(1, vocab + 1, dtype=np.float64)
        w = ranks ** -zipf_a
        self.uni_cdf = np.cumsum(w / w.sum())
        self.perm = self.rng.permutation(vocab).astype(np.int64)
        # successors: per token, n_succ tokens drawn from the unigram, Zipf-weighted choice
        self.succ = self.perm[np.minimum(np.searchsorted(self.uni_cdf, self.rng.random((vocab, n_succ))),
                                         vocab - 1)]
        sw = np.arange(1, n_succ + 1, dtype=np.float64) ** -1.0
        self.succ_cdf = np.cumsum(sw / sw.sum())
        self.p_shared, self.p_own = p_shared, p_own
        self.mean_span, self.mean_run, self.p_markov = mean_span, mean_run, p_markov
        self.docs: list[list[int]] = []
        for _ in range(shared_docs):
            n = int(self.rng.integers(128, 2048))
            self.docs.append(self._markov(n, int(self.perm[0])))

    def _unigram(self, n: int) -> np.ndarray:
        return self.perm[np.minimum(np.searchsorted(self.uni_cdf, self.rng.random(n)), self.vocab - 1)]

    def _markov(self, n: int, prev: int) -> list[int]:
        out: list[int] = []
        coin = self.rng.random(n)
        pick = np.searchsorted(self.succ_cdf, self.rng.random(n)).tolist()
        uni = self._unigram(n).tolist()
        succ = self.succ
        pm = self.p_markov
        for i in range(n):
            prev = int(succ[prev, pick[i]]) if coin[i] < pm else uni[i]
            out.append(prev)
        return out

    def sequence(self, n: int, own: list[int] | None = None) -> list[int]:
        """n tokens; ``own`` (e.g. the prompt) is also a source of copied spans."""
        rng = self.rng
        out: list[int] = []
        base = own or []
        while len(out) < n:
            r = rng.random()
            span = 1 + int(rng.geometric(1.0 / self.mean_span))
            if r < self.p_shared:
                d = self.docs[int(rng.integers(len(self.docs)))]
                a = int(rng.integers(len(d)))
                out.extend(d[a:a + span])
            elif r < self.p_shared + self.p_own and (base or out):
                src = base if (base and (not out or rng.random() < 0.5)) else out
                a = int(rng.integers(len(src)))
                out.extend(src[a:a + span])
            else:
                run = 1 + int(rng.geometric(1.0 / self.mean_run))
                out.extend(self._markov(run, out[-1] if out else int(self._unigram(1)[0])))
        return out[:n]


# ------------------------------------------------------------------------------ methods
def accepted_len(draft, truth: list[int], pos: int) -> int:
    n = 0
    for t in draft:
        if pos + n >= len(truth) or t != truth[pos + n]:
            break
        n += 1
    return n


class TimedMethod:
    """One proposer under test: its own copy of the batch state, advanced block by block."""

    name = ""

    def __init__(self, prompts: list[list[int]], truths: list[list[int]], budget: int):
        self.prompts, self.truths, self.budget = prompts, truths, budget
        self.n = len(prompts)
        self.pos = [0] * self.n                 # output tokens appended so far
        self.pending = [[t[0]] for t in truths]  # tokens the next step appends
        self.live = list(range(self.n))
        self.block_us: list[float] = []         # us per request-step, one per block (wall)
        self.block_cpu_us: list[float] = []     # same, thread CPU time
        self.step_ns = 0
        self.cpu_ns = 0
        self.request_steps = 0
        self.appended = 0
        self.drafted = 0
        self.accepted = 0
        self.finish_ns = 0
        self.finished = 0

    def done(self) -> bool:
        return not self.live

    # subclasses: prepare(live), untimed runner work before a step; step(live) -> one draft
    # (token list) per live request, timed; finish(i), timed separately
    def prepare(self, live: list[int]) -> None:
        pass

    def step(self, live: list[int]) -> list:
        raise NotImplementedError

    def finish(self, i: int) -> None:
        pass

    def run_block(self, steps: int) -> None:
        ns = 0
        cpu = 0
        rs = 0
        for _ in range(steps):
            if not self.live:
                break
            live = self.live
            self.prepare(live)
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            drafts = self.step(live)
            ns += time.perf_counter_ns() - t0
            cpu += time.thread_time_ns() - c0
            rs += len(live)
            still = []
            for j, i in enumerate(live):
                self.appended += len(self.pending[i])
                self.pos[i] += len(self.pending[i])
                d = drafts[j]
                truth = self.truths[i]
                left = len(truth) - self.pos[i]
                if left <= 0:
                    t1 = time.perf_counter_ns()
                    self.finish(i)
                    self.finish_ns += time.perf_counter_ns() - t1
                    self.finished += 1
                    continue
                acc = accepted_len(d, truth, self.pos[i])
                self.drafted += len(d)
                self.accepted += acc
                self.pending[i] = truth[self.pos[i]:self.pos[i] + min(acc + 1, left)]
                still.append(i)
            self.live = still
        if rs:
            self.step_ns += ns
            self.cpu_ns += cpu
            self.request_steps += rs
            self.block_us.append(ns / 1e3 / rs)
            self.block_cpu_us.append(cpu / 1e3 / rs)

    def summary(self) -> dict:
        steps = max(self.request_steps, 1)
        out = {
            "us_per_request_step": round(statistics.median(self.block_us), 3) if self.block_us else None,
            "us_per_request_step_mean": round(self.step_ns / 1e3 / steps, 3),
            "cpu_us_per_request_step": round(statistics.median(self.block_cpu_us), 3) if self.block_cpu_us else None,
            "cpu_us_per_request_step_mean": round(self.cpu_ns / 1e3 / steps, 3),
            "blocks": len(self.block_us),
            "request_steps": self.request_steps,
            "tokens_per_step": round(self.appended / steps, 3),
            # the same cost per token the verifier emitted (methods that draft better advance
            # more tokens per step)
            "us_per_output_token": round(statistics.median(self.block_us) * steps / max(self.appended, 1), 3)
            if self.block_us else None,
            "cpu_us_per_output_token": round(statistics.median(self.block_cpu_us) * steps / max(self.appended, 1), 3)
            if self.block_cpu_us else None,
            "draft_tokens_per_step": round(self.drafted / steps, 3),
            "accepted_per_step": round(self.accepted / steps, 3),
        }
        return out


def _ids(n: int) -> list[str]:
    return [f"req{i}" for i in range(n)]


class _RunnerRows:
    """The runner side every vLLM-driven method shares: the token buffer the model runner keeps
    (``token_ids_cpu``, ``num_tokens_no_spec``) with the step's sampled tokens written into it
    before the proposer is called (untimed: vLLM does it whatever the method)."""

    def __init__(self, adapter, prompts: list[list[int]], max_model_len: int):
        n = len(prompts)
        buf = np.zeros((n, max_model_len), dtype=np.int32)
        for i, p in enumerate(prompts):
            buf[i, :len(p)] = p
        self.batch = adapter.BatchStandIn(buf, np.array([len(p) for p in prompts], dtype=np.int32),
                                          _ids(n))

    def write(self, live: list[int], pending: list[list[int]], n: int) -> list[list[int]]:
        b = self.batch
        sampled: list[list[int]] = [[] for _ in range(n)]  # rows that ended stay, empty
        for i in live:
            t = pending[i]
            k = int(b.num_tokens_no_spec[i])
            b.token_ids_cpu[i, k:k + len(t)] = t
            b.num_tokens_no_spec[i] = k + len(t)
            sampled[i] = t
        return sampled


class TimedSpecdraft(TimedMethod):
    """specdraft's ``SpecdraftProposer.propose``, called as vLLM 0.32's runner calls it, with the
    runner hooks' events (step begin with finished requests, the bound StepView)."""

    name = "specdraft"

    def __init__(self, prompts, truths, budget, args, prefill, adapter):
        super().__init__(prompts, truths, budget)
        from types import SimpleNamespace

        from specdraft.plugins.vllm import SuffixProposer

        self.adapter = adapter
        self.max_model_len = args.prompt_tokens + args.output_tokens + budget + 8
        config = SimpleNamespace(  # the VllmConfig fields specdraft's engine_facts reads
            speculative_config=SimpleNamespace(
                num_speculative_tokens=budget, specdraft_options={
                    "global_cache_tokens": args.global_cache_tokens, "max_depth": args.max_depth,
                    "native": True, "adaptive": args.specdraft_adaptive, "cost_model": "gpu"}),
            model_config=SimpleNamespace(max_model_len=self.max_model_len, dtype=None,
                                         get_vocab_size=lambda: args.vocab))
        self.prop = SuffixProposer(config)
        drafter = self.prop.drafter  # native: True above: make_core refuses a missing extension
        engine, core = self.prop.steps.engine  # the native engine step propose calls
        self.engine = engine  # counts the time inside its calls (total_ns)
        t0 = time.perf_counter()
        for k, (p, o) in enumerate(prefill):
            rid = f"pre{k}"
            drafter.start(rid, p)
            drafter.extend(rid, o)
            drafter.finish(rid)
        self.prefill_s = time.perf_counter() - t0
        self.prefill_tokens = core.global_tokens()
        self.mem_after_prefill = core.memory_bytes()
        self.runner = _RunnerRows(adapter, prompts, self.max_model_len)
        self.scheduled: dict[str, list[int]] = {}  # req_id -> draft verified this step
        self.last_rows: list[list[int]] = []
        self.finished_events: list[tuple[str, bool]] = []
        self.core_ns_blocks: list[float] = []

    def prepare(self, live):
        self.sampled = self.runner.write(live, self.pending, self.n)
        ids = self.runner.batch.req_ids
        last = self.last_rows  # the drafts verified this step (the scheduler output's)
        # what vLLM has before the step: the scheduler's output and the runner (stand-ins)
        self.scheduled = {ids[i]: last[i] if last else [] for i in live}
        self.num_scheduled = len(live) + sum(len(d) for d in self.scheduled.values())
        self.standins = self.adapter.benchmark_step_view(self.runner.batch, self.scheduled,
                                                         self.budget)
        self.events, self.finished_events = self.finished_events, []

    def step(self, live):
        # timed from here: what the runner hooks build and call each step, then propose
        p, b, s = self.prop, self.runner.batch, self.standins
        p.specdraft_step_begin(self.adapter.benchmark_step_begin(self.events, self.num_scheduled))
        p.specdraft_bind(type(s)(s.runner, s.scheduler_output))
        rows = p.propose(self.sampled, b.num_tokens_no_spec, b.token_ids_cpu, slot_mappings=None)
        p.specdraft_bind(None)
        self.last_rows = rows
        return [rows[i] for i in live]

    def finish(self, i):
        # reported with the next step's begin, as vLLM does (the drafter finishes it in that step)
        self.finished_events.append((self.runner.batch.req_ids[i], False))

    def run_block(self, steps):
        ns0, rs0 = self.engine.total_ns, self.request_steps
        super().run_block(steps)
        if self.request_steps > rs0:
            self.core_ns_blocks.append((self.engine.total_ns - ns0) / 1e3 / (self.request_steps - rs0))

    def summary(self):
        out = super().summary()
        core = self.prop.drafter.core
        gt = self.prefill_tokens
        out.update({
            "driven_by": "specdraft.plugins.vllm.SuffixProposer.propose with the runner hooks' events",
            "native_core_us_per_request_step": round(statistics.median(self.core_ns_blocks), 3)
            if self.core_ns_blocks else None,
            "native_core_us_per_request_step_min": round(min(self.core_ns_blocks), 3)
            if self.core_ns_blocks else None,
            "errors": self.prop.figures["errors"],
            "prefill_s": round(self.prefill_s, 3),
            "global_tokens_after_prefill": gt,
            "memory_bytes_after_prefill": self.mem_after_prefill,
            "bytes_per_cached_token": round(self.mem_after_prefill / gt, 2) if gt else None,
            "global_nodes": core.global_nodes(),
        })
        return out


class TimedArctic(TimedMethod):
    """vLLM 0.32's ``SuffixDecodingProposer.propose`` (arctic-inference's suffix cache)."""

    name = "arctic"

    def __init__(self, prompts, truths, budget, args, prefill, adapter):
        super().__init__(prompts, truths, budget)
        self.adapter = adapter
        out_len = max(1, args.output_tokens)
        self.max_cached = max(1, math.ceil(args.global_cache_tokens / out_len))
        self.max_model_len = args.prompt_tokens + args.output_tokens + budget + 8
        self.prop = adapter.suffix_proposer(budget, self.max_model_len,
                                            suffix_decoding_max_tree_depth=args.max_depth,
                                            suffix_decoding_max_cached_requests=self.max_cached)
        cache = self.prop.suffix_cache
        t0 = time.perf_counter()
        cached = []
        for k, (p, o) in enumerate(prefill):
            rid = f"pre{k}"
            cache.start_request(rid, p)
            cache.add_active_response(rid, o.tolist())
            cache.stop_request(rid)
            cached.append(len(o))
        self.prefill_s = time.perf_counter() - t0
        self.prefill_tokens = sum(cached[-self.max_cached:])
        self.runner = _RunnerRows(adapter, prompts, self.max_model_len)

    def prepare(self, live):
        self.sampled = self.runner.write(live, self.pending, self.n)

    def step(self, live):
        rows = self.adapter.suffix_propose(self.prop, self.budget, self.runner.batch, self.sampled)
        return [rows[i] for i in live]

    def finish(self, i):
        # vLLM's runner stops the request in the suffix cache when it leaves the batch
        self.prop.suffix_cache.stop_request(self.runner.batch.req_ids[i])

    def summary(self):
        out = super().summary()
        out.update({
            "driven_by": "vllm SuffixDecodingProposer.propose",
            "max_cached_requests": self.max_cached,
            "prefill_s": round(self.prefill_s, 3),
            "global_tokens_after_prefill": self.prefill_tokens,
            "finish_ms_per_request": round(self.finish_ns / 1e6 / max(self.finished, 1), 3),
        })
        return out


class TimedNgram(TimedMethod):
    """vLLM's ``NgramProposer.propose`` (numba batch path), built by its own ``__init__``."""

    name = "ngram"

    def __init__(self, prompts, truths, budget, args, adapter):
        super().__init__(prompts, truths, budget)
        self.adapter = adapter
        self.max_model_len = args.prompt_tokens + args.output_tokens + budget + 8
        t0 = time.perf_counter()
        self.prop = adapter.ngram_proposer(budget, args.ngram_min, args.ngram_max,
                                           self.max_model_len, max(self.n, 1))
        self.jit_s = time.perf_counter() - t0
        self.prefill_s = 0.0
        self.runner = _RunnerRows(adapter, prompts, self.max_model_len)

    def prepare(self, live):
        self.sampled = self.runner.write(live, self.pending, self.n)

    def step(self, live):
        b = self.runner.batch
        rows = self.adapter.ngram_propose(self.prop, self.budget, self.sampled,
                                          b.num_tokens_no_spec, b.token_ids_cpu)
        return [rows[i] for i in live]

    def summary(self):
        out = super().summary()
        out.update({"prompt_lookup_min": self.prop.min_n, "prompt_lookup_max": self.prop.max_n,
                    "init_with_numba_jit_s": round(self.jit_s, 3),
                    "driven_by": "vllm NgramProposer.propose"})
        return out


# ------------------------------------------------------------------------------- driver
METHODS = ("specdraft", "arctic", "ngram")


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


def _fmt(v, nd=2):
    return "-" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}")


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


def format_overhead_table(report: dict) -> str:
    """Markdown table: us per request-step by method and batch, and specdraft's ratios."""
    lines = ["| batch | specdraft | (native core) | arctic | ngram | specdraft / arctic | "
             "specdraft / ngram | tokens per step (specdraft / arctic / ngram) |",
             "|---|---|---|---|---|---|---|---|"]
    for batch, b in report["batches"].items():
        r, q = b["results"], b["ratios"]

        def us(name, key="us_per_request_step_min"):
            return _fmt(r.get(name, {}).get(key))

        def ratio(peer):
            x = q.get(f"specdraft_over_{peer}", {})
            return f"{_fmt(x.get('ratio_of_minimums'))} ({_fmt(x.get('median_of_block_ratios'))})"

        lines.append(f"| {batch} | {us('specdraft')} | "
                     f"{us('specdraft', 'native_core_us_per_request_step_min')} | {us('arctic')} | "
                     f"{us('ngram')} | {ratio('arctic')} | {ratio('ngram')} | "
                     f"{' / '.join(us(m, 'tokens_per_step') for m in METHODS)} |")
    lines.append("")
    lines.append("us per request-step, fastest block of each method; ratios: of the fastest "
                 "blocks (median of interleaved block ratios in brackets)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
