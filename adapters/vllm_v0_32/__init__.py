"""Everything specdraft knows about vLLM 0.32.x, in one place.

vLLM 0.32 facts this adapter relies on (checked against the 0.32.0 source):

* ``speculative_config={"method": "custom_class", "model": "pkg.mod.Class", ...}``: each worker
  imports the class and calls ``Class(vllm_config)``, then ``load_model(target_model)``, then per
  step ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None)``
  from ``GPUModelRunner.propose_draft_token_ids`` (the CPU runner inherits it).
* ``propose`` gets no request ids, rows are reordered between steps (``condense``, reorders),
  and nothing says when a request finishes. The model runner knows all of it:
  ``input_batch.req_ids[i]`` is row i's request at ``propose`` time,
  ``input_batch.num_prompt_tokens`` the prompt lengths, ``runner.requests`` the live requests
  with their ``SamplingParams``, and ``scheduler_output.finished_req_ids`` the requests that ended
  since the last step (finished and aborted alike). ``execute_model(scheduler_output)`` runs
  before ``_update_states`` drops them.
* ``SpeculativeConfig`` is a pydantic dataclass that forbids unknown keys, so specdraft's options
  are taken out of the dict in ``EngineArgs.create_speculative_config`` (process 0) and travel on
  the built config object as an attribute (it is pickled to the engine core and workers).
* Drafts may be 0..K tokens per row; more than K crashes the engine. The drafter is not called at
  all for a step whose longest sequence + K exceeds max_model_len.
* The CPU build has two rejection-sampler bugs that specdraft fixes in each worker (the expand
  kernel's copy bug, vllm-project/vllm PR #55006; top-k over a batch of zero rows): see
  ``sampler``.

The facts are kept by job, one module each; this package gives them all under one name (the
module ``specdraft.adapters.vllm_adapter()`` returns):

* ``contract``: the supported range, the releases each sampler fix applies to, and what the
  adapter reads in vLLM's source (checked by tests/test_vllm_source_contract.py);
* ``config``: process 0's hooks (options routing, request checks, scope transport) and what a
  worker reads of the engine's configuration;
* ``runner``: the model-runner hooks, ``StepView`` and ``StepRows``;
* ``sampler``: the CPU rejection-sampler fixes;
* ``worker``: the worker methods called through ``collective_rpc`` and helpers on an offline
  ``vllm.LLM``;
* ``peers``: vLLM's own proposers and runner stand-ins for the benchmarks;
* ``outputs``: what the benchmarks and the serving surface read from ``generate()`` outputs.
"""

from __future__ import annotations

