"""`specdraft served` at one low rate: a real vLLM server on 127.0.0.1 with specdraft, driven by
vLLM's own client (`vllm bench serve`). Checks the fields of vLLM's result file and that
specdraft's counters agree with vLLM's; speed is for the benchmark (BENCHMARKS.md), not here."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUESTS, OUTPUT, WARMUP = 12, 32, 2


def test_served_run_counts_agree_with_vllms(model_path, tmp_path):
    from specdraft.served import main

    out = tmp_path / "served"
    assert main(["--model", model_path, "--trace", str(REPO / "benchmarks/traces/smollm2-135m.jsonl"),
                 "--limit", str(REQUESTS), "--max-output-tokens", str(OUTPUT), "--methods",
                 "specdraft", "specdraft-off", "--loads", "2", "--k", "8", "--kv-gib", "1", "--max-num-seqs", "4",
                 "--warmup-trace", str(REPO / "benchmarks/traces/smollm2-135m.jsonl"),
                 "--warmup-requests", str(WARMUP), "--out-dir", str(out)]) == 0
    summary = json.loads((out / "served.json").read_text())
    # the warm-up: other prompts of the trace, served before the counters are read
    timed = [json.loads(line)["prompt"] for line in open(out / "prompts.jsonl")]
    warm = [json.loads(line)["prompt"] for line in open(out / "warmup-prompts.jsonl")]
    assert len(warm) == WARMUP == summary["warmup_requests"] and not set(warm) & set(timed)
    assert summary["machine"]["cores"] >= 1
    run, off = summary["runs"]
    assert (run["method"], off["method"]) == ("specdraft", "specdraft-off")
    result = json.loads((out / run["result_file"]).read_text())  # vLLM's own --save-result
    assert result["completed"] == REQUESTS and result["failed"] == 0
    asked = [json.loads(line)["output_tokens"] for line in open(out / "prompts.jsonl")]
    assert len(asked) == REQUESTS and max(asked) == OUTPUT
    assert result["total_output_tokens"] == sum(asked)  # --ignore-eos: exactly what was asked
    for key in ("request_rate", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
                "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "p99_e2el_ms"):
        assert isinstance(result[key], (int, float)), key
    assert result["output_throughput"] > 0 and result["median_tpot_ms"] > 0
    c = run["counters"]
    assert c["vllm:spec_decode_num_drafts"] > 0
    pairs = {"drafts": "num_drafts", "draft_tokens": "num_draft_tokens",
             "accepted_tokens": "num_accepted_tokens"}
    seen = {name: (c["specdraft:" + name], c["vllm:spec_decode_" + theirs])
            for name, theirs in pairs.items()}
    seen["errors"] = (c["specdraft:errors"], 0)
    assert all(ours == theirs for ours, theirs in seen.values()), seen  # (specdraft, vLLM)
    assert result["spec_decode_num_drafts"] == c["vllm:spec_decode_num_drafts"]
    assert result["spec_decode_accepted_tokens"] == c["vllm:spec_decode_num_accepted_tokens"]
    assert run["mal"] > 1
    # the chart's per-request TPOTs are vLLM's: their median is the result's
    from statistics import median

    from specdraft.served import request_latencies

    per_request = request_latencies(result)
    assert len(per_request["ttft"]) == REQUESTS
    assert abs(median(per_request["tpot"]) - result["median_tpot_ms"]) < 1e-6
    assert (out / "served-2.png").stat().st_size > 0
    # specdraft-off: the same server, every request opted out through vLLM's client
    assert off["completed"] == REQUESTS and off["failed"] == 0
    c = off["counters"]
    assert c["specdraft:requests"] == 2 * REQUESTS, c  # every one started and finished there
    assert c["specdraft:proposed_draft_tokens"] == c["specdraft:draft_tokens"] == 0, c
    assert c.get("vllm:spec_decode_num_draft_tokens", 0) == 0, c
