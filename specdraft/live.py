"""Live vLLM runs shared by ``specdraft record``, ``bench`` and ``demo``.

One ``vllm.LLM`` per method. When they fit in memory together they are all loaded at once so runs
can be interleaved (A B C D A B C D ...) and a noisy neighbour hits every method alike; when they
do not, ``plan_engines`` says so and the runs start one engine at a time (see specdraft.bench).
Exactness needs float32 (bfloat16 drifts between one-token and multi-token passes).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# the spec-decode counters every benchmark reports (read from vLLM's outputs by the adapter)
COUNTER_KEYS = ("drafts", "drafted_tokens", "accepted_tokens")


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


# each live method's drafting replayed offline (specdraft.replay's method names)
REPLAY_METHODS = {"none": "no-drafts", "vllm-ngram": "vllm-ngram", "vllm-suffix": "arctic-suffix",
                  "specdraft": "specdraft-suffix"}
DTYPES = ("float32", "bfloat16")


def methods_error(methods: list[str]) -> str | None:
    """Why ``--methods`` cannot be run (None: it can): it must include 'none', the reference."""
    configs = method_configs()
    unknown = [m for m in methods if m not in configs]
    if unknown or "none" not in methods:
        return f"--methods must include 'none' and be among {', '.join(configs)}; got {unknown}"
    return None


KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE for live runs unless the environment sets it


def engine_env(kv_cache_gib: int = KV_CACHE_GIB) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def kv_cache_bytes() -> int:
    return int(float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)) * 2**30)


# ---------------------------------------------------------------------------------------------
# Memory planning: do the engines fit together?
# ---------------------------------------------------------------------------------------------
# Resident memory of one vLLM CPU engine (engine core + worker process) = weights x (1 + WEIGHT_EXTRA)
# + the KV space + ENGINE_FIXED; the process driving the engines adds DRIVER_FIXED once.
# Measured on this project's machines (2 cores, vLLM 0.32 CPU, float32, enforce_eager, after a
# generate call): SmolLM2-135M (0.54 GB of weights) with a 1 GiB KV space: worker 2.51 GiB, engine
# core 0.77 GiB, driver 0.83 GiB; Qwen2.5-Coder-1.5B (6.2 GB of weights): 10.6 GB per engine. The two
# points give the weight-proportional extra (CPU kernels keep re-packed copies of some weights) and
# the fixed part.
WEIGHT_EXTRA = 0.30
ENGINE_FIXED = int(1.6 * 2**30)
DRIVER_FIXED = int(0.9 * 2**30)
HEADROOM = 0.9  # plan to use at most this share of the memory available
MEMORY_ENV = "SPECDRAFT_MEMORY_AVAILABLE"  # overrides /proc/meminfo (bytes, or with K/M/G/T)

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
             "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class MemoryPlanError(RuntimeError):
    """The engines a command needs do not fit in memory, even one at a time."""


def parse_bytes(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if scale > 1 else t) * scale)
    except ValueError:
        raise ValueError(f"{MEMORY_ENV}={text!r}: expected a size such as 24G or 25769803776") from None


def available_memory() -> int:
    """Bytes available for new processes (MemAvailable), or the figure in SPECDRAFT_MEMORY_AVAILABLE."""
    fake = os.environ.get(MEMORY_ENV)
    if fake:
        return parse_bytes(fake)
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("no MemAvailable in /proc/meminfo")


def model_parameters(model_dir: str | os.PathLike) -> int:
    """Number of parameters of a safetensors model folder, read from the files' headers."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors files (is it a model folder?)")
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                numel = 1
                for d in t["shape"]:
                    numel *= d
                total += numel
    return total


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


@dataclass
class EnginePlan:
    mode: str                    # "together" or "one-at-a-time"
    engines: int
    per_engine: int              # estimated resident bytes of one engine
    weights: int
    kv: int
    needed_together: int
    available: int

    def describe(self) -> str:
        together = (f"{self.engines} engines need {gib(self.needed_together)} together "
                    f"({gib(self.per_engine)} each: weights {gib(self.weights)} x "
                    f"{1 + WEIGHT_EXTRA:.1f} + KV {gib(self.kv)} + {gib(ENGINE_FIXED)}; driver "
                    f"{gib(DRIVER_FIXED)}), {gib(self.available)} available")
        if self.mode == "together":
            return f"memory: {together}: all engines loaded at once, rounds interleaved"
        return (f"memory: {together}: engines run one at a time, restarted for every round "
                f"(start-up not timed)")


def plan_engines(model_dir: str | os.PathLike, num_engines: int, dtype: str = "float32",
                 available: int | None = None) -> EnginePlan:
    """Whether ``num_engines`` engines of this model fit together; raises MemoryPlanError (one
    line: what one engine needs, what there is) when not even one fits."""
    weights = model_parameters(model_dir) * _DTYPE_BYTES[dtype]
    kv = kv_cache_bytes()
    per_engine = int(weights * (1 + WEIGHT_EXTRA)) + kv + ENGINE_FIXED
    avail = available_memory() if available is None else available
    usable = int(avail * HEADROOM)
    together = DRIVER_FIXED + num_engines * per_engine
    if DRIVER_FIXED + per_engine > usable:
        raise MemoryPlanError(
            f"not enough memory for one engine of {model_dir} ({dtype}): it needs about "
            f"{gib(DRIVER_FIXED + per_engine)} (weights {gib(weights)} x {1 + WEIGHT_EXTRA:.1f}, KV "
            f"{gib(kv)}, fixed {gib(ENGINE_FIXED + DRIVER_FIXED)}), {gib(avail)} available "
            f"(planning uses {HEADROOM:.0%}); lower VLLM_CPU_KVCACHE_SPACE or use a smaller model")
    mode = "together" if together <= usable else "one-at-a-time"
    return EnginePlan(mode, num_engines, per_engine, weights, kv, together, avail)


