"""``specdraft overhead``: proposer CPU cost per request-step, measured side by side.

One run measures, interleaved, the microseconds a proposer spends per request per decoding step
(append the step's accepted tokens, then draft the next guess) for:

  specdraft  the native ``SuffixCore`` (chain drafts), driven through ``step_batch`` over the batch
  arctic     arctic-inference's ``SuffixDecodingCache`` (the C++ suffix tree behind vLLM's
             ``suffix`` method), driven by vLLM 0.32's own ``SuffixDecodingProposer.propose``
             (add_active_response + speculate per request, pattern = last max_tree_depth tokens
             sliced from the runner's token buffer), max_tree_depth 24, max_spec_tokens 16,
             vLLM's defaults max_spec_factor 1.0 and min_token_prob 0.1
  ngram      vLLM's ``NgramProposer.propose`` (numba batch path), prompt_lookup_min/max from the
             flags (default 2/5), num_speculative_tokens 16. The proposer object is built with
             ``NgramProposer.__new__`` and the attributes its ``__init__`` derives from a
             VllmConfig (a real VllmConfig needs a model config); ``propose`` itself is vLLM's.
             Its "append" is writing the new tokens into the runner's token buffer.

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
* The measured batch: ``--batch`` requests with ``--prompt-tokens`` prompts and pre-generated
  ground-truth outputs of ``--output-tokens``. Each step, every live request appends what a
  verifier would have emitted after the method's previous draft: the longest draft prefix that
  matches the ground truth, plus one token (so each method advances at its own acceptance rate
  over the same streams; the report includes tokens per step).
* Methods alternate in blocks of ``--block-steps`` steps (A B C A B C ...); each block's time
  divided by its request-steps is one sample; the report gives the median over blocks and the
  overall mean. specdraft feeds a finished request to its global cache in ``finish`` (arctic
  does that incrementally during decoding), so its finish cost is reported too, and folded into
  ``us_per_request_step_incl_finish``.

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
from typing import Callable

import numpy as np

DEFAULTS = dict(prompt_tokens=4096, output_tokens=1024, global_cache_tokens=1_000_000, budget=16,
                batch=64, block_steps=8, vocab=32000, max_depth=24, seed=0, ngram_min=2, ngram_max=5,
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


class Method:
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


class SpecdraftMethod(Method):
    name = "specdraft"

    def __init__(self, prompts, truths, budget, args, prefill):
        super().__init__(prompts, truths, budget)
        from specdraft.proposers import _suffix_native as native
        if not getattr(native, "AVAILABLE", False):
            raise RuntimeError("specdraft.proposers._suffix_native is the placeholder build")
        self.core = native.SuffixCore(max_depth=args.max_depth, global_cache_tokens=args.global_cache_tokens)
        t0 = time.perf_counter()
        for k, (p, o) in enumerate(prefill):
            h = -1 - k
            self.core.start(h, p)
            self.core.extend(h, o)
            self.core.finish(h)
        self.prefill_s = time.perf_counter() - t0
        self.prefill_tokens = self.core.global_tokens()
        self.mem_after_prefill = self.core.memory_bytes()
        t0 = time.perf_counter()
        for i, p in enumerate(prompts):
            self.core.start(i, p)
        self.start_s = time.perf_counter() - t0
        self.local_bytes = self.core.requests_memory_bytes() / max(self.n, 1)

    def step(self, live):
        res = self.core.step_batch(live, [self.pending[i] for i in live], self.budget)
        return [r[0] for r in res]

    def finish(self, i):
        self.core.finish(i)

    def summary(self):
        out = super().summary()
        gt = self.prefill_tokens
        out.update({
            "prefill_s": round(self.prefill_s, 3),
            "prefill_tokens_per_s": round(gt / self.prefill_s) if self.prefill_s else None,
            "start_ms_per_request": round(self.start_s * 1e3 / max(self.n, 1), 3),
            "global_tokens_after_prefill": gt,
            "global_nodes": self.core.global_nodes(),
            "local_index_bytes_per_request": round(self.local_bytes),
            "memory_bytes_after_prefill": self.mem_after_prefill,
            "bytes_per_cached_token": round(self.mem_after_prefill / gt, 2) if gt else None,
            "bytes_per_cached_token_at_end": round(self.core.memory_bytes() / self.core.global_tokens(), 2)
            if self.core.global_tokens() else None,
            "finish_ms_per_request": round(self.finish_ns / 1e6 / max(self.finished, 1), 3),
            "us_per_request_step_incl_finish": round((self.step_ns + self.finish_ns) / 1e3
                                                     / max(self.request_steps, 1), 3),
        })
        return out


class _InputBatch:
    """The part of vLLM's InputBatch that SuffixDecodingProposer.propose reads."""

    def __init__(self, prompts, max_model_len):
        n = len(prompts)
        self.token_ids_cpu = np.zeros((n, max_model_len), dtype=np.int32)
        self.num_prompt_tokens = np.array([len(p) for p in prompts], dtype=np.int32)
        self.num_tokens_no_spec = self.num_prompt_tokens.copy()
        for i, p in enumerate(prompts):
            self.token_ids_cpu[i, :len(p)] = p
        self.req_ids: list[str] = []
        self.req_id_to_index: dict[str, int] = {}


