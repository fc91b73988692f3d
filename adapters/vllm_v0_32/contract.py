"""What the vLLM 0.32 adapter relies on in vLLM's source, and the releases each part applies to.

``SUPPORTED`` is the range of releases this adapter is for; the CPU sampler fixes carry their own
ranges (``specdraft.adapters.vllm_v0_32.sampler``). ``SOURCE_FUNCTIONS``, ``SOURCE_FIELDS`` and
``PROPOSE_CALL`` list what the adapter wraps, calls and reads, checked against each supported
release's own source by tests/test_vllm_source_contract.py.
"""

from __future__ import annotations

SUPPORTED = ((0, 32, 0), (0, 33, 0))
# The CPU expand-kernel bug is in every release up to the newest checked (0.33.0).
SAMPLER_FIX_VERSIONS = ((0, 32, 0), (0, 34, 0))
TOP_K_GUARD_VERSIONS = ((0, 32, 0), (0, 33, 0))  # only checked on 0.32

# What this adapter wraps, calls or reads in vLLM, checked against each supported release's own
# source by tests/test_vllm_source_contract.py (a new release's adapter re-checks the same list).
# (file in the vllm package, qualified name, leading parameters it must take)
SOURCE_FUNCTIONS = (
    ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner.execute_model", ("self", "scheduler_output")),
    ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner.propose_draft_token_ids",
     ("self", "scheduler_output", "sampled_token_ids")),
    ("vllm/v1/spec_decode/custom_class_proposer.py", "create_custom_proposer", ("vllm_config",)),
    ("vllm/engine/arg_utils.py", "EngineArgs.create_speculative_config", ("self",)),
    ("vllm/logger.py", "init_logger", ("name",)),
    ("vllm/distributed/parallel_state.py", "get_tensor_model_parallel_rank", ()),
    ("vllm/utils/cpu_triton_utils.py", "_expand_kernel_impl",
     ("output", "input_val", "cu_num_tokens", "replace_from", "replace_to", "MAX_NUM_TOKENS")),
    ("vllm/triton_utils/dispatcher.py", "register_kernels", ("overrides",)),
    ("vllm/v1/sample/ops/topk_topp_sampler.py", "apply_top_k_only", ("logits", "k")),
    ("vllm/v1/worker/gpu_input_batch.py", "InputBatch.req_ids", ("self",)),
    ("vllm/v1/worker/gpu_input_batch.py", "CachedRequestState.num_tokens", ("self",)),
    ("vllm/v1/spec_decode/ngram_proposer.py", "NgramProposer.__init__", ("self", "vllm_config")),
    ("vllm/v1/spec_decode/ngram_proposer.py", "NgramProposer.propose",
     ("self", "num_speculative_tokens", "sampled_token_ids", "num_tokens_no_spec", "token_ids_cpu",
      "slot_mappings")),
    ("vllm/v1/spec_decode/ngram_proposer.py", "_find_longest_matched_ngram_and_propose_tokens",
     ("origin_tokens", "min_ngram", "max_ngram", "max_model_len", "k")),
    ("vllm/v1/spec_decode/suffix_decoding.py", "SuffixDecodingProposer.__init__", ("self", "vllm_config")),
    ("vllm/v1/spec_decode/suffix_decoding.py", "SuffixDecodingProposer.propose",
     ("self", "num_speculative_tokens", "input_batch", "sampled_token_ids", "slot_mappings")),
    ("vllm/v1/engine/input_processor.py", "InputProcessor.process_inputs",
     ("self", "request_id", "prompt", "params")),
    # the benchmarks' one burst (outputs.generate_in_one_burst): generate() adds its requests
    # through this method, between a scheduler pause and its resume
    ("vllm/entrypoints/common/offline.py", "OfflineInferenceMixin._add_completion_requests",
     ("self", "prompts", "params")),
    ("vllm/v1/engine/core_client.py", "SyncMPClient.call_utility", ("self", "method")),
    ("vllm/v1/engine/core.py", "EngineCore.pause_scheduler", ("self", "mode", "clear_cache")),
    ("vllm/v1/engine/core.py", "EngineCore.resume_scheduler", ("self",)),
)
# Fields read on vLLM objects: (file, class, names assigned in its body or __init__)
SOURCE_FIELDS = (
    ("vllm/v1/core/sched/output.py", "SchedulerOutput",
     ("scheduled_spec_decode_tokens", "num_spec_tokens_to_schedule", "finished_req_ids",
      "total_num_scheduled_tokens", "num_scheduled_tokens")),
    ("vllm/v1/worker/gpu_input_batch.py", "InputBatch",
     ("num_prompt_tokens", "num_tokens_no_spec", "token_ids_cpu", "req_id_to_index")),
    ("vllm/v1/worker/gpu_input_batch.py", "CachedRequestState",
     ("sampling_params", "output_token_ids")),
    # the tenant key: on the engine core's request, never on the worker's request state
    ("vllm/v1/engine/__init__.py", "EngineCoreRequest", ("cache_salt", "sampling_params")),
    ("vllm/v1/core/sched/output.py", "NewRequestData", ("req_id", "sampling_params")),
    ("vllm/v1/core/sched/output.py", "SchedulerOutput", ("scheduled_new_reqs",)),
    ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner",
     ("input_batch", "requests", "max_model_len", "num_spec_tokens", "drafter")),
    ("vllm/engine/arg_utils.py", "EngineArgs",
     ("speculative_config", "per_request_spec_decode_metrics")),
    ("vllm/config/speculative.py", "SpeculativeConfig", ("target_model_config",)),
    ("vllm/config/model.py", "ModelConfig", ("served_model_name", "model", "max_model_len")),
    # what the benchmarks read from generate() outputs (request_spec_counters)
    ("vllm/outputs.py", "CompletionOutput", ("token_ids", "spec_decode_metrics")),
    ("vllm/v1/metrics/stats.py", "RequestSpecDecodeMetrics", ("histogram", "num_draft_tokens")),
    # per-request timestamps (request_latencies: TTFT and TPOT; first_step_requests)
    ("vllm/outputs.py", "RequestOutput", ("metrics",)),
    ("vllm/v1/metrics/stats.py", "RequestStateStats",
     ("first_token_latency", "first_token_ts", "last_token_ts", "num_generation_tokens",
      "scheduled_ts")),
)
# The custom_class call site in GPUModelRunner.propose_draft_token_ids: the drafter's propose is
# called with these arguments (source text), which propose_arguments() reads by PROPOSE_PARAMS.
PROPOSE_CALL = ("sampled_token_ids", "self.input_batch.num_tokens_no_spec",
                "self.input_batch.token_ids_cpu", "slot_mappings=slot_mappings")

# The lean rejection sampler (sampler.py) applies to these releases
LEAN_SAMPLER_VERSIONS = ((0, 32, 0), (0, 33, 0))
# Functions the adapter replaces with its own copy of them:
# (file, qualified name, digest of the function's AST without its docstring)
SOURCE_COPIES = (
    ("vllm/v1/sample/rejection_sampler.py", "RejectionSampler.forward", "a20a032b3ab9fd45"),
)


