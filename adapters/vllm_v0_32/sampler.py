"""vLLM 0.32 CPU rejection-sampler fixes, installed in each worker by the plugin.

* CPU build bug (vllm-project/vllm PR #55006, open): ``cpu_triton_utils._expand_kernel_impl`` writes
  into an int64 temporary, so temperature/top-k/top-p of rows under verification are read from an
  unwritten buffer. The platform registers that function as the ``expand_kernel`` override right
  after the general plugins load in each worker (``WorkerWrapperBase.init_worker``).
  ``apply_sampler_fix`` installs ``expand_kernel_impl`` in its place.
* CPU build: with any speculative method, every step builds spec-decode metadata, even a step
  whose batch has no draft token; the rejection sampler then applies top-k to zero rows, and
  ``apply_top_k_only`` (the CPU top-k path) calls ``k.max()`` on an empty tensor: a request with
  top_k in such a step kills the engine. Found by specdraft's tests; ``apply_top_k_guard``
  guards it.

The releases each fix applies to are ``SAMPLER_FIX_VERSIONS`` and ``TOP_K_GUARD_VERSIONS``
(``specdraft.adapters.vllm_v0_32.contract``).
"""

from __future__ import annotations

import functools
import os
import sys

from specdraft.adapters.vllm_v0_32.contract import (LEAN_SAMPLER_VERSIONS, SAMPLER_FIX_VERSIONS,
                                                    TOP_K_GUARD_VERSIONS)

SAMPLER_FIX_ENV = "SPECDRAFT_VLLM_SAMPLER_FIX"  # "0" leaves the bug in (tests show it matters)
_EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


def expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to,
                       MAX_NUM_TOKENS=None):
    """``expand_kernel`` for CPU, written at the caller's dtype.

    output[cu[i-1]:cu[i]] = input_val[i], with replace_from rewritten to replace_to before the
    store (the Triton kernel's order). The shim in vLLM 0.32 casts float32 temperature/top-p and
    int32 top-k to int64 copies and fills the copies, leaving ``output`` unwritten.
    """
    import torch

    batch = input_val.shape[0]
    if batch == 0:
        return
    cu = cu_num_tokens[:batch].to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from,
                         torch.full_like(input_val, replace_to), input_val)
    total = int(cu[-1])
    output[:total].copy_(torch.repeat_interleave(values, counts, output_size=total))


def _in_range(versions: tuple, version: tuple[int, int, int]) -> bool:
    lo, hi = versions
    return lo <= version < hi


