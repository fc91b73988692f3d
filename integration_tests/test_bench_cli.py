"""``specdraft bench`` end to end as a user runs it: its own vLLM CPU engines, a round, the
replay, the JSON and the charts (the smallest setting: SmolLM2, two requests, 16 tokens)."""

from __future__ import annotations

import json
import os

from specdraft import bench

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "benchmarks", "traces", "smollm2-135m.jsonl")


def test_bench_command_writes_results_charts_and_replay(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = bench.main(["--traces", TRACE, "--model", "smollm2-135m", "--methods", "none",
                     "specdraft", "--limit", "2", "--max-tokens", "16", "-k", "4", "--rounds",
                     "1", "--warmup-rounds", "0", "--max-num-seqs", "2", "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "replay of the live outputs" in printed and "[bench] results:" in printed
    data = json.loads(out.read_text())
    row = data["table"]["specdraft"]
    assert row["identical_to_no_spec"]
    assert row["replayed"]["drafted_tokens"] == row["drafted_tokens"]  # the replay matches
    assert data["table"]["specdraft"]["rounds"][0]["schedule"]["first_step"] in (1, 2)
    for png in ("bench.png", "bench-pass-costs.png"):
        assert (tmp_path / png).stat().st_size > 0, png
    assert (tmp_path / "bench.log").stat().st_size > 0  # vLLM's output went to the log
