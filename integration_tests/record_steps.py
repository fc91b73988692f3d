"""Record the steps a live vLLM 0.32 engine (CPU) hands specdraft's proposer, for the adapter test.

Runs the first ``--per-trace`` requests of every committed bench trace (their prompt token ids;
greedy, ``--max-tokens`` new tokens) through one vLLM engine per tokenizer (Qwen2.5-Coder-0.5B
for the Qwen traces, SmolLM2-135M for its own), with ``integration_tests/recording_proposer.py``
as the ``custom_class`` proposer: every ``propose`` call and its answer go to
``integration_tests/data/recorded-steps-<model>.jsonl.gz``. Chunked prefill is on with a small
token budget, so long prompts take several steps; every ninth request opts out of speculation;
requests alternate between three ``cache_salt`` tenants and none. The drafter runs with
``"adaptive": false`` (the drafts do not depend on step timings, so a replay can reproduce them
exactly). integration_tests/test_vllm034.py replays the recordings through both vLLM adapters.

    .venv/bin/python integration_tests/record_steps.py      # a few minutes on 2 cores
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
OPTIONS = {"adaptive": False, "cost_model": "gpu", "global_cache_tokens": 200_000}
K = 8
MAX_MODEL_LEN = 4096
SALTS = (None, "tenant-a", None, "tenant-b")


def model_for(trace: Path) -> str:
    return "smollm2-135m" if trace.name.startswith("smollm2") else "qwen2.5-coder-0.5b"


def record(model: str, traces: list[Path], per_trace: int, max_tokens: int, out: Path) -> None:
    from vllm import LLM, SamplingParams

    from specdraft.models import model_path
    from specdraft.replay.traces import load_trace

    prompts, params = [], []
    for trace in traces:
        for rec in [r for r in load_trace(str(trace)) if r["output_token_ids"]][:per_trace]:
            n = len(prompts)
            prompt = {"prompt_token_ids": rec["prompt_token_ids"]}
            if SALTS[n % len(SALTS)]:
                prompt["cache_salt"] = SALTS[n % len(SALTS)]
            prompts.append(prompt)
            extra = {"specdraft": {"speculate": False}} if n % 9 == 8 else None
            params.append(SamplingParams(temperature=0.0, max_tokens=max_tokens, extra_args=extra))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "steps.jsonl"
        os.environ["SPECDRAFT_RECORD_STEPS"] = str(path)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        llm = LLM(model=model_path(model), dtype="float32", enforce_eager=True, seed=0,
                  max_model_len=MAX_MODEL_LEN, max_num_seqs=4, max_num_batched_tokens=512,
                  enable_chunked_prefill=True, enable_prefix_caching=True,
                  speculative_config={"method": "custom_class",
                                      "model": "recording_proposer.RecordingSuffixProposer",
                                      "num_speculative_tokens": K, "specdraft": OPTIONS})
        llm.generate(prompts, params, use_tqdm=False)
        del llm
        with open(path, "rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    print(f"[record-steps] {model}: {len(prompts)} requests -> {out}", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-trace", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out-dir", default=str(HERE / "data"))
    args = ap.parse_args(argv)
    traces = sorted((REPO / "benchmarks" / "traces").glob("*.jsonl*"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)  # the worker imports the proposer
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    for model in sorted({model_for(t) for t in traces}):
        record(model, [t for t in traces if model_for(t) == model], args.per_trace,
               args.max_tokens, Path(args.out_dir) / f"recorded-steps-{model}.jsonl.gz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
