"""The GPU cost presets are what specdraft/costfit.py fits to the committed measurements, the fit
is close, and the controller sized by them drafts less in a large batch than alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specdraft import costfit
from specdraft.proposers.controller import (PRESETS, CostModel, DraftLengthController,
                                            parameter_count, preset_for_parameters)

ROWS = costfit.read_table()


def test_committed_presets_are_the_fit_of_the_committed_data():
    assert costfit.fit_presets() == PRESETS, "presets stale: run `python -m specdraft.costfit`"


@pytest.mark.parametrize("name, worst, median", [("small", 0.09, 0.02), ("medium", 0.05, 0.015),
                                                 ("large", 0.06, 0.015)])
def test_fit_error(name, worst, median):
    e = costfit.errors(ROWS, costfit.SHAPES[name], PRESETS[name])
    assert e["fit"]["max"] < worst and e["fit"]["median"] < median, e
    # the predicted cost is the controller's: the same numbers through CostModel
    cm = CostModel(name)
    for model, L, B, q, ms in ROWS:
        if model == costfit.SHAPES[name] and q >= 2:
            want = float(costfit.predict(PRESETS[name], B, L, q))
            assert cm.base_cost(B * q, B, float(B * L)) == pytest.approx(want, rel=1e-12)


HELDOUT = Path(costfit.DATA).parent / "h200_cost_curve_heldout.json"


@pytest.mark.parametrize("name, worst, median", [("small", 0.15, 0.03), ("medium", 0.12, 0.05),
                                                 ("large", 0.14, 0.05)])
def test_presets_predict_a_grid_they_were_not_fitted_to(name, worst, median):
    """Measurements on the same H200 at batches, draft lengths and contexts absent from the
    fitted tables (benchmarks/data/README.md): the presets predict them within a few percent."""
    cells = [r for r in json.loads(HELDOUT.read_text())["results"]
             if r["model"] == costfit.SHAPES[name] and r["q"] >= 2]
    assert len(cells) >= 40
    pred = costfit.predict(PRESETS[name], *(np.array([c[k] for c in cells]) for k in "BLq"))
    err = np.abs(pred / np.array([c["ms"] for c in cells]) - 1.0)
    assert err.max() < worst and np.median(err) < median, (err.max(), np.median(err))


SMALL_SHAPES = Path(costfit.DATA).parent / "h200_cost_curve_small_shapes.json"
# hidden, layers, intermediate, vocab, heads, kv heads, tied (as in test_preset_from_model_config)
SIZES = {"qwen2.5-0.5b": (896, 24, 4864, 151936, 14, 2, True),
         "smollm2-135m": (576, 30, 1536, 49152, 9, 3, True)}


@pytest.mark.parametrize("model, mean, worst", [("qwen2.5-0.5b", 0.02, 0.10),
                                                ("smollm2-135m", 0.05, 0.25)])
def test_small_preset_sizes_drafts_for_smaller_models(model, mean, worst):
    """The models specdraft's own commands run (Qwen2.5-0.5B, SmolLM2-135M) get the ``small``
    preset (fitted to Qwen2.5-1.5B) on a GPU: on their measured H200 passes
    (benchmarks/data/README.md) its draft lengths lose little of the best tokens per ms."""
    rows = [(r["model"], r["L"], r["B"], r["q"], r["ms"])
            for r in json.loads(SMALL_SHAPES.read_text())["results"]]
    assert preset_for_parameters(parameter_count(*SIZES[model])) == "small"
    loss = costfit.choice_loss(rows, model, PRESETS["small"])
    assert loss["cells"] == 40 and loss["mean"] < mean and loss["max"] < worst, loss
    # the check can fail: a preset that prices each extra token 5x too dear loses more
    dear = dict(PRESETS["small"], slope=PRESETS["small"]["slope"] * 5)
    assert costfit.choice_loss(rows, model, dear)["mean"] > mean


def test_a_wrong_preset_fails_the_check():
    bad = {k: dict(v) for k, v in PRESETS.items()}
    bad["medium"]["slope"] *= 1.5
    assert costfit.errors(ROWS, "llama-3.1-8b", bad["medium"])["fit"]["max"] > 0.1


def _chain(p: float, n: int = 16):
    return (list(range(-1, n - 1)), [p] * n)


@pytest.mark.parametrize("preset", ["small", "medium", "large"])
def test_large_batches_draft_less_per_request(preset):
    per_request = {}
    for B in (1, 16, 64, 256):
        c = DraftLengthController(CostModel(preset), max_waste=64.0)  # the cost model alone
        ks = c.choose(list(range(B)), [_chain(0.8)] * B, [2048] * B)
        per_request[B] = sum(ks) / B
    assert per_request[1] >= per_request[16] >= per_request[64] >= per_request[256]
    assert per_request[1] > per_request[64] and per_request[1] >= 8


def test_rows_that_may_not_draft_still_make_the_pass_dearer():
    c = DraftLengthController(CostModel("medium"), max_waste=64.0)  # the cost model alone
    alone = c.choose([0], [_chain(0.8)], [2048])
    crowded = c.choose([0], [_chain(0.8)], batch=(256, 256 * 2048.0, 2048.0))
    assert crowded[0] < alone[0]


def test_gpu_is_an_alias_of_medium():
    a, b = CostModel("gpu"), CostModel("medium")
    for shape in ((1, 1, 0.0), (300, 64, 64 * 4096.0)):
        assert a.cost(*shape) == b.cost(*shape)


@pytest.mark.parametrize("config, preset", [
    # hidden, layers, intermediate, vocab, heads, kv heads, tied
    ((896, 24, 4864, 151936, 14, 2, True), "small"),     # Qwen2.5-0.5B
    ((1536, 28, 8960, 151936, 12, 2, True), "small"),    # Qwen2.5-1.5B
    ((4096, 32, 14336, 128256, 32, 8, False), "medium"),  # Llama-3.1-8B
    ((5120, 48, 13824, 152064, 40, 8, False), "medium"),  # Qwen2.5-14B
    ((5120, 64, 27648, 152064, 40, 8, False), "large"),   # Qwen2.5-32B
    ((8192, 80, 28672, 128256, 64, 8, False), "large"),   # Llama-3.1-70B
])
def test_preset_from_model_config(config, preset):
    assert preset_for_parameters(parameter_count(*config)) == preset


def test_parameter_count_is_close_for_a_known_model():
    n = parameter_count(4096, 32, 14336, 128256, 32, 8, False)  # Llama-3.1-8B: 8.03e9
    assert 7.9e9 < n < 8.1e9


def test_preset_from_a_hugging_face_config():
    """Attributes as transformers' configs name them (a multimodal one nests the language model)."""
    from types import SimpleNamespace as NS

    from specdraft.proposers.controller import preset_for_config

    def cfg(h, layers, inter, vocab, heads, kv, tied=False):
        return NS(hidden_size=h, num_hidden_layers=layers, intermediate_size=inter, vocab_size=vocab,
                  num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=tied)
    assert preset_for_config(cfg(4096, 32, 11008, 32000, 32, 32)) == "medium"  # Llama-2-7B
    assert preset_for_config(cfg(8192, 80, 28672, 128256, 64, 8)) == "large"
    assert preset_for_config(cfg(576, 30, 1536, 49152, 9, 3, True)) == "small"  # SmolLM2-135M
    assert preset_for_config(NS(text_config=cfg(8192, 80, 28672, 128256, 64, 8))) == "large"
    assert preset_for_config(object()) == "medium"  # no sizes: the middle


