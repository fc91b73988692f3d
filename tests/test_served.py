"""`specdraft served`'s pieces that need no server: the methods' speculative configs, the loads,
the per-request latencies behind the charts and the generated table (the live run is
integration_tests/test_vllm_served.py)."""

from __future__ import annotations

import json

import pytest

from specdraft import report
from specdraft.errors import UserError
from specdraft.served import (OPTED_OUT, SERVER_FLAGS, machine, main, parse_load,
                              request_latencies, server_command, speculative_config)


def test_methods_configs():
    assert speculative_config("none", 16) is None
    assert speculative_config("vllm-suffix", 16) == {"method": "suffix", "num_speculative_tokens": 16}
    on = speculative_config("specdraft", 8, {"max_depth": 12})
    assert on["method"] == "custom_class" and on["specdraft"] == {"max_depth": 12}
    # specdraft-off is specdraft's server; the requests opt out
    assert speculative_config("specdraft-off", 8, {"max_depth": 12}) == on
    assert OPTED_OUT == {"vllm_xargs": {"specdraft_speculate": 0}}
    with pytest.raises(UserError, match="--methods: unknown method 'eagle'; accepted: none"):
        speculative_config("eagle", 8)
    # none-sync: no speculation, the server started with async scheduling off
    assert speculative_config("none-sync", 16) is None
    cmd = server_command("m", 8000, None, dtype="float32", max_model_len=64, max_num_seqs=2,
                         flags=SERVER_FLAGS["none-sync"])
    assert cmd[-1] == "--no-async-scheduling" and "--speculative-config" not in cmd


def test_loads():
    assert parse_load("c4") == ("inf", 4)
    assert parse_load("inf") == ("inf", None)
    assert parse_load("0.5") == ("0.5", None)
    for bad in ("c0", "0", "-1", "fast", "c"):
        with pytest.raises(UserError, match="--loads: .* accepted: a request rate > 0"):
            parse_load(bad)


def test_request_latencies_are_vllms():
    """TPOT = (latency - TTFT) / (output tokens - 1), ms; failed and one-token requests have no
    TPOT, failed ones no TTFT either."""
    result = {"ttfts": [0.5, 1.0, 0.2, 0.0], "latencies": [2.5, 1.0, 0.2, 0.0],
              "output_lens": [5, 1, 1, 0], "errors": ["", "", "", "boom"]}
    got = request_latencies(result)
    assert got["ttft"] == [500.0, 1000.0, 200.0]
    assert got["tpot"] == [500.0]


def _run(method, load, tput, repeat=0, drafts=0, drafted=0, accepted=0):
    counters = {} if method == "none" else {
        "vllm:spec_decode_num_drafts": drafts, "vllm:spec_decode_num_draft_tokens": drafted,
        "vllm:spec_decode_num_accepted_tokens": accepted}
    return {"method": method, "load": load, "repeat": repeat, "output_throughput": tput,
            "median_ttft_ms": 10, "p99_ttft_ms": 20, "median_tpot_ms": 5, "p99_tpot_ms": 6,
            "median_itl_ms": 5, "p99_itl_ms": 7, "counters": counters,
            "mal": 1 + accepted / drafts if drafts else None}


def test_served_table_medians_and_ratios():
    summary = {"loads": ["inf"], "runs": [
        _run("none", "inf", 10.0), _run("specdraft", "inf", 9.0, drafts=10, drafted=40, accepted=20),
        _run("none", "inf", 12.0, 1), _run("specdraft", "inf", 11.0, 1, drafts=10, drafted=60,
                                           accepted=30)]}
    lines = report.served_table(summary).splitlines()
    assert lines[2] == "| inf | none | 10 / 20 | 5.0 / 6.0 | 5.0 / 7.0 | 11.0 | 1.00 | - | - | 2 |"
    # medians over the two repeats: 10.0 tok/s, 0.91x none's 11.0, MAL 3.5, 50 / 25 tokens
    assert lines[3] == ("| inf | specdraft | 10 / 20 | 5.0 / 6.0 | 5.0 / 7.0 | 10.0 | 0.91 | 3.50 "
                        "| 50 / 25 | 2 |")


def test_machine_says_whether_bfloat16_has_instructions():
    m = machine()
    assert m["cores"] >= 1 and m["cpu"]
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    assert m["bf16_instructions"] == ("avx512_bf16" in flags.split() or "amx_bf16" in flags.split())


def test_warmup_requests_must_be_a_count(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi", "output_tokens": 4}) + "\n")
    with pytest.raises(UserError, match="--warmup-requests"):
        main(["--model", str(tmp_path), "--prompts", str(prompts), "--warmup-requests", "0",
              "--out-dir", str(tmp_path / "out")])
