"""What the vLLM 0.34 adapter relies on in vLLM's source, checked against the 0.34.0 wheel's own
source by tests/test_vllm_source_contract.py (parsed, not imported: 0.34 has no CPU build)."""

from __future__ import annotations

SUPPORTED = ((0, 34, 0), (0, 35, 0))

# (file in the vllm package, qualified name, leading parameters it must take)
SOURCE_FUNCTIONS = (
    # registration, from specdraft's vllm.general_plugins entry point (every process)
    ("vllm/v1/worker/gpu/spec_decode/speculator_config.py", "register_speculative_method",
     ("name", "config_cls")),
    ("vllm/v1/worker/gpu/spec_decode/speculator_config.py", "SpeculatorConfig.configure",
     ("cls", "spec")),
    # the speculator is built with (vllm_config, device, req_states=...)
    ("vllm/v1/worker/gpu/spec_decode/__init__.py", "init_speculator",
     ("vllm_config", "device", "req_states")),
    ("vllm/v1/worker/gpu/spec_decode/speculator.py", "BaseSpeculator.propose",
     ("self", "input_batch", "attn_metadata", "slot_mappings", "last_hidden_states",
      "aux_hidden_states", "num_sampled", "num_rejected", "last_sampled", "next_prefill_tokens",
      "temperature", "seeds", "dp_sync_state", "dummy_run", "skip_attn_for_dummy_run",
      "mm_inputs", "is_profile", "num_speculative_tokens")),
    ("vllm/v1/worker/gpu/spec_decode/speculator.py", "BaseSpeculator.add_request",
     ("self", "req_index")),
    ("vllm/v1/worker/gpu/spec_decode/speculator.py", "BaseSpeculator.on_requests_finished",
     ("self", "finished_req_ids")),
    ("vllm/v1/worker/gpu/spec_decode/speculator.py", "BaseSpeculator.reset_state", ("self",)),
    ("vllm/v1/worker/gpu/spec_decode/speculator.py", "BaseSpeculator.init_cudagraph_manager",
     ("self", "cudagraph_mode")),
    ("vllm/v1/worker/gpu/spec_decode/speculator.py", "BaseSpeculator.capture", ("self",)),
    # the one patch: each new request's SamplingParams (opt-out, tenant scope, stop rules)
    # handed to the speculator before the runner adds the request (runner.add_request_params)
    ("vllm/v1/worker/gpu/model_runner.py", "GPUModelRunner.add_requests",
     ("self", "scheduler_output")),
    # process 0, as in 0.32: per-request option checks and the tenant scope's transport
    ("vllm/v1/engine/input_processor.py", "InputProcessor.process_inputs",
     ("self", "request_id", "prompt", "params")),
    ("vllm/v1/engine/input_processor.py", "InputProcessor._validate_params", ("self", "params")),
    ("vllm/engine/arg_utils.py", "EngineArgs.create_speculative_config", ("self",)),
    ("vllm/logger.py", "init_logger", ("name",)),
    ("vllm/distributed/parallel_state.py", "get_tensor_model_parallel_rank", ()),
)
# Fields read on vLLM objects: (file, class, names assigned in its body or __init__)
SOURCE_FIELDS = (
    ("vllm/config/speculative.py", "SpeculativeConfig",
     ("speculator_options", "custom_method", "enable_adaptive_verification",
      "num_speculative_tokens", "target_model_config")),
    ("vllm/v1/worker/gpu/spec_decode/speculator_config.py", "SpeculatorConfig",
     ("base_method", "speculator_class", "supported_options", "prefer_dense_token_history",
      "adaptive_verification_uses_draft_logits")),
    ("vllm/v1/worker/gpu/states.py", "RequestState",
     ("all_token_ids", "total_len", "prompt_len", "req_id_to_index")),
    ("vllm/v1/worker/gpu/input_batch.py", "InputBatch",
     ("req_ids", "num_reqs", "idx_mapping", "idx_mapping_np", "num_tokens",
      "num_draft_tokens_per_req")),
    ("vllm/v1/worker/gpu/model_runner.py", "GPUModelRunner", ("speculator", "req_states")),
    ("vllm/v1/core/sched/output.py", "NewRequestData", ("req_id", "sampling_params")),
    ("vllm/v1/core/sched/output.py", "SchedulerOutput", ("scheduled_new_reqs",)),
    ("vllm/v1/engine/__init__.py", "EngineCoreRequest", ("cache_salt", "sampling_params")),
    ("vllm/config/model.py", "ModelConfig", ("served_model_name", "model", "max_model_len")),
)
# The runner's speculator call site (GPUModelRunner.sample_tokens): the arguments specdraft's
# propose reads, by position then keyword, as the source text passes them.
PROPOSE_CALL = ("input_batch", "attn_metadata", "slot_mappings_by_layer", "spec_hidden_states",
                "aux_hidden_states", "num_sampled", "num_rejected",
                "self.req_states.last_sampled_tokens", "self.req_states.next_prefill_tokens",
                "self.sampler.sampling_states.temperature.gpu",
                "self.sampler.sampling_states.seeds.gpu",
                "num_speculative_tokens=num_spec_tokens", "dp_sync_state=dp_sync_state",
                "mm_inputs=mm_inputs")
# Functions the adapter replaces with a copy: none on 0.34
SOURCE_COPIES = ()
