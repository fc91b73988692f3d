"""Real vLLM CPU engines for the integration tests.

One engine per test module (module-scoped fixtures), plus one plain (no speculation) engine for
the whole session that produces reference outputs. Small model (SmolLM2-135M), float32 (greedy
outputs are token-identical between speculative and plain decoding only in float32), eager mode,
short max_model_len, small KV cache.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

import pytest

MAX_MODEL_LEN = 512
NUM_SPEC_TOKENS = 8
# Small enough that a full batch of long requests does not fit: the scheduler preempts and resumes.
KV_CACHE_BYTES = 48 * 2**20

# Engine processes are spawned; they inherit the environment present when the engine starts.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")
# Modules in this folder (e.g. faulty_proposer) must import in the engine's worker processes.
_here = os.path.dirname(os.path.abspath(__file__))
if _here not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    parts = (_here, os.environ.get("PYTHONPATH"))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
if _here not in sys.path:
    sys.path.insert(0, _here)


# sglang_cpu/ runs in its own pytest process (test_sglang_cpu.py); its conftest must not be
# imported by this run either (test modules here import this folder's conftest by name).
collect_ignore = [] if os.environ.get("SPECDRAFT_SGLANG_CPU_TESTS") == "1" else ["sglang_cpu"]

_NO_ENGINE = ("test_sglang_cpu.py", "test_hf_generate.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.fspath)
        if "integration_tests" in path and not path.endswith(_NO_ENGINE):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def model_path() -> str:
    path = os.environ.get("SPECDRAFT_TEST_MODEL")
    if path:
        return path
    pytest.importorskip("vllm")
    from specdraft.models import model_path as prepare

    return prepare("smollm2-135m")


def engine_kwargs(model: str, **overrides) -> dict:
    kwargs = dict(model=model, dtype="float32", enforce_eager=True, max_model_len=MAX_MODEL_LEN,
                  max_num_seqs=8, kv_cache_memory_bytes=KV_CACHE_BYTES, seed=0,
                  enable_prefix_caching=True, enable_chunked_prefill=True,
                  max_num_batched_tokens=256)
    kwargs.update(overrides)
    return kwargs


def spec_config(model: str = "specdraft.plugins.vllm.SuffixProposer", k: int = NUM_SPEC_TOKENS,
                **options) -> dict:
    config = {"method": "custom_class", "model": model, "num_speculative_tokens": k}
    if options:
        config["specdraft"] = options
    return config


def _set_env(values: dict) -> None:
    """Sets each variable to its value (None: unsets it)."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def make_llm(model: str, env: dict | None = None, **overrides):
    """An LLM whose engine processes see ``env`` (None: unset); shut down on exit."""
    from vllm import LLM

    # Other modules may set VLLM_CPU_KVCACHE_SPACE, which overrides kv_cache_memory_bytes.
    env = {"VLLM_CPU_KVCACHE_SPACE": None, **(env or {})}
    saved = {k: os.environ.get(k) for k in env}
    _set_env(env)
    try:
        llm = LLM(**engine_kwargs(model, **overrides))
    finally:
        _set_env(saved)
    try:
        yield llm
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server a test starts)."""
    from specdraft.served import free_port as port

    return port()


def start_local_ray(make_kwargs) -> dict:
    """A fresh local Ray cluster, started again if Ray's start-up times out on a busy machine
    (``specdraft.plugins.ray_serve.start_local_ray``, imported here only by the Ray tests)."""
    from specdraft.plugins.ray_serve import start_local_ray as start

    return start(make_kwargs)


# Engines that sample many short outputs: a wider batch, a KV cache that holds it.
WIDE = dict(max_num_seqs=32, kv_cache_memory_bytes=256 * 2**20)


@pytest.fixture(scope="session")
def plain_llm(model_path):
    """The reference: plain decoding (no speculation), shared by the whole session."""
    with make_llm(model_path, disable_log_stats=False, **WIDE) as llm:
        yield llm


@pytest.fixture(scope="session")
def plain_samples(plain_llm):
    """Plain temperature > 0 samples of sampling.PROMPT, drawn once for the session."""
    from sampling import sample_outcomes

    return sample_outcomes(plain_llm)