class ArcticMethod(Method):
    name = "arctic"

    def __init__(self, prompts, truths, budget, args, prefill):
        super().__init__(prompts, truths, budget)
        from arctic_inference.suffix_decoding import SuffixDecodingCache
        out_len = max(1, args.output_tokens)
        self.max_cached = max(1, math.ceil(args.global_cache_tokens / out_len))
        self.cache = SuffixDecodingCache(max_tree_depth=args.max_depth, max_cached_requests=self.max_cached)
        self.max_model_len = args.prompt_tokens + args.output_tokens + budget + 8
        self.via_vllm = False
        try:
            from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer
            prop = SuffixDecodingProposer.__new__(SuffixDecodingProposer)
            prop.num_speculative_tokens = budget
            prop.max_tree_depth = args.max_depth
            prop.max_spec_factor = 1.0       # vLLM default suffix_decoding_max_spec_factor
            prop.min_token_prob = 0.1        # vLLM default suffix_decoding_min_token_prob
            prop.max_model_len = self.max_model_len
            prop.suffix_cache = self.cache
            self.prop = prop
            self.via_vllm = True
        except Exception as e:  # vLLM missing: same calls, written out
            log(f"arctic: vLLM's SuffixDecodingProposer unavailable ({e!r}); driving the cache directly")
            self.prop = None
        t0 = time.perf_counter()
        cached = []
        for k, (p, o) in enumerate(prefill):
            rid = f"pre{k}"
            self.cache.start_request(rid, p)
            self.cache.add_active_response(rid, o.tolist())
            self.cache.stop_request(rid)
            cached.append(len(o))
        self.prefill_s = time.perf_counter() - t0
        self.prefill_tokens = sum(cached[-self.max_cached:])
        self.batch = _InputBatch(prompts, self.max_model_len)
        self.batch.req_ids = [f"req{i}" for i in range(self.n)]
        self.batch.req_id_to_index = {r: i for i, r in enumerate(self.batch.req_ids)}
        t0 = time.perf_counter()
        for i, p in enumerate(prompts):  # what propose() does on a request's first step
            self.cache.start_request(self.batch.req_ids[i], np.asarray(p, dtype=np.int32))
        self.start_s = time.perf_counter() - t0
        self.mem = None
        try:
            self.local_bytes = sum(int(t.estimate_memory()) for t in self.cache._local_trees.values()) / max(self.n, 1)
        except Exception:
            self.local_bytes = None

    def prepare(self, live):
        # the model runner writes the sampled tokens into its buffer before proposing
        b = self.batch
        for i in live:
            t = self.pending[i]
            n = int(b.num_tokens_no_spec[i])
            b.token_ids_cpu[i, n:n + len(t)] = t
            b.num_tokens_no_spec[i] = n + len(t)
        # vLLM's runner passes every batch row; rows without sampled tokens are skipped
        self.sampled = [[] for _ in range(self.n)]
        for i in live:
            self.sampled[i] = self.pending[i]

    def step(self, live):
        b, sampled = self.batch, self.sampled
        if self.prop is not None:
            rows = self.prop.propose(self.budget, b, sampled)
        else:
            rows = [[] for _ in range(self.n)]
            for i in live:
                rid = b.req_ids[i]
                self.cache.add_active_response(rid, sampled[i])
                n = int(b.num_tokens_no_spec[i])
                pattern = b.token_ids_cpu[i, max(0, n - self.cache.max_tree_depth):n]
                d = self.cache.speculate(rid, pattern, max_spec_tokens=min(self.budget, self.max_model_len - n - 1),
                                         max_spec_factor=1.0, min_token_prob=0.1)
                rows[i] = d.token_ids
        return [rows[i] for i in live]

    def finish(self, i):
        self.cache.stop_request(self.batch.req_ids[i])

    def summary(self):
        out = super().summary()
        out.update({
            "driven_by": "vllm SuffixDecodingProposer.propose" if self.via_vllm else "direct calls",
            "max_cached_requests": self.max_cached,
            "prefill_s": round(self.prefill_s, 3),
            "prefill_tokens_per_s": round(self.prefill_tokens / self.prefill_s) if self.prefill_s else None,
            "start_ms_per_request": round(self.start_s * 1e3 / max(self.n, 1), 3),
            "global_tokens_after_prefill": self.prefill_tokens,
            "finish_ms_per_request": round(self.finish_ns / 1e6 / max(self.finished, 1), 3),
        })
        if self.local_bytes is not None:
            out["local_index_bytes_per_request"] = round(self.local_bytes)
        if self.mem is not None:
            out["estimate_memory_bytes_after_prefill"] = self.mem
            out["bytes_per_cached_token"] = round(self.mem / self.prefill_tokens, 2) if self.prefill_tokens else None
        return out


