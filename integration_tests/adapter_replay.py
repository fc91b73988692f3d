"""Recorded engine steps driven through a vLLM adapter: the same steps through the 0.32 adapter
(vLLM's ``custom_class`` proposer and its runner hooks) and through the 0.34 adapter (vLLM's
``BaseSpeculator``), so their drafts can be compared step for step.

A trace (``benchmarks/traces/``) holds each request's prompt and the target's greedy output. The
steps are those an engine runs on it: up to ``BATCH`` requests in flight, admitted in arrival
order; a request's first step prefills its prompt (a long prompt takes two steps, the first a
chunk that emits nothing) and emits its first output token; each later step emits the part of
its last draft that matches the recorded output, plus the next recorded token; a request ends in
the step that emits its last recorded token (its ``max_tokens``). Rows are reordered now and
then; every ninth request opts out of speculation; requests carry one of three tenant scopes.
Acceptance stops at the real draft (a fixed-width row's padding is never accepted here), so both
adapters see the same steps as long as they draft the same tokens.

Run as ``python adapter_replay.py {0.32,0.34} OUT.json TRACE... [--options JSON]...``: it writes
every step's drafts. The 0.32 side runs in the installed vLLM 0.32 (the proposer is driven through its
runner hooks with stand-ins for the runner and scheduler output, as tests/test_vllm_step.py
does). The 0.34 side needs vLLM 0.34's Python files first on ``PYTHONPATH``
(``.cache/vllm-0.34.0``, scripts/setup.sh): its ``RequestState``, ``InputBatch`` and
``InputBuffers`` are vLLM's own, built on CPU tensors as the CPU runner builds them. Two vLLM
kernels are Triton-only (no Triton CPU backend here), so their effect is written in torch: the
staged writes of a new request (``RequestState.apply_staged_writes``) and ``post_update`` (the
sampled tokens into ``all_token_ids`` and ``total_len``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from types import SimpleNamespace

import numpy as np

BATCH = 8
K = 8
CHUNK = 512                 # prompts longer than this prefill in two steps
SCOPES = (None, "tenant-a", "tenant-b")
STEP_SECONDS = 0.02         # what both controllers are told each step took
VOCAB = 1 << 18             # above every trace's token ids
DEFAULT_OPTIONS = {"cost_model": "gpu", "adaptive": True}


class Params:
    """The SamplingParams fields the adapters read."""

    def __init__(self, max_tokens: int, speculate: bool, scope: str | None):
        from specdraft.adapters.vllm_v0_32.config import SCOPE_ARG

        self.max_tokens = max_tokens
        self.stop_token_ids = []
        self.eos_token_id = None
        self.ignore_eos = False
        extra = {} if speculate else {"specdraft": {"speculate": False}}
        if scope is not None:
            extra[SCOPE_ARG] = scope
        self.extra_args = extra or None


class Request:
    def __init__(self, rid: str, rec: dict, n: int):
        self.req_id = rid
        self.prompt = list(rec["prompt_token_ids"])
        self.truth = list(rec["output_token_ids"])
        self.sampling_params = Params(len(self.truth), n % 9 != 8, SCOPES[n % 3])
        self.scope = SCOPES[n % 3]
        self.output_token_ids: list[int] = []
        self.chunks_left = 1 if len(self.prompt) > CHUNK else 0
        self.draft: list[int] = []

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output_token_ids)


def steps(records: list[dict], seed: int = 0, batch_size: int = BATCH):
    """Yield one step at a time: (new requests, finished ids, rows, emitted per row, verified
    draft per row, tokens scored); the driver's drafts are sent back with ``send``."""
    rng = random.Random(seed)
    queue = [Request(f"r{n}", rec, n) for n, rec in enumerate(records) if rec["output_token_ids"]]
    batch: list[Request] = []
    finished: list[str] = []
    while queue or batch:
        new = []
        while queue and len(batch) < batch_size:
            batch.append(queue.pop(0))
            new.append(batch[-1])
        if len(batch) > 1 and rng.random() < 0.2:
            i, j = rng.sample(range(len(batch)), 2)
            batch[i], batch[j] = batch[j], batch[i]
        emitted, verified, scored = [], [], 0
        for req in batch:
            if req in new or req.chunks_left:
                if req in new and req.chunks_left:
                    scored += CHUNK
                    emitted.append([])
                else:
                    scored += len(req.prompt) - (CHUNK if len(req.prompt) > CHUNK else 0)
                    req.chunks_left = 0
                    emitted.append([req.truth[0]])
                verified.append([])
                req.output_token_ids.extend(emitted[-1])
                continue
            pos = len(req.output_token_ids)
            acc = 0
            while (acc < len(req.draft) and pos + acc < len(req.truth)
                   and req.draft[acc] == req.truth[pos + acc]):
                acc += 1
            toks = req.truth[pos:pos + acc + 1]
            scored += 1 + len(req.draft)
            verified.append(req.draft)
            emitted.append(toks)
            req.output_token_ids.extend(toks)
        drafts = yield new, [(r, False) for r in finished], list(batch), emitted, verified, \
            scored, K
        finished = []
        for req, draft in zip(list(batch), drafts):
            if len(req.output_token_ids) >= len(req.truth):
                batch.remove(req)
                finished.append(req.req_id)
            req.draft = draft


