"""Pricing replayed passes with measured GPU pass times (``MeasuredCost``).

The measurements are the H200 tables in ``benchmarks/data/`` (``h200_cost_curve_*.json``: ms per
verification forward of one model shape by batch B, tokens scored per request q and context L;
see ``benchmarks/data/README.md``). Two kinds of pass, as the measurement ran them:

- a pass that verifies a draft (some row scores 2 or more tokens): the shape's own fit of the
  q >= 2 cells (``specdraft.costfit.fit_shape``, the cost model of ``proposers/controller.py``:
  fixed cost, KV reads, attention, dense work), which prices mixed rows and any context;
- a pass without drafts (every row scores one token): the q = 1 cells, measured with the decode
  attention kernel, fitted as ``a + b * (sum of contexts) + c * log2(B)`` (within 3% of each
  cell for Qwen2.5-0.5B). No speculation runs every pass this way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from specdraft import costfit
from specdraft.proposers.controller import CostModel

DATA = Path(costfit.DATA).parent


class MeasuredCost:
    """``base_cost(tokens, requests, context, longest)`` in ms from one shape's measured passes
    (the interface ``replay_batched`` and ``baseline_cost`` price with).

    ``path``: a measurement JSON (``results``: cells with model, B, q, L, ms); ``model``: the
    shape's name in it (e.g. ``qwen2.5-0.5b`` in ``h200_cost_curve_small_shapes.json``).
    ``params`` is the q >= 2 fit, usable as specdraft's ``cost_model`` option."""

    def __init__(self, path: str | Path, model: str):
        cells = [r for r in json.loads(Path(path).read_text(encoding="utf-8"))["results"]
                 if r["model"] == model]
        if not cells:
            raise ValueError(f"{path}: no measurements of {model!r}")
        self.model = model
        self.params = costfit.fit_shape([(model, r["L"], r["B"], r["q"], r["ms"]) for r in cells],
                                        model)
        self.verify = CostModel(self.params)
        one = [r for r in cells if r["q"] == 1]
        B, L, y = (np.array([r[k] for r in one], dtype=float) for k in ("B", "L", "ms"))
        X = np.stack([np.ones_like(B), B * L, np.log2(B)], axis=1)
        # least squares of the relative error, as costfit fits
        self.decode = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)[0]
        pred = X @ self.decode
        self.decode_error = float(np.abs(pred / y - 1).max())

    def base_cost(self, tokens: float, requests: int = 1, context: float = 0.0,
                  longest: float | None = None) -> float:
        if tokens <= requests:  # one token a row: the decode kernel
            a, b, c = self.decode
            return float(a + b * context + c * math.log2(max(requests, 1)))
        return self.verify.base_cost(tokens, requests, context, longest)


def h200(model: str = "qwen2.5-0.5b") -> MeasuredCost:
    """The H200 measurements of ``model``: the small shapes' table (Qwen2.5-0.5B, SmolLM2-135M)
    or the held-out grid's (Qwen2.5-1.5B, Llama-3.1-8B, Qwen2.5-32B)."""
    for name in ("h200_cost_curve_small_shapes.json", "h200_cost_curve_heldout.json"):
        data = json.loads((DATA / name).read_text(encoding="utf-8"))
        if any(r["model"] == model for r in data["results"]):
            return MeasuredCost(DATA / name, model)
    raise ValueError(f"no H200 measurements of {model!r} in {DATA}")