class NgramMethod(Method):
    name = "ngram"

    def __init__(self, prompts, truths, budget, args):
        super().__init__(prompts, truths, budget)
        from vllm.v1.spec_decode.ngram_proposer import NgramProposer
        self.max_model_len = args.prompt_tokens + args.output_tokens + budget + 8
        p = NgramProposer.__new__(NgramProposer)
        # what NgramProposer.__init__ derives from the VllmConfig
        p.min_n = args.ngram_min
        p.max_n = args.ngram_max
        p.k = budget
        p.max_model_len = self.max_model_len
        p.valid_ngram_draft = np.zeros((self.n, budget), dtype=np.int32)
        p.valid_ngram_num_drafts = np.zeros((self.n,), dtype=np.int32)
        p.num_tokens_threshold = 8192
        p.num_numba_thread_available = 1  # min(1, cpu_count // 2) // tp_size in vLLM 0.32
        self.prop = p
        self.token_ids_cpu = np.zeros((self.n, self.max_model_len), dtype=np.int32)
        self.num_tokens = np.zeros(self.n, dtype=np.int32)
        for i, pr in enumerate(prompts):
            self.token_ids_cpu[i, :len(pr)] = pr
            self.num_tokens[i] = len(pr)
        t0 = time.perf_counter()
        # JIT warm-up (vLLM's __init__ does the same with a dummy batch)
        p.propose(budget, [[1]] * self.n, self.num_tokens.copy(), self.token_ids_cpu)
        self.jit_s = time.perf_counter() - t0
        self.prefill_s = 0.0

    def step(self, live):
        # runner: write the sampled tokens into its buffer; then propose over the batch rows.
        # Finished requests stay as rows with no sampled tokens (skipped by propose).
        sampled = [[] for _ in range(self.n)]
        tok, num = self.token_ids_cpu, self.num_tokens
        for i in live:
            t = self.pending[i]
            n = int(num[i])
            tok[i, n:n + len(t)] = t
            num[i] = n + len(t)
            sampled[i] = t
        drafts = self.prop.propose(self.budget, sampled, num, tok)
        return [drafts[i] for i in live]

    def summary(self):
        out = super().summary()
        out.update({"prompt_lookup_min": self.prop.min_n, "prompt_lookup_max": self.prop.max_n,
                    "numba_jit_warmup_s": round(self.jit_s, 3),
                    "driven_by": "vllm NgramProposer.propose (object built without a VllmConfig)"})
        return out


