"""Peers and stand-ins for benchmarks (specdraft overhead, replay) on vLLM 0.32: vLLM's own
ngram and suffix proposers built by their own ``__init__``, and the runner objects the step
hooks read.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np


def _peer_config(num_speculative_tokens: int, max_model_len: int, max_num_seqs: int,
                 **speculative: Any) -> Any:
    """The VllmConfig attributes 0.32's ngram and suffix proposers read in ``__init__``."""
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=num_speculative_tokens,
                                           **speculative),
        model_config=SimpleNamespace(max_model_len=max_model_len),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
        parallel_config=SimpleNamespace(tensor_parallel_size=1))


def ngram_config(num_speculative_tokens: int, prompt_lookup_min: int, prompt_lookup_max: int,
                 max_model_len: int, max_num_seqs: int) -> Any:
    return _peer_config(num_speculative_tokens, max_model_len, max_num_seqs,
                        prompt_lookup_min=prompt_lookup_min, prompt_lookup_max=prompt_lookup_max)


def ngram_proposer(num_speculative_tokens: int, prompt_lookup_min: int, prompt_lookup_max: int,
                   max_model_len: int, max_num_seqs: int) -> Any:
    """vLLM's ``NgramProposer`` (its __init__ runs the numba JIT warm-up)."""
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    return NgramProposer(ngram_config(num_speculative_tokens, prompt_lookup_min,
                                      prompt_lookup_max, max_model_len, max_num_seqs))


def ngram_propose(proposer: Any, num_speculative_tokens: int, sampled_token_ids, num_tokens_no_spec,
                  token_ids_cpu) -> list[list[int]]:
    """What GPUModelRunner.propose_draft_token_ids passes to the ngram proposer."""
    return proposer.propose(num_speculative_tokens, sampled_token_ids, num_tokens_no_spec,
                            token_ids_cpu, slot_mappings=None)


def ngram_match_function() -> Callable:
    """vLLM's per-request n-gram match (``_find_longest_matched_ngram_and_propose_tokens``)."""
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

    return _find_longest_matched_ngram_and_propose_tokens


# vLLM 0.32 defaults of the suffix method's options
SUFFIX_DEFAULTS = dict(suffix_decoding_max_tree_depth=24, suffix_decoding_max_cached_requests=10000,
                       suffix_decoding_max_spec_factor=1.0, suffix_decoding_min_token_prob=0.1)


def suffix_config(num_speculative_tokens: int, max_model_len: int, **options: Any) -> Any:
    return _peer_config(num_speculative_tokens, max_model_len, 1, **{**SUFFIX_DEFAULTS, **options})


def suffix_cache_arguments(**options: Any) -> tuple[dict, dict]:
    """(arctic's ``SuffixDecodingCache`` constructor arguments, its ``speculate`` keyword
    arguments but ``max_spec_tokens``) as 0.32's ``SuffixDecodingProposer`` passes them from the
    suffix method's options (``SUFFIX_DEFAULTS`` unless given). The proposer's pattern is the
    request's last ``max_tree_depth`` tokens."""
    o = {**SUFFIX_DEFAULTS, **options}
    return ({"max_tree_depth": o["suffix_decoding_max_tree_depth"],
             "max_cached_requests": o["suffix_decoding_max_cached_requests"]},
            {"max_spec_factor": o["suffix_decoding_max_spec_factor"],
             "min_token_prob": o["suffix_decoding_min_token_prob"]})


def suffix_proposer(num_speculative_tokens: int, max_model_len: int, **options: Any) -> Any:
    """vLLM's ``SuffixDecodingProposer`` (arctic-inference's suffix cache behind it)."""
    from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer

    return SuffixDecodingProposer(suffix_config(num_speculative_tokens, max_model_len, **options))


def suffix_propose(proposer: Any, num_speculative_tokens: int, input_batch: Any,
                   sampled_token_ids) -> list[list[int]]:
    """What GPUModelRunner.propose_draft_token_ids passes to the suffix proposer."""
    return proposer.propose(num_speculative_tokens, input_batch, sampled_token_ids,
                            slot_mappings=None)


class BatchStandIn:
    """The part of 0.32's ``InputBatch`` the suffix proposer and specdraft's hooks read."""

    def __init__(self, token_ids_cpu: np.ndarray, num_prompt_tokens: np.ndarray,
                 req_ids: list[str]):
        self.token_ids_cpu = token_ids_cpu
        self.num_prompt_tokens = num_prompt_tokens
        self.num_tokens_no_spec = num_prompt_tokens.astype(np.int32).copy()
        self.req_ids = req_ids
        self.req_id_to_index = {r: i for i, r in enumerate(req_ids)}


class _RequestStandIn:
    """The part of 0.32's ``CachedRequestState`` the runner hooks read: sampling parameters
    without stop tokens (a request ends at ``max_tokens``) and the output so far."""

    def __init__(self, num_prompt_tokens: int, max_tokens: int):
        self.num_prompt_tokens = num_prompt_tokens
        self.sampling_params = SimpleNamespace(max_tokens=max_tokens, stop_token_ids=None,
                                               eos_token_id=None, ignore_eos=True, extra_args=None)
        self.output_token_ids: list[int] = []

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + len(self.output_token_ids)


class RunnerStandIn:
    """The part of 0.32's ``GPUModelRunner`` the runner hooks read (``hooked_step_begin``,
    ``hooked_propose``), for timing a proposer outside an engine the way the engine drives it:
    the batch, each request's state, the length limit, the draft bound, the drafter."""

    def __init__(self, input_batch: BatchStandIn, max_tokens: list[int], max_model_len: int,
                 num_spec_tokens: int, drafter: Any):
        self.input_batch = input_batch
        self.requests = {r: _RequestStandIn(int(n), m) for r, n, m in
                         zip(input_batch.req_ids, input_batch.num_prompt_tokens, max_tokens)}
        self.max_model_len = max_model_len
        self.num_spec_tokens = num_spec_tokens
        self.drafter = drafter

    def propose_draft_token_ids(self, scheduler_output: Any, sampled_token_ids) -> list[list[int]]:
        """vLLM's call of a ``custom_class`` drafter (``propose_draft_token_ids``)."""
        b = self.input_batch
        return self.drafter.propose(sampled_token_ids, b.num_tokens_no_spec, b.token_ids_cpu,
                                    slot_mappings=None)


def scheduler_output_standin(finished_req_ids: set, scheduled_spec_decode_tokens: dict,
                             total_num_scheduled_tokens: int, num_spec_tokens: int) -> Any:
    """The part of 0.32's ``SchedulerOutput`` the runner hooks read (no new requests)."""
    return SimpleNamespace(finished_req_ids=finished_req_ids, scheduled_new_reqs=[],
                           total_num_scheduled_tokens=total_num_scheduled_tokens,
                           scheduled_spec_decode_tokens=scheduled_spec_decode_tokens,
                           num_spec_tokens_to_schedule=num_spec_tokens,
                           num_invalid_spec_tokens=None)
