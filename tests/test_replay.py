"""Replay on synthetic traces: exact accounting, determinism, and clear errors for bad files."""

import json
import random

import pytest

from specdraft.replay import (SpecdraftMethod, accepted_length, est_speedup, load_trace, replay,
                              replay_request)


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def synthetic(n=6, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = [rng.randrange(300) for _ in range(120)]
        output = base[30:90] + [rng.randrange(300) for _ in range(20)]
        out.append({"id": str(i), "workload": "echo" if i % 2 else "mixed",
                    "prompt_token_ids": base, "output_token_ids": output})
    return out


def test_accepted_length_walks_the_tree():
    # tree: 5 -> (6 -> 7), 5 -> 8 ; truth 5 8 9
    assert accepted_length([5, 6, 7, 8], [-1, 0, 1, 0], [5, 8, 9]) == 2
    assert accepted_length([5, 6, 7], [-1, 0, 1], [5, 6, 7, 1]) == 3
    assert accepted_length([4], [-1], [5]) == 0


def test_replay_counts_are_consistent_and_deterministic(tmp_path):
    recs = load_trace(write(tmp_path / "t.jsonl", synthetic()))
    a = replay(recs, ["specdraft-suffix", "specdraft-lookup", "vllm-ngram"], max_k=8)
    b = replay(recs, ["specdraft-suffix", "specdraft-lookup", "vllm-ngram"], max_k=8)
    assert a["results"] == b["results"]
    for w, methods in a["results"].items():
        out_tokens = sum(len(r["output_token_ids"]) for r in recs if r["workload"] == w)
        for m, agg in methods.items():
            assert agg["output_tokens"] == out_tokens
            # every pass emits its accepted tokens plus one of the target's
            assert agg["accepted_tokens"] + agg["target_passes"] == out_tokens
            assert agg["accepted_tokens"] <= agg["drafted_tokens"]
            assert agg["mean_acceptance_length"] > 1.5  # the outputs echo the prompts
            assert min(agg["est_speedup"].values()) > 0


def test_replay_request_respects_the_live_limit():
    out = list(range(50))
    m = SpecdraftMethod("s", {"adaptive": False})
    r = replay_request(m, list(range(50)) + [0], out, 8, limit=20)
    assert r["output_tokens"] == 20 and r["accepted_tokens"] + r["target_passes"] >= 20


def test_est_speedup_of_no_drafts_is_one():
    assert est_speedup([1] * 10, 10, "cpu-fp32") == pytest.approx(1.0)
    assert est_speedup([5, 5], 10, "gpu") == pytest.approx(5.0)


@pytest.mark.parametrize("line, message", [
    ("not json", "t.jsonl:2: not valid JSON"),
    ('{"id": "x", "prompt_token_ids": [1]}', "t.jsonl:2: missing field 'output_token_ids'"),
    ('{"id": "x", "prompt_token_ids": [1], "output_token_ids": [-3]}', "t.jsonl:2: field 'output_token_ids' must hold token ids"),
    ('{"id": "x", "prompt_token_ids": "1 2", "output_token_ids": [3]}', "t.jsonl:2: field 'prompt_token_ids' must be a list"),
    ('[1, 2]', "t.jsonl:2: expected a JSON object"),
])
def test_bad_trace_lines_name_file_and_line(tmp_path, line, message):
    good = json.dumps(synthetic(1)[0])
    p = tmp_path / "t.jsonl"
    p.write_text(good + "\n" + line + "\n")
    with pytest.raises(ValueError) as e:
        load_trace(str(p))
    assert message in str(e.value)


def test_replay_cli_writes_json_and_reports_bad_files(tmp_path, capsys):
    from specdraft.replay import main
    trace = write(tmp_path / "t.jsonl", synthetic(2))
    assert main(["--traces", trace, "--methods", "specdraft-suffix", "--json",
                 str(tmp_path / "o.json"), "--markdown", str(tmp_path / "o.md")]) == 0
    assert "specdraft-suffix" in json.loads((tmp_path / "o.json").read_text())["settings"]["methods"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    assert main(["--traces", str(bad), "--json", str(tmp_path / "x.json")]) == 2
    assert "bad.jsonl:1: missing field 'id'" in capsys.readouterr().err


STAMPED = {"id": "x", "prompt_token_ids": [1, 2, 3], "output_token_ids": [4, 5],
           "max_tokens": 2, "tokenizer": "smollm2-135m:49152:450fd25da1a689ff"}


@pytest.mark.parametrize("change, message", [
    ({"max_tokens": -5}, "field 'max_tokens' must be an integer >= 1, got -5"),
    ({"max_tokens": True}, "field 'max_tokens' must be an integer >= 1, got true"),
    ({"output_token_ids": [4, 49152]}, "within the vocabulary's 49152 ids: item 1 is 49152"),
    ({"tokenizer": None, "prompt_token_ids": [2**31]}, "within int32: item 0 is 2147483648"),
    ({"prompt_token_ids": [1, True]}, "field 'prompt_token_ids' must hold token ids (ints >= 0): "
                                      "item 1 is true"),
], ids=["negative-max-tokens", "bool-max-tokens", "over-vocab", "over-int32", "bool-token"])
def test_bad_trace_values_name_file_and_line(tmp_path, change, message):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(STAMPED) + "\n" + json.dumps({**STAMPED, **change}) + "\n")
    with pytest.raises(ValueError) as e:
        load_trace(str(p))
    assert str(e.value).startswith(f"{p}:2: "), str(e.value)
    assert message in str(e.value)


def test_replay_cli_refuses_bad_values_and_non_utf8(tmp_path, capsys):
    from specdraft.replay import main
    neg = tmp_path / "neg.jsonl"
    neg.write_text(json.dumps({**STAMPED, "max_tokens": -5}) + "\n")
    assert main(["--traces", str(neg), "--json", str(tmp_path / "x.json")]) == 2
    assert f"{neg}:1: field 'max_tokens'" in capsys.readouterr().err
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(json.dumps(STAMPED).encode() + b"\n" + b'{"id": "caf\xe9"}\n')
    assert main(["--traces", str(latin), "--json", str(tmp_path / "x.json")]) == 2
    assert f"{latin}:2: not UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_specdraft_options_reach_every_specdraft_method(tmp_path, capsys):
    from specdraft.replay import main
    recs = load_trace(write(tmp_path / "t.jsonl", synthetic()))
    full = replay(recs, ["specdraft-suffix", "vllm-ngram"], max_k=8, cost_models={"gpu": "gpu"})
    none = replay(recs, ["specdraft-suffix", "vllm-ngram"], max_k=8, cost_models={"gpu": "gpu"},
                  specdraft_options={"strategy": "lookup", "lookup_min": 64, "lookup_max": 64})
    for w in full["results"]:
        assert none["results"][w]["specdraft-suffix"]["drafted_tokens"] == 0  # no 64-gram repeats
        assert full["results"][w]["specdraft-suffix"]["drafted_tokens"] > 0
        assert none["results"][w]["vllm-ngram"] == full["results"][w]["vllm-ngram"]
    assert main(["--traces", str(tmp_path / "t.jsonl"), "--json", str(tmp_path / "x.json"),
                 "--specdraft-options", '{"max_waste": -1}']) == 2
    assert "max_waste" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
