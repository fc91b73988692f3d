"""vLLM 0.32 worker methods (called by name through ``LLM.collective_rpc``) and helpers on an
offline ``vllm.LLM``: clearing cross-request state between benchmark rounds, reading each
worker's drafter metrics and sampler-fix state, and the engine's settings and shutdown.
"""

from __future__ import annotations

import sys
from typing import Any

from specdraft.adapters.vllm_hooks import HOOKS_ATTR
from specdraft.adapters.vllm_v0_32.sampler import (_EXPAND_KERNEL, expand_kernel_impl,
                                                   lean_rejection_forward)


# ---------------------------------------------------------------------------------------------
# Cross-request state, cleared between benchmark rounds
# ---------------------------------------------------------------------------------------------
# A benchmark round that sends the same prompts again would find each request's whole output in
# the state the previous round left: the prefix cache (engine core), vLLM ``suffix``'s global
# cache and specdraft's global cache (both in the worker, on ``runner.drafter``). 0.32 facts:
# ``LLM.reset_prefix_cache()`` clears the first; ``LLM.collective_rpc(name)`` calls a method of
# ``WorkerWrapperBase`` (which forwards unknown names to the worker) in every worker; a callable
# would need VLLM_ALLOW_INSECURE_SERIALIZATION, so the plugin adds a named method instead.
# ``SuffixDecodingProposer.suffix_cache`` is arctic's ``SuffixDecodingCache``: requests still
# active there are stopped (they would otherwise be cached at the next step) and every cached
# response is evicted.

RESET_METHOD = "specdraft_reset_cross_request_state"


def _reset_worker_state(worker_wrapper: Any) -> dict:
    worker = getattr(worker_wrapper, "worker", worker_wrapper)
    drafter = getattr(getattr(worker, "model_runner", None), "drafter", None)
    if drafter is None:
        return {"drafter": None}
    hooks = getattr(drafter, HOOKS_ATTR, None)
    if hooks is not None:  # a specdraft proposer
        return {"drafter": type(drafter).__name__, **hooks.reset()}
    cache = getattr(drafter, "suffix_cache", None)
    if cache is not None:  # vLLM's built-in suffix proposer
        active = list(cache.active_requests)
        for req_id in active:
            cache.stop_request(req_id)
        cached = list(cache.cached_requests)
        for req_id in cached:
            cache.evict_cached_response(req_id)
        return {"drafter": type(drafter).__name__, "stopped": len(active), "evicted": len(cached)}
    return {"drafter": type(drafter).__name__}  # stateless across requests (ngram)


METRICS_METHOD = "specdraft_drafter_metrics"


def _worker_drafter_metrics(worker_wrapper: Any) -> dict | None:
    worker = getattr(worker_wrapper, "worker", worker_wrapper)
    proposer = getattr(getattr(worker, "model_runner", None), "drafter", None)
    hooks = getattr(proposer, HOOKS_ATTR, None)  # None: not a specdraft proposer
    return hooks.metrics() if hooks is not None else None


SAMPLER_FIX_METHOD = "specdraft_sampler_fix_state"


def _worker_sampler_fix_state(worker_wrapper: Any) -> dict:
    """Whether this worker runs specdraft's fixed CPU expand kernel and its lean rejection
    sampler (SAMPLER_FIX_METHOD)."""
    utils = sys.modules.get("vllm.utils.cpu_triton_utils")
    dispatcher = sys.modules.get("vllm.triton_utils.dispatcher")
    registry = getattr(dispatcher, "_registry", {}) if dispatcher is not None else {}
    registered = registry.get(_EXPAND_KERNEL, (None, None))[1]
    sampler = sys.modules.get("vllm.v1.sample.rejection_sampler")
    forward = getattr(getattr(sampler, "RejectionSampler", None), "forward", None)
    return {"fixed": bool(getattr(utils, "_specdraft_fixed", False)),
            "registered_is_fixed": registered is expand_kernel_impl,
            "lean": forward is lean_rejection_forward}


STEP_TIMES_METHOD = "specdraft_step_times"


def _worker_step_times(worker_wrapper: Any) -> list[list] | None:
    """The runner's step times since the last call (runner.take_step_times; the first call
    starts the timer): STEP_TIMES_METHOD, for benchmarks of any method."""
    from specdraft.adapters.vllm_v0_32.runner import take_step_times

    worker = getattr(worker_wrapper, "worker", worker_wrapper)
    runner = getattr(worker, "model_runner", None)
    return None if runner is None else take_step_times(runner)


def install_worker_methods() -> None:
    """Adds RESET_METHOD, METRICS_METHOD, SAMPLER_FIX_METHOD and STEP_TIMES_METHOD to vLLM's
    worker wrapper (cheap; called in every vLLM process)."""
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    for name, method in ((RESET_METHOD, _reset_worker_state),
                         (METRICS_METHOD, _worker_drafter_metrics),
                         (SAMPLER_FIX_METHOD, _worker_sampler_fix_state),
                         (STEP_TIMES_METHOD, _worker_step_times)):
        if not hasattr(WorkerWrapperBase, name):
            setattr(WorkerWrapperBase, name, method)


def step_times(llm: Any) -> list[list] | None:
    """The engine's step times since the last call, [requests, tokens scheduled, steps, mean
    seconds] per shape (the first call starts timing and returns []); None if not timed."""
    got = llm.collective_rpc(STEP_TIMES_METHOD)
    return got[0] if got else None


def reset_cross_request_state(llm: Any) -> dict:
    """Clears what an offline ``vllm.LLM`` keeps across requests: the prefix cache and the
    drafter's global cache. Call it only when no request is in flight."""
    prefix = bool(llm.reset_prefix_cache())
    workers = llm.collective_rpc(RESET_METHOD)
    return {"prefix_cache_reset": prefix, "workers": workers}


def speculative_config_of(llm: Any) -> Any:
    """The ``SpeculativeConfig`` an offline ``vllm.LLM`` runs with."""
    return llm.llm_engine.vllm_config.speculative_config


def shutdown_engine(llm: Any) -> None:
    """Stops an offline ``vllm.LLM``'s engine processes now (not when it is collected)."""
    llm.llm_engine.engine_core.shutdown()


def engine_schedule(llm: Any) -> dict:
    """The scheduler settings that decide when an offline ``vllm.LLM``'s requests prefill and
    decode (``specdraft.replay.EngineSchedule``'s fields)."""
    cfg = llm.llm_engine.vllm_config
    sched, cache = cfg.scheduler_config, cfg.cache_config
    return {"max_num_seqs": int(sched.max_num_seqs),
            "max_num_batched_tokens": int(sched.max_num_batched_tokens),
            "block_size": int(cache.block_size),
            "prefix_caching": bool(cache.enable_prefix_caching)}


def drafter_metrics(llm: Any) -> list[dict | None]:
    """Each worker's ``SpecDrafter.metrics()`` as of now, for an offline ``vllm.LLM`` (None for
    a worker without a specdraft proposer). The published counters (``engine_metrics``) trail the
    engine and refresh only on steps; this reads the drafter itself, between steps."""
    return llm.collective_rpc(METRICS_METHOD)
