"""GPU check of specdraft on vLLM 0.34: for a machine with a GPU, vLLM 0.34 and specdraft installed.

Not collected by pytest (the name does not start with ``test_``). vLLM 0.34 cannot run speculation
on the CPU machines specdraft is developed on (no Triton CPU backend), so this check has not run
until someone runs it on a GPU: README says whether it has.

It runs the trace's prompts (token ids; greedy; the recorded number of new tokens) through
``vllm.LLM`` once per method, one engine at a time, in ``--dtype`` (float32 by default: in
bfloat16, multi-token verification and single-token decoding may round differently):

  none       no speculation (the reference)
  ngram      vLLM's own ngram speculator
  suffix     vLLM's own suffix speculator
  specdraft  {"method": "specdraft", "speculator_options": $SPECDRAFT_OPTIONS or {}}

and checks: every method's outputs token-identical to the reference; specdraft's mean
acceptance length (1 + accepted / drafts, from vLLM's spec-decode counters) > 1; the tenant probe
(a request whose prompt quotes the start of an earlier request's output drafts that output only
in the earlier request's ``cache_salt``); the per-request opt-out (``extra_args={"specdraft":
{"speculate": false}}``: identical output, no draft token accepted beyond what padding matches).
It prints and writes (``--json``) per method: requests, output tokens, MAL, drafted and accepted
tokens, wall seconds, output tokens/s.

    python integration_tests/gpu/vllm034_check.py --model Qwen/Qwen2.5-Coder-1.5B-Instruct \\
        --trace benchmarks/traces/qwen2.5-coder-1.5b-code-edit.jsonl.gz --json vllm034_check.json

Exit status 0 when every check passes; 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load_trace(path: str, limit: int) -> list[dict]:
    sys.path.insert(0, REPO)
    from specdraft.replay.traces import load_trace as load

    return [r for r in load(path) if r["output_token_ids"]][:limit]


def spec_counters(llm) -> dict:
    """vLLM's spec-decode counters (drafts, draft tokens, accepted tokens) so far."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    names = {"vllm:spec_decode_num_drafts": "drafts",
             "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for m in llm.get_metrics():
        key = names.get(m.name)
        if key is not None and hasattr(m, "value"):
            out[key] += int(m.value)
    return out


def make_llm(args, spec):
    from vllm import LLM

    return LLM(model=args.model, dtype=args.dtype, seed=0, max_model_len=args.max_model_len,
               speculative_config=spec, disable_log_stats=False,
               gpu_memory_utilization=args.gpu_memory_utilization)


def generate(llm, records, extra_args=None, salt=None):
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": r["prompt_token_ids"],
                **({"cache_salt": salt} if salt else {})} for r in records]
    params = [SamplingParams(temperature=0.0, max_tokens=len(r["output_token_ids"]),
                             ignore_eos=True, extra_args=extra_args) for r in records]
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs], time.perf_counter() - start


def method_config(name: str, k: int) -> dict | None:
    if name == "none":
        return None
    if name == "specdraft":
        options = json.loads(os.environ.get("SPECDRAFT_OPTIONS", "{}"))
        return {"method": "specdraft", "num_speculative_tokens": k, "speculator_options": options}
    if name == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 5,
                "prompt_lookup_min": 2}
    return {"method": name, "num_speculative_tokens": k}


def tenant_probe(llm, records) -> dict:
    """A request in tenant a; then its output's start quoted back, in tenant b and in tenant a:
    specdraft may draft the rest of a's output only for a."""
    rec = max(records, key=lambda r: len(r["output_token_ids"]))
    first, _ = generate(llm, [rec], salt="tenant-a")
    quote = rec["prompt_token_ids"] + first[0][:32]
    probe = dict(rec, prompt_token_ids=quote, output_token_ids=first[0][32:96])
    accepted = {}
    for salt in ("tenant-b", "tenant-a"):
        before = spec_counters(llm)["accepted"]
        generate(llm, [probe], salt=salt)
        accepted[salt] = spec_counters(llm)["accepted"] - before
    return accepted


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--trace", default=os.path.join(
        REPO, "benchmarks", "traces", "qwen2.5-coder-1.5b-code-edit.jsonl.gz"))
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    ap.add_argument("--methods", default="none,ngram,suffix,specdraft")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import vllm

    records = load_trace(args.trace, args.limit)
    out = {"vllm": vllm.__version__, "model": args.model, "trace": args.trace, "k": args.k,
           "dtype": args.dtype, "methods": {}, "checks": {}}
    reference = None
    ok = True
    for name in args.methods.split(","):
        llm = make_llm(args, method_config(name, args.k))
        generate(llm, records[:2])  # warm-up (the speculator's reset_state follows vLLM's own)
        before = spec_counters(llm)
        tokens, seconds = generate(llm, records)
        c = {k: v - before[k] for k, v in spec_counters(llm).items()}
        n = sum(map(len, tokens))
        row = {"requests": len(records), "output_tokens": n, "seconds": seconds,
               "tok_s": n / seconds, "drafted": c["draft_tokens"], "accepted": c["accepted"],
               "mal": 1 + c["accepted"] / c["drafts"] if c["drafts"] else None}
        if reference is None:
            reference = tokens
        row["identical"] = tokens == reference
        ok &= row["identical"]
        if name == "specdraft":
            ok &= (row["mal"] or 0) > 1
            probe = tenant_probe(llm, records)
            out["checks"]["tenant_probe_accepted"] = probe
            ok &= probe["tenant-b"] < probe["tenant-a"]
            before = spec_counters(llm)["accepted"]
            opted, _ = generate(llm, records[:4], extra_args={"specdraft": {"speculate": False}})
            out["checks"]["opt_out_identical"] = opted == reference[:4]
            out["checks"]["opt_out_accepted"] = spec_counters(llm)["accepted"] - before
            ok &= opted == reference[:4]
        out["methods"][name] = row
        print(json.dumps({name: row}), flush=True)
        del llm
        gc.collect()
    out["ok"] = bool(ok)
    print(json.dumps(out["checks"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print("vllm034_check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
