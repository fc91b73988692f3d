"""GPU check of specdraft in SGLang: one run of about 10 minutes on a machine with a GPU.

Not collected by pytest (the name does not start with ``test_``); CI machines have no GPU and
SGLang cannot serve there. Needs specdraft installed next to SGLang 0.5.23 with its CUDA
kernels (README, Install) and a model whose tokenizer matches the trace (default: Qwen2.5-Coder-1.5B-Instruct and
the trace recorded with it). It serves the model three times, one server at a time:

  none       no speculation (the reference)
  ngram      SGLang's own NGRAM (--speculative-algorithm NGRAM)
  specdraft  --speculative-algorithm SPECDRAFT (options from $SPECDRAFT_SGLANG_OPTIONS)

sends the trace's prompts (token ids, greedy, the recorded number of new tokens) to each, and
checks that every output is token-identical to the reference (``--dtype float32`` by default:
in bfloat16 multi-token verification and single-token decoding may round differently). It prints
and writes (``--json``) per method: requests, output tokens, mean acceptance length (completion
tokens per verification pass, from SGLang's ``meta_info.spec_verify_ct``), wall seconds and
output tokens/s, first at concurrency 1 and then at ``--concurrency``.

    python integration_tests/gpu/sglang_check.py --model Qwen/Qwen2.5-Coder-1.5B-Instruct \\
        --json results/sglang_gpu_check.json

Exit status 0 when every method is token-identical to the reference and specdraft's mean
acceptance length is > 1; 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TRACE = os.path.join(REPO, "benchmarks", "traces", "qwen2.5-coder-1.5b.jsonl")

METHODS = {
    "none": [],
    "ngram": ["--speculative-algorithm", "NGRAM"],
    "specdraft": ["--speculative-algorithm", "SPECDRAFT"],
}


def post(url: str, payload: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, json.dumps(payload).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(base: str, proc: subprocess.Popen, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health_generate", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(2)
    raise TimeoutError(f"server not ready after {timeout:.0f}s")


def generate(base: str, rec: dict) -> dict:
    out = post(base + "/generate", {
        "input_ids": rec["prompt_token_ids"],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": rec["max_new_tokens"],
                            "ignore_eos": True},
    })
    meta = out.get("meta_info", {})
    return {"output_ids": list(out.get("output_ids") or []),
            "completion_tokens": int(meta.get("completion_tokens", 0)),
            "spec_verify_ct": int(meta.get("spec_verify_ct", 0) or 0)}


def run_round(base: str, records: list[dict], concurrency: int) -> tuple[list[dict], float]:
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        outs = list(pool.map(lambda r: generate(base, r), records))
    return outs, time.perf_counter() - t0


def serve_and_measure(name: str, args, records: list[dict], port: int) -> dict:
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", args.model,
           "--port", str(port), "--host", "127.0.0.1", "--dtype", args.dtype,
           "--mem-fraction-static", str(args.mem_fraction), "--max-running-requests",
           str(max(args.concurrency, 1)), *METHODS[name]]
    if name != "none":
        cmd += ["--speculative-num-draft-tokens", str(args.num_draft_tokens)]
    cmd += args.extra_server_args
    log_path = os.path.join(args.log_dir, f"sglang_{name}.log")
    print(f"[gpu-check] {name}: {' '.join(cmd)} (log {log_path})", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, args.start_timeout)
        run_round(base, records[:2], 2)  # warm-up (CUDA graphs, caches); not measured
        result = {}
        for label, conc in (("c1", 1), (f"c{args.concurrency}", args.concurrency)):
            outs, secs = run_round(base, records, conc)
            tokens = sum(o["completion_tokens"] for o in outs)
            passes = sum(o["spec_verify_ct"] for o in outs)
            result[label] = {"outputs": [o["output_ids"] for o in outs], "seconds": secs,
                             "output_tokens": tokens, "tokens_per_s": tokens / secs,
                             "tokens_per_pass": tokens / passes if passes else 1.0}
        return result
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="prompts (token ids) and lengths")
    ap.add_argument("--requests", type=int, default=21)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--num-draft-tokens", type=int, default=12)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--mem-fraction", type=float, default=0.6)
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--log-dir", default=os.path.join(REPO, "results"))
    ap.add_argument("--json", default=os.path.join(REPO, "results", "sglang_gpu_check.json"))
    ap.add_argument("extra_server_args", nargs="*", help="after --: passed to every server")
    args = ap.parse_args(argv)
    os.makedirs(args.log_dir, exist_ok=True)

    sys.path.insert(0, REPO)
    from specdraft.replay import load_trace

    records = []
    for rec in load_trace(args.trace)[: args.requests]:
        n = min(len(rec["output_token_ids"]), args.max_new_tokens)
        records.append({"prompt_token_ids": rec["prompt_token_ids"], "max_new_tokens": n})
    print(f"[gpu-check] {len(records)} prompts from {args.trace}, model {args.model}, "
          f"{args.num_draft_tokens} draft tokens, dtype {args.dtype}", flush=True)

    t0 = time.time()
    results = {name: serve_and_measure(name, args, records, args.port + i)
               for i, name in enumerate(args.methods)}
    ok = True
    ref = results.get("none")
    rows = []
    for name, res in results.items():
        for label, r in res.items():
            same = None if ref is None else sum(
                a == b for a, b in zip(r["outputs"], ref[label]["outputs"]))
            if same is not None and same != len(records):
                ok = False
            rows.append((name, label, r["output_tokens"], r["tokens_per_pass"],
                         r["seconds"], r["tokens_per_s"], same))
    if "specdraft" in results and results["specdraft"]["c1"]["tokens_per_pass"] <= 1.0:
        ok = False
    print(f"\n{'method':<10} {'conc':<5} {'tokens':>7} {'tok/pass':>8} {'seconds':>8} {'tok/s':>8} "
          f"{'identical':>10}")
    for name, label, tokens, tpp, secs, tps, same in rows:
        print(f"{name:<10} {label:<5} {tokens:>7} {tpp:>8.2f} {secs:>8.1f} {tps:>8.1f} "
              f"{'-' if same is None else f'{same}/{len(records)}':>10}")
    summary = {"model": args.model, "trace": args.trace, "dtype": args.dtype,
               "num_draft_tokens": args.num_draft_tokens, "requests": len(records),
               "specdraft_options": os.environ.get("SPECDRAFT_SGLANG_OPTIONS", ""),
               "ok": ok, "wall_seconds": time.time() - t0,
               "rows": [dict(zip(("method", "concurrency", "output_tokens", "tokens_per_pass",
                                  "seconds", "tokens_per_s", "identical"), r)) for r in rows]}
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"[gpu-check] {'OK' if ok else 'FAILED'} in {time.time() - t0:.0f}s; results: {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