def recorded_steps(path: str):
    """The steps a live vLLM 0.32 engine handed specdraft's proposer
    (integration_tests/record_steps.py), in the same form as ``steps``; each step's recorded
    drafts are collected in ``recorded_steps.drafts``."""
    from specdraft.adapters.vllm_v0_32.config import SCOPE_ARG

    requests: dict[str, Request] = {}
    recorded_steps.drafts = []
    with gzip.open(path, "rt") as f:
        for line in f:
            step = json.loads(line)
            new = []
            for r, spec in step["new"].items():
                req = Request(r, {"prompt_token_ids": spec["prompt"], "output_token_ids": []}, 0)
                req.sampling_params = SimpleNamespace(**{k: spec[k] for k in (
                    "max_tokens", "stop_token_ids", "eos_token_id", "ignore_eos", "extra_args")})
                req.scope = (spec["extra_args"] or {}).get(SCOPE_ARG)
                requests[r] = req
                new.append(req)
            batch = [requests[r] for r in step["req_ids"]]
            for req, toks, n in zip(batch, step["sampled"], step["num_tokens"]):
                req.output_token_ids.extend(toks)
                assert req.num_tokens == n, (req.req_id, req.num_tokens, n)
            verified = [step["scheduled"].get(r, []) for r in step["req_ids"]]
            recorded_steps.drafts.append(step["drafts"])
            yield (new, [tuple(f) for f in step["finished"]], batch, step["sampled"], verified,
                   step["scored"] or 0, step["num_spec"])


def drive(records, driver, batch_size: int = BATCH) -> list[list[list[int]]]:
    """Every step through ``driver``: ``records`` a trace's records (simulated steps) or a
    ``recorded_steps`` generator."""
    out = []
    gen = records if not isinstance(records, list) else steps(records, batch_size=batch_size)
    step = next(gen)
    try:
        while True:
            drafts = driver.step(len(out), *step)
            out.append(drafts)
            step = gen.send(drafts)
    except StopIteration:
        pass
    return out


def _vllm_config(options: dict, max_model_len: int, attr: str, batch_size: int = BATCH):
    spec = SimpleNamespace(num_speculative_tokens=K, enable_adaptive_verification=False)
    setattr(spec, attr, options)
    return SimpleNamespace(
        speculative_config=spec,
        model_config=SimpleNamespace(max_model_len=max_model_len, dtype="float32",
                                     get_vocab_size=lambda: VOCAB),
        scheduler_config=SimpleNamespace(max_num_seqs=batch_size))


