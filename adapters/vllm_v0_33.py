"""Everything specdraft knows about vLLM 0.33.x, in one place.

vLLM 0.33.0 (the GPU release; no CPU build) was read against every fact of the 0.32 adapter
(tests/test_vllm_source_contract.py checks them against 0.33's own source, taken from its wheel):

* ``custom_class`` is unchanged: ``Class(vllm_config)``, ``load_model``, and
  ``propose(sampled_token_ids, input_batch.num_tokens_no_spec, input_batch.token_ids_cpu,
  slot_mappings=...)`` from ``GPUModelRunner.propose_draft_token_ids``.
* The runner state the hooks read (``input_batch.req_ids``, ``num_prompt_tokens``,
  ``runner.requests``, ``scheduler_output.finished_req_ids``, ``scheduled_spec_decode_tokens``,
  ``num_spec_tokens_to_schedule``) and ``EngineArgs.create_speculative_config`` are unchanged.
  ``SchedulerOutput`` gained ``skip_drafts`` (the runner's own drafters may skip a step); the
  custom_class path is still called every step.
* The CPU ``_expand_kernel_impl`` copy bug is still there (SAMPLER_FIX_VERSIONS covers 0.33), and
  ``apply_top_k_only`` still calls ``k.max()``; 0.33 has no CPU build, so neither CPU fix applies
  on the GPU platform (both are no-ops off CPU).
* The ngram and suffix proposers (the benchmarks' peers) have the same constructors and
  ``propose`` signatures.

So this adapter is 0.32's with its own supported range; a fact that changes in a later release
is overridden here, not edited in the 0.32 package.
"""

from __future__ import annotations

from specdraft.adapters.vllm_v0_32 import *  # noqa: F401,F403 - the same facts unless overridden
from specdraft.adapters.vllm_v0_32 import (  # noqa: F401 - names the star import leaves out
    _peer_config, _request_speculates, _runner_class)

SUPPORTED = ((0, 33, 0), (0, 34, 0))
# 0.33's RejectionSampler.forward passes three more arguments to rejection_sample, and 0.33 has no
# CPU build: the lean verification copy (LEAN_SAMPLER_VERSIONS, 0.32 only) is not checked here.
SOURCE_COPIES = ()
