"""Where a bench run's time went: its timed engine steps, split into decode steps and steps that
also prefill (specdraft.bench.step_summary), and the table of them."""

from __future__ import annotations

import pytest

from specdraft import bench


def test_steps_split_into_decode_and_prefill_by_the_draft_bound():
    # [requests, tokens scheduled, steps, mean seconds]
    times = [[4, 4, 10, 0.05], [4, 68, 5, 0.2], [4, 69, 2, 0.5], [1, 300, 1, 1.0]]
    st = bench.step_summary(times, k=16)
    assert st["steps"] == 18 and st["seconds"] == pytest.approx(0.5 + 1.0 + 1.0 + 1.0)
    # 4 requests x (1 + 16) = 68 tokens is still decode; 69 prefills too
    assert st["decode_steps"] == 15 and st["decode_seconds"] == pytest.approx(1.5)
    assert st["prefill_steps"] == 3 and st["prefill_seconds"] == pytest.approx(2.0)
    assert st["decode_tokens_per_step"] == pytest.approx((40 + 340) / 15)
    assert st["decode_ms_per_step"] == pytest.approx(100.0)
    assert bench.step_summary([], 16) is None and bench.step_summary(None, 16) is None


def test_steps_table_takes_the_median_of_rounds():
    a = bench.step_summary([[2, 2, 10, 0.1]], k=4)
    b = bench.step_summary([[2, 2, 30, 0.1]], k=4)
    c = bench.step_summary([[2, 2, 20, 0.1]], k=4)
    table = {"none": {"steps": bench._median_steps([a, b, c])}, "x": {"steps": None}}
    assert table["none"]["steps"]["steps"] == 20
    text = bench.format_steps_table(table)
    assert text.splitlines()[2].split()[:2] == ["none", "20"] and "x " not in text
    assert bench._median_steps([a, None]) is None