def test_step_timings_correct_a_preset_for_the_batch_last_sized():
    cm = CostModel("medium")
    c = DraftLengthController(cm)
    shape = (64, 64 * 2048.0, 2048.0)
    before = cm.cost(512, *shape) / cm.cost(64, *shape)
    for _ in range(50):
        c.choose(list(range(64)), [_chain(0.8)] * 64, [2048] * 64)  # the batch the passes ran
        cm.observe(64, 0.010)
        cm.observe(512, 0.010 * 2 * before)  # measured: twice the predicted ratio at 512 tokens
    after = cm.cost(512, *shape) / cm.cost(64, *shape)
    assert 1.6 * before < after < 2.1 * before  # the prior keeps part of the preset


def test_vllm_adapter_picks_the_preset_of_the_target(monkeypatch):
    """On a GPU the adapter reads the target's HF config; on CPU the dtype decides (as before)."""
    from types import SimpleNamespace as NS

    import torch
    from vllm.platforms import current_platform

    from specdraft.adapters import vllm_v0_32 as adapter
    big = NS(hidden_size=5120, num_hidden_layers=64, intermediate_size=27648, vocab_size=152064,
             num_attention_heads=40, num_key_value_heads=8, tie_word_embeddings=False)
    cfg = NS(model_config=NS(hf_config=big, dtype=torch.bfloat16))
    monkeypatch.setattr(current_platform, "is_cpu", lambda: False)
    assert adapter.cost_model_preset(cfg) == "large"
    monkeypatch.setattr(current_platform, "is_cpu", lambda: True)
    assert adapter.cost_model_preset(cfg) == "cpu-bf16"
