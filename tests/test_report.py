"""BENCHMARKS.md's generated tables equal what `specdraft report` makes from the committed JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdraft import report

ROOT = Path(__file__).resolve().parent.parent


def test_benchmarks_md_is_generated():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert report.BLOCK.search(text), "BENCHMARKS.md has no generated block"
    assert report.render(text, ROOT) == text, "stale table: run `specdraft report`"


def test_every_kind_is_used():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert {m.group(2) for m in report.BLOCK.finditer(text)} == set(report.KINDS)


@pytest.mark.parametrize("kind", sorted(report.KINDS))
def test_typed_edit_is_caught(kind):
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    m = next(m for m in report.BLOCK.finditer(text) if m.group(2) == kind)
    edited = text[: m.start(4)] + m.group(4).replace("|", "| 9.99 |", 1) + text[m.end(4):]
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
