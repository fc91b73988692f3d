"""``specdraft overhead`` end to end on a small shape: every method runs its steps through the
path vLLM runs (specdraft inside the runner hooks' wrappers), nothing fails, and the counts the
table is built from are consistent. Speed is the benchmark's business, not this test's."""

from __future__ import annotations

import json

from specdraft.overhead.command import main


def test_overhead_runs_every_method_through_the_engine_path(tmp_path):
    out = tmp_path / "overhead.json"
    rc = main(["--batches", "1,4", "--prompt-tokens", "256", "--output-tokens", "64",
               "--global-cache-tokens", "4000", "--block-steps", "4", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    for batch in ("1", "4"):
        results = data["batches"][batch]["results"]
        assert set(results) == {"specdraft", "arctic", "ngram"}, data.get("skipped")
        sd = results["specdraft"]
        assert sd["errors"] == 0
        assert "hooks' wrappers" in sd["driven_by"]
        # each request emits its 64 tokens, one step each at the most
        steps = {m: r["request_steps"] for m, r in results.items()}
        assert all(int(batch) * 64 // 17 <= s <= int(batch) * 64 for s in steps.values()), steps
        assert sd["accepted_per_step"] > 0 and sd["native_core_us_per_request_step"] > 0
        assert data["batches"][batch]["ratios"]["specdraft_over_arctic"]["ratio_of_minimums"] > 0
        for r in results.values():
            # the whole run per output token is the same time as per request-step, over more units
            per_token = r["us_per_request_step_mean"] / r["tokens_per_step"]
            assert abs(r["us_per_output_token_mean"] - per_token) <= 0.01 * per_token + 0.002, r
            assert 0 < r["first_step_share"] <= 1 and 0 <= r["after_end_share"] < 1, r
            if batch == "1":  # the only request's end is the run's end: no step cleans it up
                assert r["after_end_steps"] == 0, r
