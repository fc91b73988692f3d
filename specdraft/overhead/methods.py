"""The methods ``specdraft overhead`` times, each driven the way vLLM drives it: specdraft's
proposer with the runner hooks' events, vLLM's suffix (arctic-inference) and n-gram proposers,
over the runner's token buffer (the untimed part every method shares)."""

from __future__ import annotations

import math
import statistics
import time

import numpy as np


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
        # where the whole run's time goes: the first step (every prompt arrives in it) and the
        # steps right after a request ended (the step that cleans it up, as vLLM runs it)
        self.first_step_ns = None
        self.after_end_ns = 0
        self.after_end_steps = 0
        self._ended_last_step = False

    def done(self) -> bool:
        return not self.live

    # subclasses: prepare(live), untimed runner work before a step; step(live) -> one draft
    # (token list) per live request, timed; finish(i): the request left the batch (untimed runner
    # work; a method that cleans up does it inside its next timed step, as vLLM runs it)
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
            dt = time.perf_counter_ns() - t0
            ns += dt
            cpu += time.thread_time_ns() - c0
            rs += len(live)
            if self.first_step_ns is None:
                self.first_step_ns = dt
            elif self._ended_last_step:
                self.after_end_ns += dt
                self.after_end_steps += 1
            still = []
            for j, i in enumerate(live):
                self.appended += len(self.pending[i])
                self.pos[i] += len(self.pending[i])
                d = drafts[j]
                truth = self.truths[i]
                left = len(truth) - self.pos[i]
                if left <= 0:
                    self.finish(i)
                    continue
                acc = accepted_len(d, truth, self.pos[i])
                self.drafted += len(d)
                self.accepted += acc
                self.pending[i] = truth[self.pos[i]:self.pos[i] + min(acc + 1, left)]
                still.append(i)
            self._ended_last_step = len(still) < len(live)
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
            # the whole run's time over the tokens the verifier emitted: what a method costs per
            # generated token, its starts and finishes included
            "us_per_output_token_mean": round(self.step_ns / 1e3 / max(self.appended, 1), 3),
            # shares of the whole run's time: the first step, and the steps after a request ended
            "first_step_share": round((self.first_step_ns or 0) / max(self.step_ns, 1), 3),
            "after_end_steps": self.after_end_steps,
            "after_end_share": round(self.after_end_ns / max(self.step_ns, 1), 3),
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
    """specdraft's ``SuffixProposer.propose``, called as vLLM 0.32's runner calls it, inside the
    runner hooks' wrappers (``hooked_step_begin``, ``hooked_propose``: the step's begin with the
    requests that ended, the verified drafts counted, the bound StepView)."""

    name = "specdraft"

    def __init__(self, prompts, truths, budget, args, prefill, adapter):
        super().__init__(prompts, truths, budget)
        from types import SimpleNamespace

        from specdraft.plugins.vllm import SuffixProposer

        self.adapter = adapter
        self.max_model_len = args.prompt_tokens + args.output_tokens + budget + 8
        spec = SimpleNamespace(num_speculative_tokens=budget)
        # the options as specdraft's config hook leaves them on vLLM's speculative config
        adapter.attach(spec, {"global_cache_tokens": args.global_cache_tokens,
                              "max_depth": args.max_depth, "native": True,
                              "adaptive": args.specdraft_adaptive, "cost_model": "gpu"}, None)
        config = SimpleNamespace(  # the VllmConfig fields specdraft's engine_facts reads
            speculative_config=spec,
            model_config=SimpleNamespace(max_model_len=self.max_model_len, dtype=None,
                                         get_vocab_size=lambda: args.vocab))
        self.prop = SuffixProposer(config)
        drafter = self.prop.drafter  # native: True above: make_core refuses a missing extension
        core = drafter.core
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
        # vLLM's model runner as the hooks read it; a request ends at its output's length
        self.vllm_runner = adapter.RunnerStandIn(self.runner.batch, [len(t) for t in truths],
                                                 self.max_model_len, budget, self.prop)
        self.last_rows: list[list[int]] = []
        self.finished_ids: set = set()
        self.core_ns_blocks: list[float] = []

    def prepare(self, live):
        self.sampled = self.runner.write(live, self.pending, self.n)
        ids = self.runner.batch.req_ids
        reqs = self.vllm_runner.requests
        for i in live:  # the runner's request states (vLLM updates them before propose)
            reqs[ids[i]].output_token_ids.extend(self.pending[i])
        last = self.last_rows  # the drafts verified this step (the scheduler output's)
        scheduled = {ids[i]: last[i] if last else [] for i in live}
        self.scheduler_output = self.adapter.scheduler_output_standin(
            self.finished_ids, scheduled, len(live) + sum(len(d) for d in scheduled.values()),
            self.budget)
        self.finished_ids = set()

    def step(self, live):
        # timed from here: the runner hooks' wrappers of execute_model and propose, as the
        # engine runs them (the step's begin, the verified drafts, the bound view, propose)
        a, hooks, r, so = self.adapter, self.prop.specdraft_hooks, self.vllm_runner, self.scheduler_output
        a.hooked_step_begin(hooks, r, so)
        rows = a.hooked_propose(hooks, type(r).propose_draft_token_ids, r, so, (self.sampled,), {})
        self.last_rows = rows
        return [rows[i] for i in live]

    def finish(self, i):
        # reported in the next step's scheduler output, as vLLM does
        self.finished_ids.add(self.runner.batch.req_ids[i])

    def run_block(self, steps):
        # the time inside SpecDrafter.step (the native core's step and its argument handling)
        s0, rs0 = self.prop.drafter.counters.draft_time_s, self.request_steps
        super().run_block(steps)
        if self.request_steps > rs0:
            self.core_ns_blocks.append((self.prop.drafter.counters.draft_time_s - s0) * 1e6
                                       / (self.request_steps - rs0))

    def summary(self):
        out = super().summary()
        core = self.prop.drafter.core
        gt = self.prefill_tokens
        out.update({
            "driven_by": "specdraft.plugins.vllm.SuffixProposer.propose inside the runner hooks' wrappers",
            "native_core_us_per_request_step": round(statistics.median(self.core_ns_blocks), 3)
            if self.core_ns_blocks else None,
            "native_core_us_per_request_step_min": round(min(self.core_ns_blocks), 3)
            if self.core_ns_blocks else None,
            "errors": self.prop.counters["errors"],
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
        # vLLM's runner drops the request from its batch (untimed, as for every method); the next
        # propose stops it in the suffix cache ("requests that were not seen in the input batch"),
        # inside the timed step, as specdraft's finish is inside its next step
        del self.runner.batch.req_id_to_index[self.runner.batch.req_ids[i]]

    def summary(self):
        out = super().summary()
        out.update({
            "driven_by": "vllm SuffixDecodingProposer.propose",
            "max_cached_requests": self.max_cached,
            "prefill_s": round(self.prefill_s, 3),
            "global_tokens_after_prefill": self.prefill_tokens,
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
        self.prefill_s = 0.0
        self.runner = _RunnerRows(adapter, prompts, self.max_model_len)
        # numba compiles again for the argument types of the first real call (its __init__ warms
        # up with others): one untimed call on a throwaway buffer of the same types keeps that
        # compile (seconds) out of the first timed block, as a serving engine pays it once
        warm = _RunnerRows(adapter, prompts[:1], self.max_model_len)
        sampled = warm.write([0], [truths[0][:1]], 1)
        adapter.ngram_propose(self.prop, budget, sampled, warm.batch.num_tokens_no_spec,
                              warm.batch.token_ids_cpu)
        self.jit_s = time.perf_counter() - t0

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


METHODS = ("specdraft", "arctic", "ngram")
