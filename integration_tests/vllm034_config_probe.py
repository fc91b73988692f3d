"""vLLM 0.34's own configuration path with ``"method": "specdraft"``, as ``vllm serve`` takes it.

Run with vLLM 0.34's Python files first on ``PYTHONPATH`` (``.cache/vllm-0.34.0``): vLLM loads
its general plugins (specdraft's entry point registers the method), parses
``--speculative-config`` with its own CLI parser and builds the engine config. On these CPUs that
ends with vLLM's "requires Triton (triton-cpu)" once every config is built; the speculative
config is caught on the way. Prints one JSON line per case: ``{"case", "ok", "error",
"config"}``.

    python vllm034_config_probe.py MODEL_DIR
"""

from __future__ import annotations

import json
import sys

CASES = {
    "valid": {"method": "specdraft", "num_speculative_tokens": 16,
              "speculator_options": {"strategy": "suffix", "global_cache_tokens": 100000}},
    "defaults": {"method": "specdraft"},
    "bad-option": {"method": "specdraft", "num_speculative_tokens": 16,
                   "speculator_options": {"max_depth": -3}},
    "unknown-option": {"method": "specdraft", "num_speculative_tokens": 16,
                       "speculator_options": {"global_cache": 5}},
    "bad-strategy": {"method": "specdraft", "num_speculative_tokens": 4,
                     "speculator_options": {"strategy": "eagle"}},
    "k-too-long": {"method": "specdraft", "num_speculative_tokens": 600},
    "custom_class": {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
                     "num_speculative_tokens": 4},
}


def main(model: str) -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.plugins import load_general_plugins
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    load_general_plugins()
    built = {}
    original = EngineArgs.create_speculative_config

    def capture(self, *args, **kwargs):
        built["spec"] = original(self, *args, **kwargs)
        return built["spec"]

    EngineArgs.create_speculative_config = capture
    for case, spec in CASES.items():
        built.clear()
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        args = parser.parse_args(["--model", model, "--max-model-len", "512",
                                  "--speculative-config", json.dumps(spec)])
        error = None
        try:
            EngineArgs.from_cli_args(args).create_engine_config()
        except Exception as e:  # noqa: BLE001 - reported
            error = f"{type(e).__name__}: {e}"
        s = built.get("spec")
        config = None if s is None else {
            "method": s.method, "custom_method": s.custom_method,
            "num_speculative_tokens": s.num_speculative_tokens,
            "speculator_options": s.speculator_options,
            "specdraft_options": getattr(s, "specdraft_options", None),
            "speculator_class": s.speculator_config.speculator_class}
        print(json.dumps({"case": case, "error": error, "config": config}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
