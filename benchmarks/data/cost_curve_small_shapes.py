"""Run the shared verification-cost tool (``gpu_cost_curve.py``) on the shapes of the two models
specdraft's own commands default to, which are smaller than any shape its GPU presets were fitted
to: Qwen2.5-Coder-0.5B (``specdraft bench``) and SmolLM2-135M (``make demo``). On a GPU, vLLM's
adapter gives both the ``small`` preset (fitted to Qwen2.5-1.5B); ``python -m specdraft.costfit
--data`` on the tables this writes says how far that preset is from them.

    python3 benchmarks/data/cost_curve_small_shapes.py PATH/TO/gpu_cost_curve.py [its options]

Shapes from the models' Hugging Face configs (only shapes matter: random weights; Qwen2.5-Coder-
0.5B's config unties the LM head from the embeddings, which changes weight memory, not the pass).
"""

import importlib.util
import sys

SHAPES = {
    "qwen2.5-0.5b": dict(dim=896, n_layers=24, n_heads=14, n_kv_heads=2, intermediate=4864,
                         vocab=151936, qkv_bias=True, tie=True, rope_theta=1000000.0, eps=1e-6),
    "smollm2-135m": dict(dim=576, n_layers=30, n_heads=9, n_kv_heads=3, intermediate=1536,
                         vocab=49152, qkv_bias=False, tie=True, rope_theta=100000.0, eps=1e-5),
}

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("gpu_cost_curve", sys.argv[1])
    tool = importlib.util.module_from_spec(spec)
    sys.argv = [sys.argv[1], *sys.argv[2:]]
    spec.loader.exec_module(tool)
    tool.CONFIGS.update(SHAPES)
    sys.exit(tool.main())