# ---------------------------------------------------------------------------------------------
# Engine output kept out of the way
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def engine_log(path: str | os.PathLike | None):
    """Sends everything written to file descriptors 1 and 2 (vLLM's logging, in this process and
    in the engine processes it spawns) to ``path``; yields a ``say(msg)`` that still reaches the
    terminal. ``path=None`` leaves the output where it is."""
    if path is None:
        def say(msg):
            print(msg, flush=True)
        say.stream = sys.stdout  # where progress bars may draw (Progress)
        yield say
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    def say(msg):
        terminal.write(msg + "\n")
        terminal.flush()
    say.stream = terminal  # the terminal, for progress bars (Progress)
    try:
        yield say
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        terminal.close()


def make_llm(model: str, speculative_config: dict | None, *, max_model_len: int = 2048,
             max_num_seqs: int = 8, seed: int = 0, dtype: str = "float32", **kwargs):
    engine_env()
    from vllm import LLM
    if speculative_config is not None:
        from specdraft.adapters import vllm_adapter
        for k, v in vllm_adapter().PER_REQUEST_METRICS_ARGS.items():
            kwargs.setdefault(k, v)
    return LLM(model=model, dtype=dtype, enforce_eager=True, max_model_len=max_model_len,
               max_num_seqs=max_num_seqs, seed=seed, speculative_config=speculative_config,
               disable_log_stats=False, **kwargs)


def shutdown(llm) -> None:
    """Stops an engine's processes and frees its memory before the next one starts."""
    from specdraft.adapters import vllm_adapter

    with contextlib.suppress(Exception):
        vllm_adapter().shutdown_engine(llm)
    del llm
    gc.collect()


def engine_schedule(llm) -> dict:
    """How the engine schedules requests (max_num_seqs, max_num_batched_tokens, block_size,
    prefix_caching): what a replay of its run needs."""
    from specdraft.adapters import vllm_adapter

    return vllm_adapter().engine_schedule(llm)


def reset_cross_request_state(llm) -> dict:
    """Clears the prefix cache and the drafter's global cache (specdraft.adapters)."""
    from specdraft.adapters import vllm_adapter

    return vllm_adapter().reset_cross_request_state(llm)


@dataclass
class RunResult:
    outputs: list[list[int]]
    seconds: float
    counters: dict = field(default_factory=dict)
    # (TTFT, TPOT) in seconds per request (request_latencies), None where vLLM gave no stamps
    latencies: list[tuple[float | None, float | None]] = field(default_factory=list)
    # how many requests the engine's first step admitted (first_step_requests), None unknown
    first_step: int | None = None

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
    from specdraft.adapters import vllm_adapter
    adapter = vllm_adapter()
    t0 = time.perf_counter()
    # every request in the engine before its first step: the schedule is the same every round
    outs = adapter.generate_in_one_burst(llm, [TokensPrompt(prompt_token_ids=p) for p in prompts],
                                         params)
    secs = time.perf_counter() - t0
    return RunResult([list(o.outputs[0].token_ids) for o in outs], secs, request_counters(outs),
                     adapter.request_latencies(outs), adapter.first_step_requests(outs))


def request_counters(outs) -> dict[str, int]:
    """drafts (verify steps with a draft), drafted and accepted tokens of ``generate()`` outputs."""
    from specdraft.adapters import vllm_adapter
    return vllm_adapter().request_spec_counters(outs)


def proposer_time(llm) -> tuple[float, int] | None:
    """(seconds spent in specdraft's propose, propose calls) so far, summed over workers; None
    for an engine without a specdraft proposer. Read between runs (no request in flight)."""
    from specdraft.adapters import vllm_adapter
    got = [m for m in vllm_adapter().drafter_metrics(llm) if m and "proposer_seconds" in m]
    if not got:
        return None
    return sum(m["proposer_seconds"] for m in got), sum(m["proposer_steps"] for m in got)


def pass_costs(llm) -> tuple[list[list], list[list]] | None:
    """The target passes measured by specdraft's proposer since the last reset: ([rows, tokens
    scored, passes, mean seconds] per shape, [rows, tokens, seconds] per pass in order); None
    for an engine without one."""
    from specdraft.adapters import vllm_adapter
    got = [m for m in vllm_adapter().drafter_metrics(llm) if m and "pass_costs" in m]
    return (got[0]["pass_costs"], got[0]["pass_log"]) if got else None


def step_times(llm) -> list[list] | None:
    """The engine's steps since the last call, any method: [requests, tokens scheduled, steps,
    mean seconds] per shape (specdraft.adapters; the first call starts timing). None if the
    engine's steps cannot be timed."""
    from specdraft.adapters import vllm_adapter

    return vllm_adapter().step_times(llm)


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
