"""`specdraft demo` without an engine: turns sent wave by wave, both workloads run in each
method's turn from a clean slate, the round that disagrees is the one run again, and the lines
a newcomer reads (the one table, the re-run and noise notes) come from the result."""

from __future__ import annotations

import pytest

from specdraft import bench, demo, live


def _run(seconds: float, accepted: int, outputs=((1, 2, 3),)) -> live.RunResult:
    return live.RunResult([list(o) for o in outputs], seconds,
                          {"drafts": accepted and 10, "drafted_tokens": 2 * accepted,
                           "accepted_tokens": accepted}, [(0.1, 0.02)], 1)


def _table(seconds: dict, accepted: dict) -> dict:
    runs = {m: [_run(s, a) for s, a in zip(seconds[m], accepted[m])] for m in seconds}
    return bench.summarize(runs, k=8)


class _FakeEngine:
    def __init__(self, name, log):
        self.name, self.log = name, log


@pytest.fixture
def fake_live(monkeypatch):
    """live's engine calls replaced: each logs what it was asked; generate answers prompt ids + 1."""
    log = []

    def generate(llm, prompts, max_tokens, ignore_eos=False, **kw):
        log.append(("generate", llm.name, [tuple(p) for p in prompts]))
        return live.RunResult([[p[0] + 1] for p in prompts], 0.5 * len(prompts),
                              {"drafts": 1, "drafted_tokens": 2, "accepted_tokens": 1},
                              [(0.1, 0.01)] * len(prompts), len(prompts))

    monkeypatch.setattr(live, "generate", generate)
    monkeypatch.setattr(live, "reset_cross_request_state",
                        lambda llm: log.append(("reset", llm.name)) or {})
    monkeypatch.setattr(live, "engine_schedule", lambda llm: {})
    monkeypatch.setattr(live, "proposer_time", lambda llm: None)
    monkeypatch.setattr(live, "step_times", lambda llm: None)
    monkeypatch.setattr(live, "cpu_pressure", lambda: None)
    return log


def test_waves_are_sent_one_after_another(fake_live):
    prompts = [[10], [20], [30], [40]]
    res = bench.generate_waves(_FakeEngine("e", fake_live), prompts, [4] * 4, [[0, 2], [1], [3]])
    sent = [c[2] for c in fake_live if c[0] == "generate"]
    assert sent == [[(10,), (30,)], [(20,)], [(40,)]]
    assert res.outputs == [[11], [21], [31], [41]]  # in prompt order
    assert res.seconds == pytest.approx(2.0) and res.counters["accepted_tokens"] == 3
    assert res.first_step == 2 and len(res.latencies) == 4


def test_workloads_run_in_each_methods_turn_from_a_clean_slate(fake_live):
    engines = bench.LoadedEngines.of({m: _FakeEngine(m, fake_live) for m in ("none", "a", "b")})
    work = {"edit": bench.Workload([[1], [2], [3]], 4, [[0], [1, 2]]),
            "chat": bench.Workload([[7], [8]], 4)}
    runs = bench.run_interleaved(engines, [], None, 2, lambda msg: None, warmup_rounds=1,
                                 workloads=work)
    assert set(runs) == {"edit", "chat"} and all(len(runs[w][m]) == 2 for w in runs for m in runs[w])
    assert runs["edit"]["a"][0].outputs == [[2], [3], [4]]
    # each run: a short warm-up request, the reset, then the workload's waves
    calls = [c for c in fake_live if c[1] == "none"]
    first = calls[:6]  # none's first run (edit), then its chat run
    assert [c[0] for c in first] == ["generate", "reset", "generate", "generate", "generate", "reset"]
    assert first[2][2] == [(1,)] and first[3][2] == [(2,), (3,)] and first[4][2] == [(7,)]
    # without workloads (specdraft bench): {method: runs}, one progress line a timed run
    lines = []
    single = bench.run_interleaved(engines, [[5], [6]], 4, 2, lines.append)
    assert set(single) == {"none", "a", "b"} and single["a"][1].outputs == [[6], [7]]
    assert len(lines) == 2 * 3 and lines[0].startswith("[bench] round 1/2 none ")
    # a round run again keeps its rotation: round 2 (index 1) starts with the second method
    fake_live.clear()
    bench.run_interleaved(engines, [], None, 1, lambda msg: None, workloads={"chat": work["chat"]},
                          first_round=1)
    assert [c[1] for c in fake_live if c[0] == "reset"] == ["a", "b", "none"]


def test_the_round_that_disagrees_is_run_again():
    # b's round 3 is 40% faster than its others: beyond the 25% margin
    table = _table({"none": [10, 10, 10], "b": [8, 8, 5.7]}, {"none": [0, 0, 0], "b": [50, 50, 50]})
    assert table["b"]["rounds_disagree"] and demo.rounds_to_rerun(table) == [2]
    # accepted tokens alone beyond the 5% margin: the round farthest from the median
    table = _table({"none": [10, 10, 10], "b": [8, 8, 8]}, {"none": [0, 0, 0], "b": [50, 60, 51]})
    assert demo.rounds_to_rerun(table) == [1]
    table = _table({"none": [10, 10.5, 10], "b": [8, 8.2, 8]}, {"none": [0, 0, 0], "b": [50, 50, 51]})
    assert not table["b"]["rounds_disagree"] and demo.rounds_to_rerun(table) == []


