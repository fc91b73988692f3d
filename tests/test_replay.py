"""Replay on synthetic traces: exact accounting, determinism, and clear errors for bad files."""

import json
import random

import pytest

from specdraft.proposers.controller import CostModel
from specdraft.replay import (Method, OracleMethod, SpecdraftMethod, accepted_length, batch_queue,
                              load_trace, replay, replay_batched, replay_request)


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
    methods = ["specdraft-suffix", "specdraft-lookup", "vllm-ngram"]
    a = replay(recs, methods, budget=8, batches=(1, 4))
    b = replay(recs, methods, budget=8, batches=(1, 4))
    assert a["results"] == b["results"]
    assert a["settings"]["cost_model"] == "medium"  # no model size in the trace
    for w, ms in a["results"].items():
        out_tokens = sum(len(r["output_token_ids"]) for r in recs if r["workload"] == w)
        for m, agg in ms.items():
            assert agg["output_tokens"] == out_tokens
            # every pass emits its accepted tokens plus one of the target's
            assert agg["accepted_tokens"] + agg["target_passes"] == out_tokens
            assert agg["accepted_tokens"] <= agg["drafted_tokens"]
            assert agg["tokens_per_pass"] == out_tokens / agg["target_passes"]
            assert agg["tokens_per_pass"] > 1.5  # the outputs echo the prompts
            # vLLM's mean acceptance length counts only the steps that drafted
            assert agg["mean_acceptance_length"] == 1 + agg["accepted_tokens"] / agg["drafts"]
            assert agg["mean_acceptance_length"] >= agg["tokens_per_pass"]
            assert set(agg["batch"]) == {"1", "4"}
            assert min(v["est_speedup"] for v in agg["batch"].values()) > 0


def test_replay_request_respects_the_live_limit():
    out = list(range(50))
    m = SpecdraftMethod("s", {"adaptive": False})
    r = replay_request(m, list(range(50)) + [0], out, 8, limit=20)
    assert r["output_tokens"] == 20 and r["accepted_tokens"] + r["target_passes"] >= 20


def test_batch_of_one_is_the_sequential_replay(tmp_path):
    recs = load_trace(write(tmp_path / "t.jsonl", synthetic(4)))
    seq = SpecdraftMethod("s", {"cost_model": "medium"})
    want = [replay_request(seq, r["prompt_token_ids"], r["output_token_ids"], 8) for r in recs]
    got = replay_batched(SpecdraftMethod("s", {"cost_model": "medium"}), recs, 8, 1, CostModel("medium"))
    for k in ("target_passes", "drafted_tokens", "accepted_tokens", "drafts"):
        assert got[k] == sum(w[k] for w in want), k


def test_no_drafts_is_speedup_one():
    class Never(SpecdraftMethod):
        def draft_batch(self, keys, budget, batch=None):
            return [([], []) for _ in keys]
    recs = synthetic(3)
    for b in (1, 2, 8):
        r = replay_batched(Never("n", {}), recs, 8, b, CostModel("medium"))
        assert r["est_speedup"] == pytest.approx(1.0) and r["drafted_tokens"] == 0


def test_short_traces_are_repeated_in_disjoint_vocabularies():
    recs = synthetic(3)
    q = batch_queue(recs, 8)
    assert len(q) == 9
    vocab = 1 + max(max(r["prompt_token_ids"] + r["output_token_ids"]) for r in recs)
    assert q[3][0] == [t + vocab for t in recs[0]["prompt_token_ids"]]
    blocks = [{t // vocab for t in p + o} for p, o, _, _ in q]
    assert blocks[0] == {0} and blocks[3] == {1} and blocks[8] == {2}


def test_sessions_wait_for_their_earlier_turns():
    class Log(SpecdraftMethod):
        events: list = []

        def start(self, key, prompt):
            self.events.append(("start", key))
            super().start(key, prompt)

        def finish(self, key):
            self.events.append(("finish", key))
            super().finish(key)
    recs = synthetic(4)
    for i, r in enumerate(recs):
        r["session"] = "s" if i < 2 else None  # requests 0 and 1 are two turns of one session
        r["max_tokens"] = 10 + 20 * (i == 0)
    m = Log("l", {"adaptive": False})
    replay_batched(m, recs, 4, 4, None)
    ev = m.events
    assert ev.index(("start", 2)) < ev.index(("finish", 1))  # others start at once
    assert ev.index(("finish", 1)) < ev.index(("start", 4))  # turn 2 after turn 1 ended


def test_large_batches_draft_less_and_never_lose(tmp_path):
    recs = load_trace(write(tmp_path / "t.jsonl", synthetic(6)))
    out = replay(recs, ["specdraft-suffix"], budget=16, cost_model="medium", batches=(1, 64))
    for w, ms in out["results"].items():
        b = ms["specdraft-suffix"]["batch"]
        assert b["64"]["drafted_per_step"] < b["1"]["drafted_per_step"], w
        assert min(v["est_speedup"] for v in b.values()) >= 1.0, w


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
                 str(tmp_path / "o.json"), "--markdown", str(tmp_path / "o.md"),
                 "--batches", "1", "4", "--cost-model", "large"]) == 0
    settings = json.loads((tmp_path / "o.json").read_text())["settings"]
    assert settings["methods"] == ["specdraft-suffix"] and settings["cost_model"] == "large"
    head = (tmp_path / "o.md").read_text().splitlines()[0]
    assert "| tokens/pass | MAL |" in head and "est x b4" in head
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