# ------------------------------------------------------------------------------- driver
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specdraft overhead",
                                description="Proposer CPU cost per request-step: specdraft vs arctic-inference "
                                            "suffix decoding vs vLLM n-gram, interleaved in one run.")
    p.add_argument("--json", metavar="FILE", help="write the results here (JSON)")
    p.add_argument("--prompt-tokens", type=int, default=DEFAULTS["prompt_tokens"])
    p.add_argument("--output-tokens", type=int, default=DEFAULTS["output_tokens"])
    p.add_argument("--global-cache-tokens", type=int, default=DEFAULTS["global_cache_tokens"],
                   help="global cache budget, pre-filled before timing")
    p.add_argument("--budget", type=int, default=DEFAULTS["budget"], help="draft budget (tokens)")
    p.add_argument("--batch", type=int, default=DEFAULTS["batch"], help="concurrent requests")
    p.add_argument("--block-steps", type=int, default=DEFAULTS["block_steps"],
                   help="steps per timed block; methods alternate block by block")
    p.add_argument("--vocab", type=int, default=DEFAULTS["vocab"])
    p.add_argument("--max-depth", type=int, default=DEFAULTS["max_depth"],
                   help="suffix depth (specdraft max_depth, arctic max_tree_depth)")
    p.add_argument("--ngram-min", type=int, default=DEFAULTS["ngram_min"], help="prompt_lookup_min")
    p.add_argument("--ngram-max", type=int, default=DEFAULTS["ngram_max"], help="prompt_lookup_max")
    p.add_argument("--prefill-prompt-tokens", type=int, default=DEFAULTS["prefill_prompt_tokens"],
                   help="prompt length of the pre-fill requests (their outputs fill the cache)")
    p.add_argument("--methods", default="specdraft,arctic,ngram",
                   help="comma-separated subset of specdraft,arctic,ngram")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--no-arctic-memory", action="store_true",
                   help="skip arctic's estimate_memory() (it walks the whole tree)")
    return p