class Driver032:
    """The 0.32 adapter: SpecdraftProposer through its runner hooks."""

    def __init__(self, options: dict, max_model_len: int, batch_size: int = BATCH):
        from specdraft.adapters import vllm_step
        from specdraft.adapters.vllm_v0_32.config import OPTIONS_ATTR
        from specdraft.plugins.vllm import SpecdraftProposer

        vllm_step.time = SimpleNamespace(perf_counter=lambda: 1000.0)
        self.prop = SpecdraftProposer(_vllm_config(options, max_model_len, OPTIONS_ATTR))
        self.max_model_len = max_model_len
        self.requests: dict[str, Request] = {}

    def step(self, n, new, finished, batch, emitted, verified, scored, num_spec):
        for req in new:
            self.requests[req.req_id] = req
        hooks = self.prop.specdraft_hooks
        hooks.step_begin(list(finished), scored, 1000.0 - STEP_SECONDS,
                         [(req.req_id, req.scope) for req in new])
        if n == 0:  # the 0.34 speculator times a step from the previous one: none before the first
            self.prop.steps.step_started = None
        buf = np.zeros((len(batch), self.max_model_len), dtype=np.int32)
        num_tokens = np.zeros(len(batch), dtype=np.int32)
        num_prompt = np.zeros(len(batch), dtype=np.int32)
        for i, req in enumerate(batch):
            hist = req.prompt + req.output_token_ids
            buf[i, :len(hist)] = hist
            num_tokens[i], num_prompt[i] = len(hist), len(req.prompt)
        runner = SimpleNamespace(
            input_batch=SimpleNamespace(req_ids=[r.req_id for r in batch],
                                        num_prompt_tokens=num_prompt, token_ids_cpu=buf,
                                        num_tokens_no_spec=num_tokens),
            requests=self.requests)
        out = SimpleNamespace(
            scheduled_spec_decode_tokens={r.req_id: v for r, v in zip(batch, verified) if v},
            num_spec_tokens_to_schedule=num_spec)
        hooks.bind(runner, out)
        drafts = self.prop.propose(emitted, num_tokens, buf, slot_mappings=None)
        hooks.unbind()
        assert self.prop.counters["errors"] == 0, "the 0.32 proposer failed"
        for r, _ in finished:
            self.requests.pop(r, None)
        return [list(map(int, d)) for d in drafts]


class Driver034:
    """The 0.34 adapter: SpecdraftSpeculator with vLLM 0.34's own request state and batch."""

    def __init__(self, options: dict, max_model_len: int, batch_size: int = BATCH):
        import torch
        import vllm.v1.worker.cpu.shm  # noqa: F401 - the CPU worker's patches, as it imports them
        from vllm.v1.worker.cpu import buffer_utils as cpu_buffers
        from vllm.v1.worker.gpu import buffer_utils as gpu_buffers
        from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
        from vllm.v1.worker.gpu.states import RequestState

        from specdraft.adapters.vllm_v0_32.config import OPTIONS_ATTR
        from specdraft.adapters.vllm_v0_34.runner import install_request_params
        from specdraft.adapters.vllm_v0_34.speculator import SpecdraftSpeculator

        # what vLLM's CPU runner patches in when Triton has a CPU backend (cpu/shm.py)
        gpu_buffers.UvaBuffer = cpu_buffers.UvaBuffer
        self.torch = torch
        self.InputBatch = InputBatch
        device = torch.device("cpu")
        self.states = RequestState(batch_size, max_model_len, 1 << 16, K, VOCAB, device)
        self.buffers = InputBuffers(max_num_reqs=batch_size, max_num_tokens=1 << 16,
                                    device=device)
        self.spec = SpecdraftSpeculator(_vllm_config(options, max_model_len, OPTIONS_ATTR,
                                                     batch_size),
                                        device, req_states=self.states)
        self.spec.clock = self._clock
        self.strict = True  # a speculator failure fails the run
        self._now = 0.0
        states, spec = self.states, self.spec

        class Runner:  # the part of GPUModelRunner.add_requests the speculator sees
            speculator = spec

            def add_requests(self, scheduler_output):
                for new in scheduler_output.scheduled_new_reqs:
                    states.add_request(new.req_id, len(new.prompt_token_ids),
                                       new.prompt_token_ids, 0, new.sampling_params.max_tokens)
                    slot = states.req_id_to_index[new.req_id]
                    # RequestState.apply_staged_writes' Triton kernel, written in torch
                    n = len(new.prompt_token_ids)
                    states.all_token_ids.gpu[slot, :n] = torch.tensor(new.prompt_token_ids)
                    states.total_len.gpu[slot] = n
                    spec.add_request(slot)

        assert install_request_params(Runner) is None
        self.runner = Runner()

    def _clock(self) -> float:
        self._now += STEP_SECONDS
        return self._now

    def step(self, n, new, finished, batch, emitted, verified, scored, num_spec):
        import dataclasses

        torch, states = self.torch, self.states
        if finished:  # finished and aborted alike, as vLLM 0.34 reports them
            ids = {r for r, _ in finished}
            self.spec.on_requests_finished(ids)
            for r in sorted(ids):
                states.remove_request(r)
        self.runner.add_requests(SimpleNamespace(scheduled_new_reqs=[
            SimpleNamespace(req_id=r.req_id, prompt_token_ids=r.prompt,
                            sampling_params=r.sampling_params) for r in new]))
        slots = [states.req_id_to_index[r.req_id] for r in batch]
        for slot, toks in zip(slots, emitted):  # post_update's Triton kernel, written in torch
            if toks:
                t = int(states.total_len.gpu[slot])
                states.all_token_ids.gpu[slot, t:t + len(toks)] = torch.tensor(toks)
                states.total_len.gpu[slot] = t + len(toks)
                states.last_sampled_tokens[slot, 0] = toks[-1]
        num_reqs = len(batch)
        dummy = self.InputBatch.make_dummy(num_reqs, max(num_reqs, scored), self.buffers)
        batch_in = dataclasses.replace(
            dummy, req_ids=[r.req_id for r in batch],
            idx_mapping=torch.tensor(slots, dtype=torch.int32),
            idx_mapping_np=np.asarray(slots, dtype=np.intp), num_tokens=scored,
            num_draft_tokens_per_req=np.asarray([len(v) for v in verified], dtype=np.int32))
        num_sampled = torch.tensor([len(e) for e in emitted], dtype=torch.int32)
        num_rejected = torch.tensor([len(v) + 1 - len(e) if e else 0
                                     for v, e in zip(verified, emitted)], dtype=torch.int32)
        out = self.spec.propose(batch_in, None, None, None, None, num_sampled, num_rejected,
                                states.last_sampled_tokens, states.next_prefill_tokens,
                                None, None, num_speculative_tokens=num_spec or K)
        assert tuple(out.shape) == (num_reqs, K), out.shape
        assert not self.strict or self.spec.counters["errors"] == 0, "the 0.34 speculator failed"
        return self.spec.drafts_of(num_reqs)


