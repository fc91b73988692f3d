"""BENCHMARKS.md's and README.md's generated tables equal what `specdraft report` makes from the
committed JSON (README's first screen: the demo's table as the committed demo result has it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdraft import report

ROOT = Path(__file__).resolve().parent.parent


DEMO_JSON = "benchmarks/results/demo-smollm2-135m.json"


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", report.FILES)
def test_markdown_is_generated(name):
    text = _text(name)
    assert report.BLOCK.search(text), f"{name} has no generated block"
    assert report.render(text, ROOT) == text, f"stale table in {name}: run `specdraft report`"


def test_every_kind_is_used():
    kinds = {m.group(2) for name in report.FILES for m in report.BLOCK.finditer(_text(name))}
    assert kinds == set(report.KINDS)


def test_readme_shows_the_committed_demo():
    """README's first screen is the demo's table from the committed demo result, as the demo
    prints it: the block names that file, and its rows are the JSON's figures, every workload's
    (the workload first), with the notes on rounds run again and noise."""
    import json

    from specdraft.bench import format_live_summary
    from specdraft.demo import demo_notes

    text = _text("README.md")
    blocks = [m for m in report.BLOCK.finditer(text) if m.group(2) == "demo"]
    assert [m.group(3) for m in blocks] == [DEMO_JSON]
    assert text.index(blocks[0].group(0)) < text.index("## Compatibility")  # the first screen
    result = json.loads((ROOT / DEMO_JSON).read_text(encoding="utf-8"))
    body = blocks[0].group(4)
    assert set(result["workloads"]) == {"multi_turn_edit", "fresh_chat"}
    for w, wl in result["workloads"].items():
        table = wl["table"]
        assert set(table) >= {"none", "vllm-suffix", "specdraft"}
        rows = body.splitlines()
        for line in format_live_summary(table)[2:]:
            assert any(r.endswith(line) and r[: -len(line)].strip() == w for r in rows), line
        spec = table["specdraft"]["vs_suffix"]
        row = next(r for r in rows if r.split()[:2] == [w, "specdraft"])
        assert f"{spec['tokens_per_s']:.2f}" in row.split() and f"{spec['decode']:.2f}" in row.split()
    for note in demo_notes(result):
        assert note in body


def _typed_edit(body: str) -> str:
    """``body`` with its first digit changed, as a hand edit of a generated table would."""
    i = next(i for i, c in enumerate(body) if c.isdigit())
    return body[:i] + str((int(body[i]) + 1) % 10) + body[i + 1:]


@pytest.mark.parametrize("kind", sorted(report.KINDS))
def test_typed_edit_is_caught(kind):
    name, m = next((name, m) for name in report.FILES for m in report.BLOCK.finditer(_text(name))
                   if m.group(2) == kind)
    text = _text(name)
    edited = text[: m.start(4)] + _typed_edit(m.group(4)) + text[m.end(4):]
    assert edited != text and report.render(edited, ROOT) == text


def test_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match="unknown kind"):
        report.render("<!-- generated: nope x.json -->\n<!-- end generated -->", tmp_path)


def test_replay_blocks_come_from_the_replay_json(tmp_path):
    import json

    from specdraft.replay import markdown_table, replay
    recs = [{"id": str(i), "workload": "echo", "session": None, "prompt_token_ids": list(range(40)),
             "output_token_ids": list(range(10, 40))} for i in range(2)]
    out = replay(recs, ["specdraft-suffix"], budget=8, cost_model="small", batches=(1, 2))
    (tmp_path / "r.json").write_text(json.dumps(out))
    text = ("<!-- generated: replay r.json -->\nstale\n<!-- end generated -->\n"
            "<!-- generated: replay-summary r.json -->\n<!-- end generated -->\n")
    new = report.render(text, tmp_path)
    assert markdown_table(json.loads(json.dumps(out))) in new and "stale" not in new
    assert "cost model `small`" in new and "specdraft-suffix est x b1 / b2" in new
