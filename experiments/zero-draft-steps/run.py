"""What vLLM's speculative mode costs when no step drafts: no speculation against specdraft's
engine with every request opted out (``extra_args={"specdraft": {"speculate": False}}``, so every
step has zero draft tokens and still takes the speculative path: spec-decode metadata, the
rejection sampler, ``propose``, async scheduling off).

The seed-2 chat prompts at 16 in flight (the shape of bench-seed2-chat-c16-*.json: 16 requests,
128 tokens, k=16, every request in the first step), Qwen2.5-Coder-0.5B, an in-process engine
(VLLM_ENABLE_V1_MULTIPROCESSING=0) so the model's forward can be timed per step. Each round
starts from a clean prefix cache and global cache, as ``specdraft bench`` does.

    python experiments/zero-draft-steps/run.py none float32      # then: zero float32, ...
Prints one line a round and appends them to benchmarks/results/zero-draft-steps/results.jsonl.
Run the methods alternately, nothing else on the machine.
"""
import collections
import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from specdraft import live
from specdraft.bench import select_requests
from specdraft.models import resolve_model
from specdraft.replay import load_trace

TRACE = "benchmarks/traces/qwen2.5-coder-0.5b-topk-seed2.jsonl.gz"
# the results this script writes and reads (it lives in experiments/zero-draft-steps/)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "results",
                   "zero-draft-steps")


def main(method: str, dtype: str, rounds: int = 3) -> None:
    assert method in ("none", "zero"), "method: none | zero"
    recs, _ = select_requests(load_trace(TRACE), ["chat"], 16, 8192)
    prompts = [r["prompt_token_ids"] for r in recs]
    cfg = None if method == "none" else live.method_configs(16)["specdraft"]
    llm = live.make_llm(str(resolve_model("qwen2.5-coder-0.5b")), cfg, max_model_len=8192,
                        max_num_seqs=16, dtype=dtype, kv_cache_memory_bytes=2 << 30)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from specdraft.adapters import vllm_adapter
    ad = vllm_adapter()
    xa = {"specdraft": {"speculate": False}} if method == "zero" else None
    params = [SamplingParams(temperature=0, max_tokens=128, extra_args=xa) for _ in prompts]
    tp = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    model = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker \
        .model_runner.model
    steps: list[tuple[int, float]] = []  # (tokens in the forward, seconds)
    forward = model.forward

    def timed(*a, **k):
        t = time.perf_counter()
        out = forward(*a, **k)
        ids = k.get("input_ids", a[0] if a else None)
        steps.append((int(ids.shape[0]) if ids is not None else -1, time.perf_counter() - t))
        return out

    model.forward = timed
    for r in range(rounds + 1):  # round 0: untimed warm-up
        ad.reset_cross_request_state(llm)
        steps.clear()
        t0 = time.perf_counter()
        outs = ad.generate_in_one_burst(llm, tp, params)
        secs = time.perf_counter() - t0
        tpots = sorted(t for _, t in ad.request_latencies(outs) if t)
        by = collections.defaultdict(list)
        for n, t in steps:
            by[n].append(t)
        row = {"method": method, "dtype": dtype, "round": r, "seconds": round(secs, 3),
               "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
               "tpot_ms_median": round(tpots[len(tpots) // 2] * 1000, 1),
               "forward_seconds": round(sum(t for _, t in steps), 3),
               "prefill": [(n, round(t, 3)) for n, t in steps if n > 64],
               "decode_forward_ms_median": {n: round(sorted(v)[len(v) // 2] * 1000, 1)
                                            for n, v in sorted(by.items()) if n <= 64 and len(v) >= 5},
               "counters": ad.request_spec_counters(outs),
               "cpu_pressure": live.cpu_pressure()}
        print(json.dumps(row), flush=True)
        if r:
            with open(os.path.join(OUT, "results.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
    live.shutdown(llm)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