@pytest.mark.parametrize("model, preset", [("qwen2.5-coder-1.5b", "small"), ("smollm2-135m", "small"),
                                           ("meta-llama/Llama-3.1-8B", "medium"),
                                           ("Qwen/Qwen2.5-32B-Instruct", "large"), ("mystery", "medium")])
def test_default_cost_model_follows_the_trace_model_size(model, preset):
    from specdraft.replay import default_cost_model
    assert default_cost_model([{"model": model}]) == preset


def test_specdraft_options_reach_every_specdraft_method(tmp_path, capsys):
    from specdraft.replay import main
    recs = load_trace(write(tmp_path / "t.jsonl", synthetic()))
    full = replay(recs, ["specdraft-suffix", "vllm-ngram"], budget=8, cost_model="gpu", batches=(1,))
    none = replay(recs, ["specdraft-suffix", "vllm-ngram"], budget=8, cost_model="gpu", batches=(1,),
                  specdraft_options={"strategy": "lookup", "lookup_min": 64, "lookup_max": 64})
    for w in full["results"]:
        assert none["results"][w]["specdraft-suffix"]["drafted_tokens"] == 0  # no 64-gram repeats
        assert full["results"][w]["specdraft-suffix"]["drafted_tokens"] > 0
        assert none["results"][w]["vllm-ngram"] == full["results"][w]["vllm-ngram"]
    assert main(["--traces", str(tmp_path / "t.jsonl"), "--json", str(tmp_path / "x.json"),
                 "--specdraft-options", '{"max_waste": -1}']) == 2
    assert "max_waste" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


class _Oracle(OracleMethod):  # drafts the recorded truth, logs starts and finishes
    ends_in_step = False  # finishes reach it a step late, as vLLM reports them to its proposers

    def __init__(self, prompts, truth):
        super().__init__(1 << 30, {tuple(p): t for p, t in zip(prompts, truth)})
        self.log = []

    def start(self, key, prompt, scope=None):
        super().start(key, prompt)
        self.log.append(("start", key))

    def finish(self, key):
        super().finish(key)
        self.log.append(("finish", key))


def test_engine_replay_schedules_chunked_prefill_and_finishes_a_step_late():
    from specdraft.replay import EngineSchedule, replay_engine

    prompts = [list(range(10)), list(range(100, 110))]
    outputs = [[1, 2, 3], [4, 5, 6]]
    nodraft = _Oracle(prompts, outputs)
    nodraft.draft = lambda key, budget: ([], [])
    # budget 12: step 1 prefills request 1 and 2 tokens of request 2; step 2 decodes request 1
    # and finishes request 2's prefill (its first token); steps 3-4 decode
    r = replay_engine(nodraft, list(zip(prompts, outputs)), 4, EngineSchedule(2, 12, 16, False))
    assert r == {"steps": 4, "drafts": 0, "drafted_tokens": 0, "accepted_tokens": 0}
    # finished requests leave at the start of the next step (when the engine reports them)
    assert nodraft.log == [("start", 1), ("start", 2), ("finish", 1), ("finish", 2)]
    oracle = _Oracle(prompts, outputs)
    r = replay_engine(oracle, list(zip(prompts, outputs)), 4, EngineSchedule(2, 12, 16, False))
    # a perfect draft after the first token: the last token is the target's own
    assert r["accepted_tokens"] == 2 and r["drafts"] == 2 and r["steps"] == 3


