"""Offline generation with vLLM and a specdraft proposer.

    bash scripts/setup.sh     # CPU; elsewhere: pip install dist/specdraft-*.whl next to vLLM (README, Install)
    python examples/vllm_offline.py [MODEL]

MODEL defaults to the SmolLM2-135M folder specdraft prepares (`specdraft models prepare`).
"""

import sys
import time


def main() -> None:
    from specdraft.plugins.vllm import engine_metrics
    from vllm import LLM, SamplingParams

    if len(sys.argv) > 1:
        model = sys.argv[1]
    else:
        from specdraft.models import model_path

        model = model_path("smollm2-135m")

    llm = LLM(
        model=model,
        dtype="float32",          # on CPU: greedy output identical to plain decoding
        enforce_eager=True,
        max_model_len=2048,
        # an explicit KV cache (512 MiB: about 11,000 tokens of this model), so the engine starts
        # wherever the model fits; vLLM's CPU default asks for most of the machine's memory
        kv_cache_memory_bytes=512 * 2**20,
        speculative_config={
            "method": "custom_class",
            "model": "specdraft.plugins.vllm.SuffixProposer",  # or LookupProposer, TreeProposer
            "num_speculative_tokens": 16,                      # upper bound of every draft
            "specdraft": {                                     # specdraft's own options
                "global_cache_tokens": 1_000_000,
                "adaptive": True,
            },
        },
    )
    code = (
        "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
        "    return total / len(xs)\n"
    )
    prompts = [
        f"{code}\n# The same function, with a docstring:\n",
        "Repeat this line three times: speculative decoding drafts tokens the model verifies.\n",
    ]
    params = SamplingParams(temperature=0.0, max_tokens=128)
    start = time.perf_counter()
    for out in llm.generate(prompts, params):
        print(repr(out.outputs[0].text))
    print(f"{time.perf_counter() - start:.2f} s")
    counters = engine_metrics(llm, wait_for=lambda s: s.get("steps", 0) > 0)
    if counters:
        steps = max(counters["steps"], 1)
        print(f"specdraft: {counters['proposed_drafts']} drafts for {counters['rows']} draft "
              f"requests, {counters['accepted_tokens']} of {counters['draft_tokens']} verified "
              f"draft tokens accepted, "
              f"{1e6 * counters['proposer_seconds'] / steps:.0f} us per step")


if __name__ == "__main__":  # vLLM spawns engine processes: the guard is required
    main()
