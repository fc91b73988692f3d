"""Live vLLM runs shared by ``specdraft record``, ``bench`` and ``demo``.

One ``vllm.LLM`` per method, all loaded at once so runs can be interleaved (A B C D A B C D ...)
and a noisy neighbour hits every method alike. Exactness needs float32 (NOTES: bfloat16 drifts
between one-token and multi-token passes).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "drafted_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}


def method_configs(k: int = 16) -> dict[str, dict | None]:
    """The speculative configs compared live, by method name (None: no speculation)."""
    return {
        "none": None,
        "vllm-ngram": {"method": "ngram", "num_speculative_tokens": k,
                       "prompt_lookup_min": 2, "prompt_lookup_max": 5},
        "vllm-suffix": {"method": "suffix", "num_speculative_tokens": k},
        "specdraft": {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
                      "num_speculative_tokens": k},
    }


def engine_env(kv_cache_gib: int = 1) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def make_llm(model: str, speculative_config: dict | None, *, max_model_len: int = 2048,
             max_num_seqs: int = 8, seed: int = 0, **kwargs):
    engine_env()
    from vllm import LLM
    if speculative_config is not None:
        # per-request counters: vLLM's Prometheus registry is per process, so with several
        # engines in one process only the last one's global counters survive
        kwargs.setdefault("per_request_spec_decode_metrics", "summary")
    return LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=max_model_len,
               max_num_seqs=max_num_seqs, seed=seed, speculative_config=speculative_config,
               disable_log_stats=False, **kwargs)


def spec_counters(llm) -> dict[str, int]:
    """vLLM's own spec-decode counters, summed over labels."""
    out = {v: 0 for v in SPEC_COUNTERS.values()}
    for m in llm.get_metrics():
        key = SPEC_COUNTERS.get(m.name)
        if key is not None:
            out[key] += int(getattr(m, "value", 0))
    return out


@dataclass
class RunResult:
    outputs: list[list[int]]
    seconds: float
    counters: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


def generate(llm, prompts: list[list[int]], max_tokens: int | list[int], temperature: float = 0.0,
             seed: int | None = None, ignore_eos: bool = False) -> RunResult:
    """Greedy (or sampled) generation of token-id prompts; returns outputs, time and counter deltas."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    maxes = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    params = [SamplingParams(temperature=temperature, max_tokens=m, seed=seed, ignore_eos=ignore_eos)
              for m in maxes]
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    secs = time.perf_counter() - t0
    return RunResult([list(o.outputs[0].token_ids) for o in outs], secs, request_counters(outs))


def request_counters(outs) -> dict[str, int]:
    """drafts (verify steps with a draft), drafted and accepted tokens, from vLLM's per-request
    spec-decode metrics (zero for an engine without speculation)."""
    c = {v: 0 for v in SPEC_COUNTERS.values()}
    for o in outs:
        m = getattr(o.outputs[0], "spec_decode_metrics", None)
        if m is None:
            continue
        c["drafts"] += sum(m.histogram)
        c["accepted_tokens"] += sum(j * n for j, n in enumerate(m.histogram))
        c["drafted_tokens"] += m.num_draft_tokens
    return c


def cpu_pressure() -> str | None:
    """The machine's CPU pressure line (PSI), logged so a noisy run is visible."""
    try:
        with open("/proc/pressure/cpu", encoding="ascii") as f:
            return f.readline().strip()
    except OSError:
        return None


def chat_prompt(tokenizer, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]