def test_engine_replay_admits_at_most_max_num_seqs_and_skips_cached_blocks():
    from specdraft.replay import EngineSchedule, _cached_prefix, replay_engine

    assert _cached_prefix(list(range(40)), [list(range(35)) + [9]], 16) == 32
    assert _cached_prefix(list(range(32)), [list(range(32))], 16) == 16  # one token computed
    prompts = [list(range(20))] * 3
    outputs = [[1, 2], [1, 2], [1, 2]]
    nodraft = _Oracle(prompts, outputs)
    nodraft.draft = lambda key, budget: ([], [])
    one = replay_engine(nodraft, list(zip(prompts, outputs)), 4, EngineSchedule(1, 100, 16, True))
    assert one["steps"] == 6  # one request at a time: prefill + one decode each


def _answers(seed=26):
    rng = random.Random(seed)
    return [rng.randrange(300) for _ in range(80)], [rng.randrange(300) for _ in range(80)]


def test_scoped_trace_replays_each_scope_as_its_own_pool(tmp_path):
    """Records with a 'scope' field: each scope drafts only from its own earlier requests, so
    the mixed trace replays (batch 1, fixed draft length) as each scope's records replayed alone;
    the same records without scopes share one pool and draft from each other."""
    ans, other = _answers()
    recs = []
    for i, (scope, out) in enumerate((("a", ans), ("b", ans), (None, ans), ("a", ans),
                                      ("b", other), ("a", other))):
        rec = {"id": str(i), "prompt_token_ids": [1, 2, 3], "output_token_ids": out}
        if scope is not None:
            rec["scope"] = scope
        recs.append(rec)
    recs = load_trace(write(tmp_path / "t.jsonl", recs))

    def run(records):
        return replay_batched(SpecdraftMethod("s", {"adaptive": False}), records, 8, 1, None)

    mixed = run(recs)
    alone = [run([r for r in recs if r.get("scope") == k]) for k in ("a", "b", None)]
    for k in ("target_passes", "drafted_tokens", "accepted_tokens", "drafts"):
        assert mixed[k] == sum(a[k] for a in alone), k
    one_pool = run([{k: v for k, v in r.items() if k != "scope"} for r in recs])
    assert one_pool["accepted_tokens"] > mixed["accepted_tokens"]
    # per request: "b" and the unscoped request asking what "a" was answered gain nothing
    cold, b, unscoped, repeat = (replay_request(m, [1, 2, 3], ans, 8, scope=s)["accepted_tokens"]
                                 for m in [SpecdraftMethod("s", {"adaptive": False})]
                                 for s in ("a", "b", None, "a"))
    assert b == unscoped == cold < repeat


def test_bad_scope_field_is_named(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"id": "0", "prompt_token_ids": [1],
                                          "output_token_ids": [2], "scope": 3}])
    with pytest.raises(ValueError, match="scope"):
        load_trace(path)


def test_the_ceiling_is_the_best_draft_length_of_an_oracle_on_the_measured_passes():
    from specdraft.bench import replay_ceiling
    from specdraft.live import RunResult
    from specdraft.replay import EngineSchedule

    prompts = [list(range(i * 50, i * 50 + 20)) for i in range(4)]
    outputs = [list(range(1000 + 40 * i, 1040 + 40 * i)) for i in range(4)]
    schedule = {"max_num_seqs": 4, "max_num_batched_tokens": 256, "block_size": 16,
                "prefix_caching": True}

    def run(costs):
        return RunResult(outputs, 1.0, {"pass_costs": costs, "schedule": schedule})
    sched = lambda x: EngineSchedule(**x.counters["schedule"])  # noqa: E731
    # specdraft's engine measured the passes: 1 s plus 0.01 s a token scored, so long drafts
    # that are always right win
    flat = [[r, t, 1, 1.0 + 0.01 * t] for r in range(1, 5) for t in range(r, 400)]
    best = replay_ceiling({"none": [run(None)], "specdraft": [run(flat)]}, prompts, 8, sched)
    assert best["draft_length"] == 8
    # 39 tokens after the first: steps of 8 accepted + 1 of the target's, then 2 + 1
    assert best["accepted_tokens"] == 4 * (4 * 8 + 2)
    # a pass whose cost grows with the square of the tokens scored: no draft pays, and the
    # oracle that picks its length each step drafts nothing (under any cost linear in the
    # tokens a longer right draft always wins)
    steep = [[r, t, 1, 0.01 * t * t] for r in range(1, 5) for t in range(r, 400)]
    best = replay_ceiling({"none": [run(None)], "specdraft": [run(steep)]}, prompts, 8, sched)
    assert best["draft_length"] == "per step" and best["accepted_tokens"] == 0
    assert replay_ceiling({"none": [run(None)]}, prompts, 8, sched) is None  # nothing measured