def _fmt(v, nd=2):
    return "-" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ("specdraft", "arctic", "ngram")]
    if bad:
        print(f"specdraft overhead: unknown method(s) {bad}; use specdraft, arctic, ngram", file=sys.stderr)
        return 2
    t_all = time.perf_counter()
    skipped: dict[str, str] = {}

    # ---- streams
    t0 = time.perf_counter()
    gen = StreamGen(args.seed, vocab=args.vocab)
    prompts = [gen.sequence(args.prompt_tokens) for _ in range(args.batch)]
    truths = [gen.sequence(args.output_tokens, own=p) for p in prompts]
    prefill = []
    total = 0
    while total < args.global_cache_tokens and args.output_tokens > 0:
        p = gen.sequence(args.prefill_prompt_tokens)
        o = np.asarray(gen.sequence(args.output_tokens, own=p), dtype=np.int32)
        prefill.append((np.asarray(p, dtype=np.int32), o))
        total += len(o)
    gen_s = time.perf_counter() - t0
    log(f"generated {args.batch} prompts x {args.prompt_tokens} + outputs x {args.output_tokens}, "
        f"{len(prefill)} pre-fill requests ({total:,} output tokens) in {gen_s:.1f}s")

    # ---- methods
    runners: list[tuple[str, object, Callable[[int], None]]] = []
    if "specdraft" in methods:
        try:
            log("specdraft: pre-filling the global cache ...")
            m = SpecdraftMethod(prompts, truths, args.budget, args, prefill)
            log(f"specdraft: pre-fill {m.prefill_tokens:,} tokens in {m.prefill_s:.2f}s "
                f"({m.prefill_tokens / max(m.prefill_s, 1e-9):,.0f} tok/s), "
                f"{m.mem_after_prefill / max(m.prefill_tokens, 1):.1f} bytes/cached token")
            runners.append(("specdraft", m, m.run_block))
        except Exception as e:
            skipped["specdraft"] = f"{type(e).__name__}: {e}"
            log(f"specdraft: SKIPPED ({skipped['specdraft']})")
    if "arctic" in methods:
        try:
            import arctic_inference.suffix_decoding  # noqa: F401
        except Exception as e:
            skipped["arctic"] = f"arctic_inference is not importable ({type(e).__name__}: {e})"
            log(f"arctic: SKIPPED ({skipped['arctic']})")
        else:
            log("arctic: pre-filling the global cache ...")
            m = ArcticMethod(prompts, truths, args.budget, args, prefill)
            log(f"arctic: pre-fill {m.prefill_tokens:,} tokens in {m.prefill_s:.2f}s "
                f"({m.prefill_tokens / max(m.prefill_s, 1e-9):,.0f} tok/s), driven by "
                f"{'vLLM SuffixDecodingProposer.propose' if m.via_vllm else 'direct calls'}")
            if not args.no_arctic_memory:
                t0 = time.perf_counter()
                try:
                    m.mem = int(m.cache._global_tree.estimate_memory())
                    log(f"arctic: estimate_memory {m.mem / max(m.prefill_tokens, 1):.1f} bytes/cached token "
                        f"({time.perf_counter() - t0:.1f}s)")
                except Exception as e:  # not exposed by this build
                    log(f"arctic: estimate_memory unavailable ({e!r})")
            runners.append(("arctic", m, m.run_block))
    if "ngram" in methods:
        try:
            log("ngram: importing vLLM (slow the first time) ...")
            m = NgramMethod(prompts, truths, args.budget, args)
            log(f"ngram: numba JIT warm-up {m.jit_s:.1f}s")
            runners.append(("ngram", m, m.run_block))
        except Exception as e:
            skipped["ngram"] = f"{type(e).__name__}: {e}"
            log(f"ngram: SKIPPED ({skipped['ngram']})")

    # ---- interleaved timing (no cyclic GC pauses inside the timed calls, for every method)
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    rnd = 0
    while any(not m.done() for _, m, _ in runners):
        for name, m, run in runners:
            if not m.done():
                run(args.block_steps)
        rnd += 1
        if rnd % 10 == 0:
            prog = ", ".join(f"{name} {sum(m.pos) * 100 // max(1, args.batch * args.output_tokens)}%"
                             for name, m, _ in runners)
            log(f"round {rnd}: {prog}")
    timing_s = time.perf_counter() - t0
    gc.enable()

    # ---- report
    results = {name: m.summary() for name, m, _ in runners}
    report = {
        "benchmark": "specdraft overhead",
        "unit": "microseconds per request-step (append the step's tokens + draft)",
        "settings": {
            "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
            "global_cache_tokens": args.global_cache_tokens, "draft_budget": args.budget,
            "batch": args.batch, "block_steps": args.block_steps, "vocab": args.vocab,
            "max_depth": args.max_depth, "seed": args.seed, "ngram_min": args.ngram_min,
            "ngram_max": args.ngram_max, "prefill_requests": len(prefill),
            "prefill_prompt_tokens": args.prefill_prompt_tokens, "specdraft_drafts": "chain (step_batch)",
            "arctic": {"max_tree_depth": args.max_depth, "max_spec_tokens": args.budget,
                       "max_spec_factor": 1.0, "min_token_prob": 0.1},
            "generator": "StreamGen: Zipf(1.1) unigram + 8-successor Markov chain + copied spans "
                         "(30% from 300 shared docs, 25% from own prompt/output; geometric spans, mean 24)",
        },
        "results": results,
        "skipped": skipped,
        "timing": {"generate_s": round(gen_s, 2), "interleaved_s": round(timing_s, 2),
                   "total_s": round(time.perf_counter() - t_all, 2)},
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)

    cols = ["us/req-step", "mean", "cpu us/req-step", "incl. finish", "tokens/step", "us/out token",
            "bytes/cached tok"]
    print(f"\n{'method':<10} " + " ".join(f"{c:>16}" for c in cols))
    for name, r in results.items():
        vals = [r.get("us_per_request_step"), r.get("us_per_request_step_mean"), r.get("cpu_us_per_request_step"),
                r.get("us_per_request_step_incl_finish"), r.get("tokens_per_step"), r.get("us_per_output_token"),
                r.get("bytes_per_cached_token")]
        print(f"{name:<10} " + " ".join(f"{_fmt(v):>16}" for v in vals))
    print("(us/req-step: median over blocks of wall time; mean: over all blocks; cpu: thread CPU time, median;\n"
          " incl. finish: specdraft's finish() folded in; us/out token: us/req-step / tokens appended per step)")
    for name, why in skipped.items():
        print(f"{name:<10} skipped: {why}")
    print(f"\nsettings: batch {args.batch}, prompt {args.prompt_tokens}, output {args.output_tokens}, "
          f"global cache {args.global_cache_tokens:,} tokens, budget {args.budget}; "
          f"total {report['timing']['total_s']}s")
    if args.json:
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