def load(path: str, limit: int | None, repeat: int = 1) -> list[dict]:
    from specdraft.replay.traces import load_trace

    records = load_trace(path) * repeat
    return records[:limit] if limit else records


def main(argv=None) -> int:
    global K
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version", choices=["0.32", "0.34"])
    ap.add_argument("out", help="JSON: {trace: {options: drafts of every step}}")
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--options", action="append",
                    help=f"drafter options as JSON, repeatable (default {DEFAULT_OPTIONS})")
    ap.add_argument("--limit", type=int, default=None, help="first N requests of each trace")
    ap.add_argument("--batch", type=int, default=BATCH, help="requests in flight")
    ap.add_argument("--repeat", type=int, default=1, help="the trace's requests N times over")
    ap.add_argument("--k", type=int, default=K, help="num_speculative_tokens")
    ap.add_argument("--recorded", action="store_true",
                    help="the files are steps recorded from a live engine (record_steps.py): "
                         "replayed with the recording's settings; their drafts are written too")
    args = ap.parse_args(argv)
    K = args.k
    cls = Driver032 if args.version == "0.32" else Driver034
    results: dict = {}
    timing: dict = {}
    for trace in args.traces:
        if args.recorded:
            import record_steps

            K = record_steps.K
            options = json.dumps(record_steps.OPTIONS)
            drafts = drive(recorded_steps(trace),
                           cls(record_steps.OPTIONS, record_steps.MAX_MODEL_LEN, 4))
            results[trace] = {options: drafts, "recorded": recorded_steps.drafts}
            print(f"[adapter-replay] vLLM {args.version} {trace}: {len(drafts)} recorded steps",
                  file=sys.stderr, flush=True)
            continue
        records = load(trace, args.limit, args.repeat)
        max_model_len = max(len(r["prompt_token_ids"]) + len(r["output_token_ids"])
                            for r in records) + K + 2
        for options in args.options or [json.dumps(DEFAULT_OPTIONS)]:
            driver = cls(json.loads(options), max_model_len, args.batch)
            drafts = drive(records, driver, args.batch)
            results.setdefault(trace, {})[options] = drafts
            if args.version == "0.32":
                driver.prop._count_lengths()  # the native step's row counts
            c = driver.prop.counters if args.version == "0.32" else driver.spec.counters
            timing.setdefault(trace, {})[options] = {
                "batch": args.batch, "steps": c["steps"], "rows": c["rows"],
                "proposer_seconds": c["proposer_seconds"]}
            tokens = sum(len(d) for s in drafts for d in s)
            print(f"[adapter-replay] vLLM {args.version} {trace} {options}: {len(drafts)} steps, "
                  f"{tokens} draft tokens", file=sys.stderr, flush=True)
    with open(args.out, "w") as f:
        json.dump({"version": args.version, "results": results, "timing": timing}, f)
    print(f"[adapter-replay] drafts -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