def _not_here(env: str | None = None) -> str | None:
    """Why a CPU-only change is not made in this process ("not-cpu", "disabled": ``env`` is "0"),
    else None."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "not-cpu"
    if env is not None and os.environ.get(env, "1") == "0":
        return "disabled"
    return None


def sampler_fix_needed(version: tuple[int, int, int]) -> bool:
    return _in_range(SAMPLER_FIX_VERSIONS, version)


def apply_sampler_fix() -> str:
    """Install the fixed expand kernel on CPU; returns what happened (for the log)."""
    if why := _not_here(SAMPLER_FIX_ENV):
        return why
    from vllm.utils import cpu_triton_utils

    if getattr(cpu_triton_utils, "_specdraft_fixed", False):
        return "already"
    if not hasattr(cpu_triton_utils, "_expand_kernel_impl"):
        return "absent"
    # The platform reads this attribute when it registers its kernel overrides, which in each
    # worker happens right after the general plugins load.
    cpu_triton_utils._specdraft_original_expand_kernel_impl = cpu_triton_utils._expand_kernel_impl
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl
    cpu_triton_utils._specdraft_fixed = True
    # Plugins loaded after the overrides were registered: replace the registered one too.
    dispatcher = sys.modules.get("vllm.triton_utils.dispatcher")
    registry = getattr(dispatcher, "_registry", {}) if dispatcher is not None else {}
    if _EXPAND_KERNEL in registry and registry[_EXPAND_KERNEL][1] is not expand_kernel_impl:
        dispatcher.register_kernels({_EXPAND_KERNEL: expand_kernel_impl})
    return "applied"


# The verifier's copies of the target logits (all platforms' code; applied on CPU, where a copy
# of a [tokens, vocabulary] float32 tensor is milliseconds a step). vLLM's RejectionSampler.forward
# keeps the raw target logits for logprobs: it asks the bonus-token sampler for them
# (max_num_logprobs=-1: a float32 copy of every row's logits) and clones the draft positions'
# logits before the logits processors write into them. When no request of the batch asks for
# logprobs neither copy is read. ``lean_rejection_forward`` is that forward without them (same
# calls, same order, same sampled tokens); batches that ask for logprobs run vLLM's forward.
# The copy is checked against each release's source (contract.SOURCE_COPIES,
# test_vllm_source_contract).
LEAN_SAMPLER_ENV = "SPECDRAFT_VLLM_LEAN_SAMPLER"  # "0": vLLM's forward, copies included


def lean_rejection_forward(self, metadata, draft_probs, logits, sampling_metadata):
    """vLLM 0.32's ``RejectionSampler.forward`` for a batch that asks for no logprobs."""
    import torch
    from vllm.v1.outputs import SamplerOutput
    from vllm.v1.sample import rejection_sampler as rs

    if sampling_metadata.max_num_logprobs is not None or sampling_metadata.logprob_token_ids:
        return self._specdraft_vllm_forward(metadata, draft_probs, logits, sampling_metadata)
    assert metadata.max_spec_len <= rs.MAX_SPEC_LEN
    bonus_logits = logits[metadata.bonus_logits_indices]  # a copy: in-place work is safe
    bonus_token_ids = self.sampler(logits=bonus_logits, sampling_metadata=sampling_metadata,
                                   predict_bonus_token=True).sampled_token_ids
    target_logits = logits[metadata.target_logits_indices].to(torch.float32)  # a copy too
    target_logits = self.apply_logits_processors(target_logits, sampling_metadata, metadata)
    target_logits = rs.apply_sampling_constraints(target_logits, metadata.cu_num_draft_tokens,
                                                  sampling_metadata)
    output_token_ids = rs.rejection_sample(
        metadata.draft_token_ids, metadata.num_draft_tokens, metadata.max_spec_len,
        metadata.cu_num_draft_tokens, draft_probs, target_logits, bonus_token_ids,
        sampling_metadata, synthetic_mode=self.synthetic_mode,
        synthetic_conditional_rates=self.synthetic_conditional_rates,
        use_fp64_gumbel=self.use_fp64_gumbel)
    return SamplerOutput(sampled_token_ids=output_token_ids, logprobs_tensors=None)


def lean_sampler_needed(version: tuple[int, int, int]) -> bool:
    return _in_range(LEAN_SAMPLER_VERSIONS, version)


def apply_lean_sampler() -> str:
    """Make this process's rejection sampler skip the logits copies nobody reads (CPU only)."""
    if why := _not_here(LEAN_SAMPLER_ENV):
        return why
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    if getattr(RejectionSampler, "_specdraft_vllm_forward", None) is not None:
        return "already"
    RejectionSampler._specdraft_vllm_forward = RejectionSampler.forward
    RejectionSampler.forward = lean_rejection_forward
    return "applied"


def top_k_guard_needed(version: tuple[int, int, int]) -> bool:
    return _in_range(TOP_K_GUARD_VERSIONS, version)


def apply_top_k_guard() -> str:
    """Make the CPU top-k path accept a batch of zero rows (see this module's docstring)."""
    if why := _not_here():
        return why
    from vllm.v1.sample.ops import topk_topp_sampler

    original = getattr(topk_topp_sampler, "apply_top_k_only", None)
    if original is None:
        return "absent"
    if getattr(original, "_specdraft_guard", False):
        return "already"

    @functools.wraps(original)
    def apply_top_k_only(logits, k):
        if logits.shape[0] == 0:  # no draft token in this step: nothing to mask
            return logits
        return original(logits, k)

    apply_top_k_only._specdraft_guard = True
    topk_topp_sampler.apply_top_k_only = apply_top_k_only
    return "applied"