from specdraft.adapters.vllm_v0_32.config import (
    METRICS_DIR_ATTR,
    OPTIONS_ATTR,
    OPTIONS_KEY,
    PLUGIN_NAME,
    PLUGINS_ENV,
    REQUEST_OPTIONS_KEY,
    SCOPE_ARG,
    EngineFacts,
    attach,
    cost_model_preset,
    cpu_cost_model,
    engine_facts,
    install_config_hook,
    install_request_check,
    install_scope_transport,
    is_custom_class,
    load_tokenizer,
    logger,
    plugin_excluded,
    request_scope,
    set_request_scope,
)
from specdraft.adapters.vllm_v0_32.contract import (
    LEAN_SAMPLER_VERSIONS,
    PROPOSE_CALL,
    SAMPLER_FIX_VERSIONS,
    SOURCE_COPIES,
    SOURCE_FIELDS,
    SOURCE_FUNCTIONS,
    SUPPORTED,
    TOP_K_GUARD_VERSIONS,
)
from specdraft.adapters.vllm_v0_32.outputs import (
    PER_REQUEST_METRICS_ARGS,
    first_step_requests,
    generate_in_one_burst,
    request_latencies,
    request_spec_counters,
    served_model_name,
)
from specdraft.adapters.vllm_v0_32.peers import (
    SUFFIX_DEFAULTS,
    BatchStandIn,
    _peer_config,
    RunnerStandIn,
    ngram_config,
    ngram_match_function,
    ngram_propose,
    ngram_proposer,
    scheduler_output_standin,
    suffix_cache_arguments,
    suffix_config,
    suffix_propose,
    suffix_proposer,
)
from specdraft.adapters.vllm_v0_32.runner import (
    PROPOSE_PARAMS,
    RequestRule,
    StepRows,
    StepView,
    _request_speculates,
    _runner_class,
    ended_normally,
    hooked_propose,
    hooked_step_begin,
    install_runner_hooks,
    propose_arguments,
    stateless_rows,
)
from specdraft.adapters.vllm_v0_32.sampler import (
    LEAN_SAMPLER_ENV,
    SAMPLER_FIX_ENV,
    apply_lean_sampler,
    apply_sampler_fix,
    apply_top_k_guard,
    expand_kernel_impl,
    lean_rejection_forward,
    lean_sampler_needed,
    sampler_fix_needed,
    top_k_guard_needed,
)
from specdraft.adapters.vllm_v0_32.worker import (
    METRICS_METHOD,
    RESET_METHOD,
    SAMPLER_FIX_METHOD,
    STEP_TIMES_METHOD,
    drafter_metrics,
    engine_schedule,
    install_worker_methods,
    reset_cross_request_state,
    shutdown_engine,
    speculative_config_of,
    step_times,
)

# What a star import of this adapter gives (vllm_v0_33 starts from it); the private names
# imported above are the ones vllm_v0_33 imports by name.
__all__ = [
    # contract
    "SUPPORTED", "SAMPLER_FIX_VERSIONS", "TOP_K_GUARD_VERSIONS", "SOURCE_FUNCTIONS",
    "SOURCE_FIELDS", "PROPOSE_CALL", "LEAN_SAMPLER_VERSIONS", "SOURCE_COPIES",
    # config
    "OPTIONS_KEY", "OPTIONS_ATTR", "PLUGINS_ENV", "PLUGIN_NAME", "METRICS_DIR_ATTR",
    "REQUEST_OPTIONS_KEY", "SCOPE_ARG", "logger", "plugin_excluded", "EngineFacts", "engine_facts",
    "cost_model_preset", "cpu_cost_model", "load_tokenizer", "is_custom_class", "attach",
    "install_config_hook", "install_request_check", "install_scope_transport",
    "set_request_scope", "request_scope",
    # runner
    "StepView", "StepRows", "RequestRule", "ended_normally", "PROPOSE_PARAMS",
    "propose_arguments", "stateless_rows", "install_runner_hooks",
    "hooked_step_begin", "hooked_propose",
    # sampler
    "SAMPLER_FIX_ENV", "expand_kernel_impl", "sampler_fix_needed", "apply_sampler_fix",
    "top_k_guard_needed", "apply_top_k_guard", "LEAN_SAMPLER_ENV", "lean_rejection_forward",
    "lean_sampler_needed", "apply_lean_sampler",
    # worker
    "RESET_METHOD", "METRICS_METHOD", "SAMPLER_FIX_METHOD", "STEP_TIMES_METHOD", "step_times",
    "install_worker_methods",
    "reset_cross_request_state", "speculative_config_of", "shutdown_engine", "engine_schedule",
    "drafter_metrics",
    # peers
    "ngram_config", "ngram_proposer", "ngram_propose", "ngram_match_function", "SUFFIX_DEFAULTS",
    "suffix_config", "suffix_cache_arguments", "suffix_proposer", "suffix_propose", "BatchStandIn",
    "RunnerStandIn", "scheduler_output_standin",
    # outputs
    "request_latencies", "first_step_requests", "PER_REQUEST_METRICS_ARGS", "served_model_name",
    "request_spec_counters", "generate_in_one_burst",
]