def test_arctic_suffix_takes_the_installed_vllms_suffix_options():
    """The replay's arctic-suffix method is built with the vLLM adapter's suffix defaults (the
    release's SpeculativeConfig defaults, tests/test_vllm_source_contract.py); an option given
    overrides its default."""
    pytest.importorskip("arctic_inference")
    from specdraft.adapters import vllm_adapter
    from specdraft.replay import ArcticSuffixMethod

    defaults = vllm_adapter().SUFFIX_DEFAULTS
    m = ArcticSuffixMethod("a")
    assert m.depth == defaults["suffix_decoding_max_tree_depth"]
    assert m._speculate_args == {"max_spec_factor": defaults["suffix_decoding_max_spec_factor"],
                                 "min_token_prob": defaults["suffix_decoding_min_token_prob"]}
    m = ArcticSuffixMethod("a", suffix_decoding_max_tree_depth=5)
    m.start(1, [1, 2, 3, 1, 2, 3, 1, 2])
    m.extend(1, [3], 0)
    toks, parents = m.draft(1, 4)
    assert m.depth == 5 and toks and len(toks) == len(parents) <= 4


def _spy_drafter(method):
    """Record the drafter calls a specdraft method makes (name, and a step's rows and budgets)."""
    calls = []
    d = method.drafter
    for name in ("step", "start", "extend", "draft", "finish", "abort"):
        original = getattr(d, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            if _name == "step":
                calls.append(("step", list(args[0]), [int(b) for b in args[4]]))
            else:
                calls.append((_name,))
            return _original(*args, **kwargs)
        setattr(d, name, spy)
    return calls


@pytest.mark.parametrize("native", [True, False])
def test_specdraft_replays_through_the_engine_step(native):
    """replay_engine drives specdraft through SpecDrafter.step only: one step per pass over the
    rows that emitted (the row that ends in the step is a row with budget 0, as in the live
    engine), each ended request finished at once; the counts equal those of the step's own
    counters."""
    from specdraft.replay import EngineSchedule, replay_engine

    recs = synthetic(3)
    reqs = [(r["prompt_token_ids"], r["output_token_ids"][:12 + 9 * i], r["output_token_ids"])
            for i, r in enumerate(recs)]
    m = SpecdraftMethod("s", {"cost_model": "medium", "native": native})
    calls = _spy_drafter(m)
    r = replay_engine(m, reqs, 8, EngineSchedule(4, 512))
    assert {c[0] for c in calls} == {"step", "finish"}
    steps = [c for c in calls if c[0] == "step"]
    ends = [i for i, c in enumerate(calls) if c[0] == "finish"]
    assert len(ends) == 3
    for i in ends:  # the step before each finish held the ended request with budget 0
        assert calls[i - 1][0] in ("step", "finish")
    last = [c for c in steps if 0 in c[2]]
    assert len(last) >= 1 and all(len(c[1]) == len(c[2]) for c in steps)
    c = m.drafter.counters
    assert (c.drafts, c.drafted_tokens) == (r["drafts"], r["drafted_tokens"])
    assert c.requests == c.finished == 3 and not m.drafter.req_ids()


def test_specdraft_step_rows_are_the_pass_the_replay_sized():
    """The rows of a specdraft method's step are the pass the replay prices: a shape that does
    not match them is an error, not a silently different batch for the controller."""
    m = SpecdraftMethod("s", {"cost_model": "medium"})
    m.start(1, [1, 2, 3, 4])
    m.extend(1, [5], None)
    m.start(2, [7, 8])  # started, not emitted yet: a row only when the pass counts it
    assert m.draft_batch([1], 4, (1, 5.0, 5.0)) is not None
    m.extend(1, [1], None)
    assert m.draft_batch([1], 4, (2, 8.0, 6.0)) is not None  # its prefill is in this pass
    assert m.drafter.num_tokens(2) == 2
    m.extend(1, [2], None)
    with pytest.raises(RuntimeError, match="not the pass"):
        m.draft_batch([1], 4, (3, 9.0, 7.0))


@pytest.mark.parametrize("strategy", ["tree", "suffix"])
def test_specdraft_method_trees_are_whole_where_the_replay_verifies_trees(strategy):
    rng = random.Random(2)
    seq = [rng.randrange(6) for _ in range(400)]
    got = {}
    for chain_only in (False, True):
        m = SpecdraftMethod("s", {"strategy": strategy, "adaptive": False, "max_children": 3},
                            chain_only=chain_only)
        m.start(1, seq)
        m.extend(1, [0], None)
        got[chain_only] = m.draft(1, 16)
    toks, parents = got[True]
    assert parents == list(range(-1, len(toks) - 1))
    toks, parents = got[False]
    assert toks and len(toks) == len(parents) <= 16
    assert (parents != list(range(-1, len(toks) - 1))) == (strategy == "tree")
