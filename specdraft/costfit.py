"""Fit the verification cost presets (``small``, ``medium``, ``large``) to measured pass times.

The data is ``benchmarks/data/h200_cost_curve.md`` (a copy of the project's measurement notes,
``../shared/data/h200_cost_curve.md``): milliseconds per verification pass on one H200 for the
shapes of Qwen2.5-1.5B, Llama-3.1-8B and Qwen2.5-32B, by batch size B, tokens scored per request
q and context length L. The model (documented in ``proposers/controller.py``) is

    cost = fixed + kv * max(S, kv_min_batch * L_max) + attention * (S / B) * T + dense(T)
    dense(T) = slope * (sqrt((T - knee)^2 + width^2) + (T - knee)) / 2

with T = B * q tokens scored, S = B * L context tokens. For each (kv_min_batch, knee, width) on a
grid the four coefficients are a linear least-squares fit of the relative error; the grid point
with the smallest squared relative error wins. Only q >= 2 is fitted: the q = 1 column was
measured with a different attention kernel (see the data's notes), so its error is reported
apart. ``python -m specdraft.costfit`` prints the fitted presets and their errors.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "h200_cost_curve.md"
# preset name -> the measured model shape it is fitted to
SHAPES = {"small": "qwen2.5-1.5b", "medium": "llama-3.1-8b", "large": "qwen2.5-32b"}
PARAMS = ("fixed", "kv", "kv_min_batch", "attention", "slope", "knee", "width")
KV_MIN_BATCH = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
KNEES = tuple(float(k) for k in np.unique(np.round(np.geomspace(16, 1024, 49))))
WIDTHS = (0.0, 16.0, 32.0, 64.0, 128.0, 256.0)
SIGNIFICANT = 4  # digits kept in the committed presets


def read_table(path: str | Path = DATA) -> list[tuple[str, int, int, int, float]]:
    """(model, L, B, q, ms) for every cell of the data's tables."""
    rows, model, ctx, qs = [], None, None, None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        head = re.match(r"^(\S+), L=(\d+)$", line.strip())
        if head:
            model, ctx = head.group(1), int(head.group(2))
            continue
        cols = [c.strip() for c in line.split("|")]
        if cols[0] == "B":
            qs = [int(c.split("=")[1]) for c in cols[1:]]
        elif model and qs and cols[0].isdigit():
            for q, cell in zip(qs, cols[1:]):
                rows.append((model, ctx, int(cols[0]), q, float(cell.split()[0])))
    if not rows:
        raise ValueError(f"{path}: no cost tables found")
    return rows


def _features(B, L, q, kv_min_batch, knee, width):
    T, S = B * q, B * L
    x = T - knee
    return np.stack([np.ones_like(T), np.maximum(S, kv_min_batch * L), S / B * T,
                     (np.sqrt(x * x + width * width) + x) / 2], axis=1)


def predict(params: dict, B, L, q):
    """Predicted ms for batches of B requests of context L scoring q tokens each (arrays)."""
    B, L, q = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=float)) for a in (B, L, q)))
    X = _features(B, L, q, params["kv_min_batch"], params["knee"], params["width"])
    out = X @ np.array([params["fixed"], params["kv"], params["attention"], params["slope"]])
    return out if out.size > 1 else out[0]


def _round(v: float) -> float:
    return float(f"{v:.{SIGNIFICANT}g}")


def fit_shape(rows, model: str) -> dict:
    """The preset parameters for one measured shape (q >= 2 cells)."""
    cells = [r for r in rows if r[0] == model and r[3] >= 2]
    if not cells:
        raise ValueError(f"no q >= 2 measurements for {model!r}")
    L, B, q, y = (np.array([r[i] for r in cells], dtype=float) for i in (1, 2, 3, 4))
    best = None
    for kmb in KV_MIN_BATCH:
        for knee in KNEES:
            for width in WIDTHS:
                X = _features(B, L, q, kmb, knee, width) / y[:, None]
                coef = np.linalg.lstsq(X, np.ones_like(y), rcond=None)[0]
                if (coef < 0).any():
                    continue
                sse = float(((X @ coef - 1.0) ** 2).sum())
                if best is None or sse < best[0]:
                    best = (sse, kmb, knee, width, coef)
    _, kmb, knee, width, coef = best
    fixed, kv, attention, slope = (float(c) for c in coef)
    return {"fixed": _round(fixed), "kv": _round(kv), "kv_min_batch": float(kmb),
            "attention": _round(attention), "slope": _round(slope), "knee": knee, "width": width}


def errors(rows, model: str, params: dict) -> dict:
    """Relative errors |predicted / measured - 1| of q >= 2 (fitted) and q = 1 (not fitted)."""
    out = {}
    for name, keep in (("fit", lambda q: q >= 2), ("q1", lambda q: q == 1)):
        cells = [r for r in rows if r[0] == model and keep(r[3])]
        L, B, q, y = (np.array([r[i] for r in cells], dtype=float) for i in (1, 2, 3, 4))
        e = np.abs(predict(params, B, L, q) / y - 1.0)
        out[name] = {"max": float(e.max()), "median": float(np.median(e)), "cells": len(cells)}
    return out


def choice_loss(rows, model: str, params: dict, accept=(0.5, 0.6, 0.7, 0.8, 0.9),
                qs=(2, 4, 8, 16, 32)) -> dict:
    """How much a preset's draft lengths lose on measured passes of ``model``.

    For each measured (L, B) and per-token acceptance a, the tokens scored per request q (among
    ``qs``) that maximise expected tokens per ms, (1 - a^q) / (1 - a) / cost, under the preset
    against under the measured times: the cells where the preset picks the measured best, and
    the share of the best tokens per ms its pick loses (mean, max)."""
    table = {(r[1], r[2], r[3]): r[4] for r in rows if r[0] == model}
    losses = []
    for L, B in sorted({(L, B) for L, B, _ in table}):
        if not all((L, B, q) in table for q in qs):
            continue
        for a in accept:
            gain = {q: (1 - a ** q) / (1 - a) for q in qs}
            measured = {q: gain[q] / table[L, B, q] for q in qs}
            pick = max(qs, key=lambda q: gain[q] / float(predict(params, B, L, q)))
            losses.append(1.0 - measured[pick] / max(measured.values()))
    return {"cells": len(losses), "best": sum(x == 0.0 for x in losses),
            "mean": float(np.mean(losses)), "max": float(np.max(losses))}


def fit_presets(path: str | Path = DATA) -> dict:
    rows = read_table(path)
    return {name: fit_shape(rows, model) for name, model in SHAPES.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdraft.costfit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA), help="cost tables (Markdown, as in the default file)")
    args = ap.parse_args(argv)
    rows = read_table(args.data)
    presets = {}
    print("| preset | shape | fit: max / median rel. error (q >= 2) | q = 1 (not fitted): max / median |")
    print("|---|---|---|---|")
    for name, model in SHAPES.items():
        p = presets[name] = fit_shape(rows, model)
        e = errors(rows, model, p)
        print(f"| {name} | {model} | {e['fit']['max']:.3f} / {e['fit']['median']:.3f} "
              f"({e['fit']['cells']} cells) | {e['q1']['max']:.3f} / {e['q1']['median']:.3f} |")
    print(json.dumps(presets, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