def _result(tables: dict, reruns=()) -> dict:
    settings = {"model": "m", "max_tokens": 128, "num_speculative_tokens": 8, "rounds": 3,
                "warmup_rounds": 1, "dtype": "float32"}
    return {"settings": settings, "memory_plan": {"mode": "together"}, "reruns": list(reruns),
            "workloads": {w: {"about": f"about {w}", "prompts": [], "waves": None, "table": t}
                          for w, t in tables.items()}}


def test_screen_is_one_table_and_says_when_the_machine_was_noisy():
    calm = _table({"none": [10, 10, 10], "vllm-suffix": [8, 8, 8], "specdraft": [7, 7, 7]},
                  {"none": [0] * 3, "vllm-suffix": [50] * 3, "specdraft": [60] * 3})
    noisy = _table({"none": [10, 10, 10], "vllm-suffix": [9, 9, 9], "specdraft": [9, 9, 6]},
                   {"none": [0] * 3, "vllm-suffix": [5] * 3, "specdraft": [6] * 3})
    rerun = demo.rerun_record("fresh_chat", 2, noisy)
    result = _result({"multi_turn_edit": calm, "fresh_chat": noisy}, [rerun])
    lines = demo.demo_screen(result).splitlines()
    assert lines[1:3] == ["multi_turn_edit: about multi_turn_edit", "fresh_chat: about fresh_chat"]
    header = next(i for i, line in enumerate(lines) if line.startswith("workload"))
    rows = lines[header + 2: header + 8]
    assert [r.split()[:2] for r in rows] == [[w, m] for w in ("multi_turn_edit", "fresh_chat")
                                             for m in ("none", "vllm-suffix", "specdraft")]
    notes = lines[header + 8:]
    assert len(notes) == 2
    assert notes[0].startswith("round 3 of fresh_chat was run once more") and "specdraft 50% in speed" in notes[0]
    assert notes[1] == ("rounds of specdraft on fresh_chat differ by 50% in speed even after a "
                        "re-run: this machine was noisy; treat ratios within 50% as ties")
    # BENCHMARKS' block of a demo result: each workload's tables, then the same notes
    from specdraft import report
    text = report.live_table(result)
    assert text.count("| round |") == 2 and "**fresh_chat**: about fresh_chat." in text
    assert notes[1] + "." in text


def test_edit_sessions_carry_the_source_and_three_turns():
    sessions = demo.edit_sessions()
    assert len(sessions) == 2 and all(len(turns) == len(demo.EDIT_TURNS) == 3 for _, turns in sessions)
    name, turns = sessions[0]
    assert name == "shlex.quote" and "def quote(" in turns[0] and "`s` to `text`" in turns[2]


@pytest.mark.parametrize("noisy_again", [False, True])
def test_a_disagreeing_round_is_run_once_more(noisy_again, fake_live, monkeypatch, tmp_path):
    """The whole command with engines faked: specdraft's second fresh-chat round runs 5x faster
    than its others; that round is run again (every method), and replaced. If the re-run is as
    far off, one line says the machine was noisy."""
    import json

    from specdraft import models

    calls = {"n": 0}

    def generate(llm, prompts, max_tokens, ignore_eos=False, **kw):
        secs = 1.0 if llm.name == "none" else 0.5
        if llm.name == "specdraft" and prompts == [[7], [8]]:
            calls["n"] += 1  # 1: warm-up round, 2-4: rounds 1-3, 5: the re-run
            if calls["n"] == 3 or (calls["n"] == 5 and noisy_again):
                secs = 0.1
        return live.RunResult([[p[0] + 1] * 3 for p in prompts], secs,
                              {"drafts": 1, "drafted_tokens": 2, "accepted_tokens": 1},
                              [(0.1, 0.01)] * len(prompts), len(prompts))

    monkeypatch.setattr(live, "generate", generate)
    monkeypatch.setattr(models, "resolve_model", lambda name, progress=None: str(tmp_path))
    monkeypatch.setattr(live, "plan_engines", lambda path, n, dtype: live.EnginePlan(
        "together", n, 1, 1, 1, 1, 1 << 40))
    monkeypatch.setattr(bench, "start_engines", lambda path, methods, k, say, plan, **kw:
                        bench.LoadedEngines.of({m: _FakeEngine(m, fake_live) for m in methods}))
    monkeypatch.setattr(demo, "build_workloads", lambda tok, llm, n, say: {
        "multi_turn_edit": {"names": ["s/turn1", "s/turn2"], "prompts": [[1], [2]],
                            "waves": [[0], [1]]},
        "fresh_chat": {"names": ["chat1", "chat2"], "prompts": [[7], [8]], "waves": None}})
    monkeypatch.setattr(_FakeEngine, "get_tokenizer", lambda self: None, raising=False)
    out = tmp_path / "demo.json"
    assert demo.main(["--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert calls["n"] == 5
    (rerun,) = result["reruns"]
    assert rerun["workload"] == "fresh_chat" and rerun["round"] == 2
    assert rerun["replaced"]["specdraft"]["speedup"] == pytest.approx(10.0)
    table = result["workloads"]["fresh_chat"]["table"]
    assert [p["speedup"] for p in table["specdraft"]["rounds"]] == pytest.approx(
        [2.0, 10.0 if noisy_again else 2.0, 2.0])
    assert table["specdraft"]["rounds_disagree"] == noisy_again
    notes = demo.demo_notes(result)
    assert notes[0].startswith("round 2 of fresh_chat was run once more")
    assert len(notes) == (2 if noisy_again else 1)
    if noisy_again:
        assert notes[1] == ("rounds of specdraft on fresh_chat differ by 400% in speed even after "
                            "a re-run: this machine was noisy; treat ratios within 400% as ties")
    assert (tmp_path / "demo.png").exists()
