"""``specdraft soak``'s pieces that need no server: the request mix, the bad requests, the
metrics parsing and the pass conditions (the soak itself is a benchmark: BENCHMARKS.md)."""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from specdraft.soak import (BAD_KINDS, TENANTS, UNKNOWN_OPTION, TYPED_OPTION, arrival_gaps,
                            bad_answer_ok, bad_request, evaluate, parse_metrics, request_mix,
                            windows)


def draws(n=2000, seed=0, **kw):
    return list(itertools.islice(request_mix(seed, **kw), n))


def test_mix_fractions_over_2000_draws():
    mix = draws(num_prompts=42)
    n = len(mix)
    bad = [m for m in mix if m["kind"] == "bad"]
    streamed = [m for m in mix if m["kind"] != "bad"]
    cancel = [m for m in streamed if m["kind"] == "cancel"]
    salted = [m for m in mix if m["salt"]]
    assert 0.035 < len(bad) / n < 0.065
    assert 0.08 < len(cancel) / len(streamed) < 0.12
    assert 0.17 < len(salted) / n < 0.23
    assert {m["salt"] for m in salted} <= set(TENANTS) and len({m["salt"] for m in salted}) > 40
    assert [m["bad"] for m in bad[:8]] == list(BAD_KINDS) * 2  # cycling through the kinds
    assert all(m["bad"] is None for m in streamed)
    assert {m["prompt"] for m in mix} == set(range(42))


def test_mix_is_deterministic_for_a_seed():
    assert draws(500, seed=3) == draws(500, seed=3)
    assert draws(500, seed=3) != draws(500, seed=4)


def test_arrival_gaps_have_mean_one_over_rate():
    gaps = list(itertools.islice(arrival_gaps(2.0, 0), 4000))
    assert abs(sum(gaps) / len(gaps) - 0.5) < 0.03
    assert gaps[:10] == list(itertools.islice(arrival_gaps(2.0, 0), 10))


def test_bad_request_builders():
    unknown = json.loads(bad_request("unknown_option", "m", 2048))
    assert unknown["vllm_xargs"] == {UNKNOWN_OPTION: 1} and unknown["model"] == "m"
    wrong = json.loads(bad_request("wrong_type", "m", 2048, salt="tenant-01"))
    assert wrong["vllm_xargs"] == {TYPED_OPTION: [1, 2]} and wrong["cache_salt"] == "tenant-01"
    long = json.loads(bad_request("too_long", "m", 2048))
    assert long["prompt"].count(" hello") > 2048
    with pytest.raises(ValueError):
        json.loads(bad_request("malformed_json", "m", 2048))
    with pytest.raises(ValueError, match="unknown bad request kind"):
        bad_request("nope", "m", 2048)


@pytest.mark.parametrize("kind,status,text,ok", [
    ("unknown_option", 400, f"unknown per-request specdraft option '{UNKNOWN_OPTION}'", True),
    ("unknown_option", 400, "Bad Request", False),           # does not name the key
    ("unknown_option", 500, f"{UNKNOWN_OPTION}", False),     # not a 4xx
    ("wrong_type", 400, f"invalid per-request specdraft option {TYPED_OPTION}=[1, 2]", True),
    ("too_long", 400, "This model's maximum context length is 2048 tokens", True),
    ("too_long", 200, "maximum context length", False),
    ("malformed_json", 400, "JSON decode error", True),
    ("malformed_json", 422, "Field required", False),
])
def test_bad_answer_ok(kind, status, text, ok):
    assert bad_answer_ok(kind, status, text) is ok


def test_parse_metrics_live_requests():
    text = "\n".join([
        "# HELP specdraft:requests_total Request events seen by the drafter.",
        'specdraft:requests_total{engine="0",event="started"} 10.0',
        'specdraft:requests_total{engine="0",event="finished"} 7.0',
        'specdraft:requests_total{engine="0",event="aborted"} 2.0',
        'specdraft:global_cache_bytes{engine="0"} 1234.0',
        'specdraft:errors_total{engine="0"} 0.0',
        'vllm:num_requests_running{engine="0"} 1.0',
    ])
    m = parse_metrics(text)
    assert m["live"] == 1 and m["requests_aborted"] == 2
    assert m["specdraft:global_cache_bytes"] == 1234 and m["specdraft:errors"] == 0
    assert "vllm:num_requests_running" not in m


def passing() -> dict:
    samples = []
    for i in range(61):  # 10 minutes, one sample every 10 s; warm-up 100 s
        t = 10.0 * i
        samples.append({"t": t, "rss": (900 + min(t, 100)) * 2**20 + (i % 3) * 2**20,
                        "cache_tokens": min(400 * i, 8000), "cache_bytes": min(i, 20) * 50_000,
                        "live": 3 if i < 60 else 0, "spec_errors": 0})
    return {"samples": samples, "warmup_s": 100, "cache_budget_tokens": 8192,
            "counts": {"5xx": 0, "stream_errors": 0, "client_errors": 0},
            "bad": [{"kind": k, "ok": True} for k in BAD_KINDS * 3],
            "shutdown": {"exit_code": 0, "exit_s": 4.2, "children_left": []},
            "greedy": {"n": 12, "answered": 12, "identical": 12}}


def failed(result) -> set[str]:
    return {r["condition"] for r in evaluate(result) if not r["passed"]}


def test_evaluate_passing_run():
    rows = evaluate(passing())
    assert all(r["passed"] for r in rows), rows
    assert len(rows) == 8


def test_windows_cut_the_time_after_the_warmup_in_thirds():
    first, last = windows(passing()["samples"], 100)
    assert first[0]["t"] == 100 and first[-1]["t"] <= 100 + 500 / 3
    assert last[-1]["t"] == 600 and last[0]["t"] >= 600 - 500 / 3


def mutate(fn):
    r = copy.deepcopy(passing())
    fn(r)
    return r


@pytest.mark.parametrize("condition,change", [
    ("no 5xx", lambda r: r["counts"].update({"5xx": 1})),
    ("no 5xx", lambda r: r["counts"].update({"stream_errors": 2})),
    ("no 5xx", lambda r: r["counts"].update({"client_errors": 1})),
    ("bad requests: 4xx naming the fault", lambda r: r["bad"][1].update({"ok": False})),
    ("bad requests: 4xx naming the fault",
     lambda r: r.update({"bad": [b for b in r["bad"] if b["kind"] != "too_long"]})),
    ("no proposer errors", lambda r: r["samples"][30].update({"spec_errors": 1})),
    ("RSS bounded", lambda r: [s.update({"rss": s["rss"] + s["t"] * 2**20})
                               for s in r["samples"]]),
    ("cache bounded", lambda r: r["samples"][40].update({"cache_tokens": 9000})),
    ("cache bounded", lambda r: [s.update({"cache_bytes": s["t"] * 1000})
                                 for s in r["samples"]]),
    ("live requests back to 0", lambda r: r["samples"][-1].update({"live": 1})),
    ("clean exit", lambda r: r["shutdown"].update({"exit_code": -9})),
    ("clean exit", lambda r: r["shutdown"].update({"exit_code": None, "exit_s": None})),
    ("clean exit", lambda r: r["shutdown"].update({"children_left": [{"pid": 1}]})),
    ("greedy sample identical", lambda r: r["greedy"].update({"identical": 11})),
    ("greedy sample identical", lambda r: r["greedy"].update({"answered": 10, "identical": 10})),
])
def test_evaluate_fails_each_condition(condition, change):
    assert failed(mutate(change)) == {condition}
