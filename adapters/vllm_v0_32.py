"""Everything specdraft knows about vLLM 0.32.x, in one place.

vLLM 0.32 facts this module relies on (checked against the 0.32.0 source):

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
* CPU build: with any speculative method, every step builds spec-decode metadata, even a step
  whose batch has no draft token; the rejection sampler then applies top-k to zero rows, and
  ``apply_top_k_only`` (the CPU top-k path) calls ``k.max()`` on an empty tensor: a request with
  top_k in such a step kills the engine. Found by specdraft's tests; guarded here.
* CPU build bug (vllm-project/vllm PR #55006, open): ``cpu_triton_utils._expand_kernel_impl`` writes
  into an int64 temporary, so temperature/top-k/top-p of rows under verification are read from an
  unwritten buffer. The platform registers that function as the ``expand_kernel`` override right
  after the general plugins load in each worker (``WorkerWrapperBase.init_worker``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import time
from itertools import repeat
from typing import Any, Callable

import numpy as np

from specdraft.proposers.base import accepted_count


SUPPORTED = ((0, 32, 0), (0, 33, 0))
# The CPU expand-kernel bug is in every release up to the newest checked (0.33.0).
SAMPLER_FIX_VERSIONS = ((0, 32, 0), (0, 34, 0))
SAMPLER_FIX_ENV = "SPECDRAFT_VLLM_SAMPLER_FIX"  # "0" leaves the bug in (tests show it matters)
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
)
# Fields read on vLLM objects: (file, class, names assigned in its body or __init__)
SOURCE_FIELDS = (
    ("vllm/v1/core/sched/output.py", "SchedulerOutput",
     ("scheduled_spec_decode_tokens", "num_spec_tokens_to_schedule", "finished_req_ids",
      "total_num_scheduled_tokens")),
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

OPTIONS_KEY = "specdraft"                  # the key users add to speculative_config
OPTIONS_ATTR = "specdraft_options"         # validated options, on the built SpeculativeConfig
PLUGINS_ENV = "VLLM_PLUGINS"  # comma-separated: vLLM loads only the plugins it names (unset: all)
PLUGIN_NAME = "specdraft"     # our vllm.general_plugins entry point's name (pyproject.toml)


def plugin_excluded() -> str | None:
    """``VLLM_PLUGINS``' value when it leaves specdraft's plugin out (vLLM then never runs it:
    no config hook, so a ``"specdraft"`` key fails vLLM's own config check), else None."""
    value = os.environ.get(PLUGINS_ENV)
    if value is None or PLUGIN_NAME in value.split(","):
        return None
    return value
METRICS_DIR_ATTR = "specdraft_metrics_dir"  # where workers leave figures for process 0
REQUEST_OPTIONS_KEY = "specdraft"          # SamplingParams.extra_args[...] per-request options
# The OpenAI server copies a request's "vllm_xargs" (values: strings, numbers, lists; JSON false
# arrives as 0) into SamplingParams.extra_args; every request of every front end passes
# InputProcessor._validate_params in process 0, where a VLLMValidationError becomes HTTP 400.
_INPUT_PROCESSOR = "vllm.v1.engine.input_processor"

_EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"

# A request's tenant scope is its cache_salt (prompt field offline, request field on the OpenAI
# server). vLLM keeps the salt on the engine core's request (EngineCoreRequest / Request) and
# does not send it to the workers, so process 0 copies it into the request's own
# SamplingParams.extra_args under this key, which the workers read from NewRequestData. Any value
# a client put there is overwritten or removed, so no request can claim another's scope.
SCOPE_ARG = "_specdraft_scope"


def logger():
    # Under "vllm." so vLLM's logging configuration (format, level, process prefix) applies.
    from vllm.logger import init_logger

    return init_logger("vllm.specdraft")


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EngineFacts:
    num_speculative_tokens: int
    max_model_len: int
    vocab_size: int
    options: dict | None      # None: process 0 did not run specdraft's config hook
    metrics_dir: str | None
    tp_rank: int


def engine_facts(vllm_config: Any) -> EngineFacts:
    spec = vllm_config.speculative_config
    model_config = vllm_config.model_config
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        tp_rank = get_tensor_model_parallel_rank()
    except Exception:  # not initialised (unit use): a single rank
        tp_rank = 0
    return EngineFacts(
        num_speculative_tokens=int(spec.num_speculative_tokens),
        max_model_len=int(model_config.max_model_len),
        vocab_size=int(model_config.get_vocab_size()),
        options=getattr(spec, OPTIONS_ATTR, None),
        metrics_dir=getattr(spec, METRICS_DIR_ATTR, None),
        tp_rank=tp_rank,
    )


def cost_model_preset(vllm_config: Any) -> str:
    """specdraft's verification-cost prior: on CPU the curve of the dtype, on a GPU the preset of
    the target's size (parameters estimated from its Hugging Face config)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        from specdraft.proposers.controller import preset_for_config

        return preset_for_config(getattr(vllm_config.model_config, "hf_config", None))
    return cpu_cost_model(str(getattr(vllm_config.model_config, "dtype", "")))


def cpu_cost_model(dtype: str) -> str:
    """The CPU curve for a target dtype ("float32" or "torch.float32": ``cpu-fp32``; else bf16's)."""
    return "cpu-fp32" if dtype.removeprefix("torch.") == "float32" else "cpu-bf16"


def load_tokenizer(vllm_config: Any) -> Any:
    """The target's tokenizer (for text corpus files)."""
    from transformers import AutoTokenizer

    mc = vllm_config.model_config
    return AutoTokenizer.from_pretrained(mc.tokenizer, revision=mc.tokenizer_revision,
                                         trust_remote_code=mc.trust_remote_code)


def is_custom_class(spec_config: Any) -> bool:
    return spec_config is not None and getattr(spec_config, "method", None) == "custom_class"


def attach(spec_config: Any, options: dict, metrics_dir: str | None) -> None:
    # Plain attributes: pydantic validates only at construction, and pickling keeps __dict__.
    setattr(spec_config, OPTIONS_ATTR, options)
    setattr(spec_config, METRICS_DIR_ATTR, metrics_dir)


def install_config_hook(prepare: Callable[[Any, Any, bool], None]) -> bool:
    """Route ``speculative_config["specdraft"]`` around SpeculativeConfig's extra-key check.

    ``prepare(spec_config_or_None, raw_options, given)`` validates and attaches the options; it
    raises to fail startup. Only process 0 builds the engine config, and it has imported
    ``vllm.engine.arg_utils`` before it loads plugins; elsewhere there is nothing to hook.
    """
    arg_utils = sys.modules.get("vllm.engine.arg_utils")
    if arg_utils is None:
        return False
    engine_args = arg_utils.EngineArgs
    original = engine_args.create_speculative_config
    if getattr(original, "_specdraft_hook", False):
        return True

    @functools.wraps(original)
    def create_speculative_config(self, *args, **kwargs):
        given = False
        raw = None
        spec_dict = self.speculative_config
        if isinstance(spec_dict, dict) and OPTIONS_KEY in spec_dict:
            spec_dict = dict(spec_dict)
            raw = spec_dict.pop(OPTIONS_KEY)
            given = True
            self.speculative_config = spec_dict
            self._specdraft_raw_options = raw  # a rebuilt config sees the same options
        elif hasattr(self, "_specdraft_raw_options"):
            raw, given = self._specdraft_raw_options, True
        spec_config = original(self, *args, **kwargs)
        prepare(spec_config, raw, given)
        return spec_config

    create_speculative_config._specdraft_hook = True  # type: ignore[attr-defined]
    engine_args.create_speculative_config = create_speculative_config
    return True


def install_request_check(check: Callable[[Any], None]) -> bool:
    """Run ``check(extra_args)`` on each request's extra arguments as vLLM validates it.

    ``check`` raises ValueError; the request is refused with its message (HTTP 400 from the
    OpenAI server, an exception from ``LLM.generate``). Only engines whose speculative config
    carries specdraft's options are checked.
    """
    from vllm.exceptions import VLLMValidationError

    def wrap(original):
        def _validate_params(self, params, *args, **kwargs):
            spec = getattr(self, "speculative_config", None)
            extra = getattr(params, "extra_args", None)
            if extra and getattr(spec, OPTIONS_ATTR, None) is not None:
                try:
                    check(extra)
                except ValueError as e:
                    raise VLLMValidationError(str(e), parameter="vllm_xargs") from None
            return original(self, params, *args, **kwargs)
        return _validate_params

    _wrap_input_processor("_validate_params", wrap)
    return True


def _wrap_input_processor(name: str, wrap: Callable[[Any], Any]) -> None:
    """``InputProcessor.<name>`` replaced by ``wrap(original)``, once (process 0)."""
    import importlib

    processor_cls = importlib.import_module(_INPUT_PROCESSOR).InputProcessor
    original = getattr(processor_cls, name)
    if getattr(original, "_specdraft_hook", False):
        return
    wrapped = functools.wraps(original)(wrap(original))
    wrapped._specdraft_hook = True  # type: ignore[attr-defined]
    setattr(processor_cls, name, wrapped)


def install_scope_transport() -> bool:
    """Copy each request's ``cache_salt`` into its ``SamplingParams.extra_args[SCOPE_ARG]``
    as vLLM builds the engine core's request (``InputProcessor.process_inputs``, process 0),
    in engines whose speculative config carries specdraft's options."""
    def wrap(original):
        def process_inputs(self, *args, **kwargs):
            request = original(self, *args, **kwargs)
            if getattr(getattr(self, "speculative_config", None), OPTIONS_ATTR, None) is not None:
                set_request_scope(request)
            return request
        return process_inputs

    _wrap_input_processor("process_inputs", wrap)
    return True


def set_request_scope(request: Any) -> None:
    """``request.cache_salt`` into its sampling parameters' extra arguments (a new dict: the
    caller's SamplingParams may be shared by many prompts)."""
    sp = getattr(request, "sampling_params", None)
    if sp is None:
        return
    salt = getattr(request, "cache_salt", None)
    extra = dict(sp.extra_args or {})
    if salt is not None:
        extra[SCOPE_ARG] = str(salt)
    elif SCOPE_ARG not in extra:
        return
    else:
        del extra[SCOPE_ARG]
    sp.extra_args = extra or None


def request_scope(sampling_params: Any) -> str | None:
    """A worker's view of a request's scope (None: unsalted)."""
    extra = getattr(sampling_params, "extra_args", None)
    scope = extra.get(SCOPE_ARG) if extra else None
    return scope if isinstance(scope, str) else None


# ---------------------------------------------------------------------------------------------
# Request identity: hooks on the model runner
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class StepBegin:
    """What a step tells before the runner updates its batch."""

    finished: list[tuple[str, bool]]  # (req_id, aborted) for requests that ended since last step
    num_scheduled_tokens: int         # tokens the target scores this step
    started_at: float                 # perf_counter() at execute_model entry
    scopes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #                                   (req_id, scope) of new salted requests


def _stop_token_ids(sampling_params: Any) -> set[int]:
    stops = set(getattr(sampling_params, "stop_token_ids", None) or ())
    eos = getattr(sampling_params, "eos_token_id", None)
    if eos is not None and not getattr(sampling_params, "ignore_eos", False):
        stops.add(eos)
    return stops


def ended_normally(req_state: Any, max_model_len: int, lookback: int) -> bool:
    """Did a request in ``finished_req_ids`` stop on its own (stop token, max_tokens, length)?

    The engine core reports finished and aborted requests alike. vLLM implements stop strings
    as an abort from the front end, so those count as aborted here too.
    """
    sp = getattr(req_state, "sampling_params", None)
    out = getattr(req_state, "output_token_ids", None) or []
    if sp is None:
        return False
    max_tokens = getattr(sp, "max_tokens", None)
    if max_tokens is not None and len(out) >= max_tokens:
        return True
    if req_state.num_tokens >= max_model_len:
        return True
    # With speculation, tokens accepted after a stop token stay in the runner's copy.
    stops = _stop_token_ids(sp)
    return bool(stops) and any(t in stops for t in out[-lookback:])


def stopped_in_step(req_state: Any, max_model_len: int, num_sampled: int) -> bool:
    """Did the tokens sampled in this step end the request (the scheduler will finish it)?

    Read in the step itself, so a request's history reaches the global cache without waiting
    for the next step (``finished_req_ids`` arrives only then, if traffic goes on at all).
    ``runner.requests[id].output_token_ids`` already holds this step's tokens at ``propose``.
    Stop strings are found by the front end, which then aborts: those wait for the next step.
    """
    sp = getattr(req_state, "sampling_params", None)
    out = getattr(req_state, "output_token_ids", None)
    if sp is None or out is None or num_sampled <= 0:
        return False
    n = len(out)
    max_tokens = getattr(sp, "max_tokens", None)
    if (max_tokens is not None and n >= max_tokens) or req_state.num_tokens >= max_model_len:
        return True
    # As the scheduler's check_stop: a stop token ends the request whatever min_tokens says
    # (the min_tokens logits processor keeps stop tokens from being sampled before then).
    stops = _stop_token_ids(sp)
    return bool(stops) and any(t in stops for t in out[n - num_sampled:])


def _request_speculates(req_state: Any) -> bool:
    from specdraft.proposers.config import request_speculates

    sp = getattr(req_state, "sampling_params", None)
    return request_speculates(getattr(sp, "extra_args", None) if sp is not None else None)


class StepView:
    """Request identity for one ``propose`` call, read from the model runner."""

    def __init__(self, runner: Any, scheduler_output: Any):
        self.runner = runner
        self.scheduler_output = scheduler_output

    def budget(self, num_speculative_tokens: int) -> int:
        n = getattr(self.scheduler_output, "num_spec_tokens_to_schedule", 0) or 0
        return min(num_speculative_tokens, n) if n > 0 else num_speculative_tokens

    def verified(self, sampled_token_ids: list[list[int]]) -> tuple[int, int, int]:
        """(drafts, draft tokens, accepted tokens) verified in this step, counted as the
        scheduler counts ``vllm:spec_decode_*`` (``Scheduler.update_from_output``)."""
        scheduled = self.scheduler_output.scheduled_spec_decode_tokens
        if not scheduled:
            return 0, 0, 0
        invalid = getattr(self.scheduler_output, "num_invalid_spec_tokens", None) or {}
        req_ids = self.runner.input_batch.req_ids
        drafts = draft_tokens = accepted = 0
        for i, sampled in enumerate(sampled_token_ids):
            spec = scheduled.get(req_ids[i]) if sampled else None
            if spec:
                drafts += 1
                draft_tokens += len(spec) - invalid.get(req_ids[i], 0)
                accepted += max(len(sampled) - 1, 0)
        return drafts, draft_tokens, accepted

    def live_req_ids(self):
        return self.runner.requests.keys()

    def step_rows(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                  num_speculative_tokens: int, max_model_len: int, speculates: Any) -> "StepRows":
        """The batch as flat arrays, for ``SpecDrafter.step`` (no Python loop over rows that
        decode; rows still in prefill emit nothing and are left out)."""
        num_rows = len(sampled_token_ids)
        batch = self.runner.input_batch
        all_ids = batch.req_ids
        if len(all_ids) < num_rows:
            raise RuntimeError(
                f"vLLM batch has {len(all_ids)} request ids for {num_rows} rows")
        emitted = list(map(len, sampled_token_ids))
        num_tokens = num_tokens_no_spec[:num_rows]
        num_prompt = batch.num_prompt_tokens[:num_rows]
        if 0 in emitted:  # some rows are still in prefill
            rows = [i for i, e in enumerate(emitted) if e]
            req_ids = [all_ids[i] for i in rows]
            emitted = [emitted[i] for i in rows]
            num_tokens, num_prompt = num_tokens[rows], num_prompt[rows]
        else:
            rows, req_ids = None, all_ids[:num_rows]
        scheduled = self.scheduler_output.scheduled_spec_decode_tokens
        num_drafted = map(len, map(scheduled.get, req_ids, repeat(())))
        num_accepted = list(map(accepted_count, emitted, num_drafted))
        budget = self.budget(num_speculative_tokens)
        wanted = list(map(speculates.__getitem__, req_ids))
        # requests this step's tokens ended: finished (into the global cache) in this step, not
        # at the next one (finished_req_ids arrives only then, if traffic goes on at all)
        requests = self.runner.requests
        ended = [r for r, e in zip(req_ids, emitted)
                 if stopped_in_step(requests.get(r), max_model_len, e)]
        if ended:
            gone = set(ended)
            wanted = [w and r not in gone for w, r in zip(wanted, req_ids)]
        caps = budget if all(wanted) else [budget if w else 0 for w in wanted]
        return StepRows(num_rows, rows, req_ids, num_tokens, num_prompt, caps, num_accepted,
                        emitted, max_model_len - 1, ended)

    def request_speculates(self, req_id: str) -> bool:
        req_state = self.runner.requests.get(req_id)
        return req_state is None or _request_speculates(req_state)

    def engine_step(self, engine: Any, core: Any, args: tuple, kwargs: dict,
                    num_speculative_tokens: int, max_model_len: int, finished: list,
                    aborted: list, scored_tokens: int, scored_seconds: float) -> list[list[int]]:
        """The propose call handed to the native engine step (proposers/native/engine_step.h)
        with vLLM's arrays as they are: the same rows, accepted counts, caps and ended requests
        as ``step_rows`` (its plain-Python twin), and vLLM's ``list[list[int]]`` back.

        0.32 facts it relies on: at ``propose`` the sampled tokens are already in
        ``token_ids_cpu[i, :num_tokens_no_spec[i]]``, and ``num_tokens_no_spec[i]`` equals
        ``requests[req_ids[i]].num_tokens`` (= ``num_prompt_tokens[i]`` + its output tokens).
        """
        if len(args) >= 3:  # propose_arguments' fast path, inlined: this runs every step
            sampled, num_tokens_no_spec, token_ids_cpu = args[0], args[1], args[2]
        else:
            sampled, num_tokens_no_spec, token_ids_cpu = propose_arguments(args, kwargs)
        batch = self.runner.input_batch
        out = self.scheduler_output
        n = getattr(out, "num_spec_tokens_to_schedule", 0) or 0  # budget(), inlined (every step)
        budget = num_speculative_tokens if n <= 0 or n > num_speculative_tokens else n
        return engine.step(core, batch.req_ids, sampled, num_tokens_no_spec, token_ids_cpu,
                           batch.num_prompt_tokens, out.scheduled_spec_decode_tokens, budget,
                           max_model_len - 1, max_model_len, self.request_rule, finished, aborted,
                           scored_tokens, scored_seconds)

    def request_rule(self, req_id: str) -> tuple | None:
        """What the native step needs of a request, asked once: (speculates, max_tokens,
        stop token ids), the rules of ``request_speculates`` and ``stopped_in_step``; None
        for a request without sampling parameters (speculates, never ended here)."""
        req_state = self.runner.requests.get(req_id)
        sp = getattr(req_state, "sampling_params", None)
        if sp is None or getattr(req_state, "output_token_ids", None) is None:
            return None
        return (_request_speculates(req_state), getattr(sp, "max_tokens", None),
                tuple(_stop_token_ids(sp)))


# ---------------------------------------------------------------------------------------------
# The engine step: vLLM's propose call as SpecDrafter.step arguments
# ---------------------------------------------------------------------------------------------

# vLLM 0.32 calls ``drafter.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
# slot_mappings=...)`` (GPUModelRunner.propose_draft_token_ids, custom_class branch).
PROPOSE_PARAMS = ("sampled_token_ids", "num_tokens_no_spec", "token_ids_cpu", "slot_mappings")


def propose_arguments(args: tuple, kwargs: dict) -> tuple[list[list[int]], Any, Any]:
    """(sampled_token_ids, num_tokens_no_spec, token_ids_cpu) from vLLM's propose call."""
    if len(args) >= 3:
        return args[0], args[1], args[2]
    bound = dict(zip(PROPOSE_PARAMS, args))
    bound.update(kwargs)
    try:
        return bound["sampled_token_ids"], bound["num_tokens_no_spec"], bound["token_ids_cpu"]
    except KeyError as e:
        raise TypeError(f"propose() called without {e.args[0]}; vLLM 0.32 passes "
                        f"{', '.join(PROPOSE_PARAMS)}") from None


@dataclasses.dataclass
class StepRows:
    """One propose call as ``SpecDrafter.step`` arguments (per-row values: lists or arrays)."""

    num_rows: int           # rows in vLLM's batch (len(sampled_token_ids))
    rows: Any               # the batch rows handed to the drafter (None: all of them; rows still
    #                         in prefill emit nothing and are left out)
    req_ids: list           # their request ids
    num_tokens: Any
    num_prompt_tokens: Any
    caps: Any               # an int for every row, or one per row (0: the request opted out)
    num_accepted: Any
    num_emitted: Any
    # A sequence may not grow past max_model_len, and the step emits one token past the draft:
    # a draft ends at max_model_len - 1 tokens. (vLLM also skips drafting for a step whose
    # longest sequence + K exceeds max_model_len.)
    max_len: int
    ended: list = dataclasses.field(default_factory=list)  # requests this step's tokens ended


def stateless_rows(sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                   num_speculative_tokens: int, max_model_len: int) -> StepRows:
    """Rows without request ids (propose called outside the runner hook): each row its own
    throwaway request."""
    num_rows = len(sampled_token_ids)
    rows = [i for i, s in enumerate(sampled_token_ids) if s]
    num_tokens = np.asarray(num_tokens_no_spec[:num_rows], dtype=np.int64)[rows]
    return StepRows(num_rows, rows, [f"specdraft-row-{i}" for i in rows], num_tokens, num_tokens,
                    num_speculative_tokens, None, None, max_model_len - 1)


def _runner_class():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner


def _has_params(fn: Callable, names: tuple[str, ...]) -> bool:
    params = list(inspect.signature(fn).parameters)
    return params[: len(names)] == list(names)


def install_runner_hooks() -> str | None:
    """Wrap the runner's step entry and propose call site; None on success, else the reason.

    Called from the proposer's constructor: the runner module is loaded by then (it is building
    the proposer), and engines without a specdraft proposer are never touched. The wrappers do
    nothing unless the runner's drafter has ``specdraft_step_begin``/``specdraft_bind``.
    """
    try:
        runner_cls = _runner_class()
    except Exception as e:  # noqa: BLE001
        return f"cannot import vLLM's model runner ({e!r})"
    if getattr(runner_cls, "_specdraft_hooked", False):
        return None
    execute_model = getattr(runner_cls, "execute_model", None)
    propose = getattr(runner_cls, "propose_draft_token_ids", None)
    if execute_model is None or propose is None:
        return "vLLM's model runner has no execute_model/propose_draft_token_ids"
    if not (_has_params(execute_model, ("self", "scheduler_output"))
            and _has_params(propose, ("self", "scheduler_output", "sampled_token_ids"))):
        return "vLLM's model runner methods have unexpected signatures"

    @functools.wraps(execute_model)
    def execute_model_hooked(self, scheduler_output, *args, **kwargs):
        drafter = getattr(self, "drafter", None)
        step_begin = getattr(drafter, "specdraft_step_begin", None)
        if step_begin is not None:
            try:
                step_begin(_step_begin(self, scheduler_output))
            except Exception as e:  # noqa: BLE001 - never take the engine down
                getattr(drafter, "specdraft_hook_failed", lambda e: None)(e)
        return execute_model(self, scheduler_output, *args, **kwargs)

    @functools.wraps(propose)
    def propose_hooked(self, scheduler_output, *args, **kwargs):
        bind = getattr(getattr(self, "drafter", None), "specdraft_bind", None)
        if bind is None:
            return propose(self, scheduler_output, *args, **kwargs)
        view = StepView(self, scheduler_output)
        verified = getattr(self.drafter, "specdraft_verified", None)
        sampled = args[0] if args else kwargs.get("sampled_token_ids")
        if verified is not None and sampled is not None:
            try:
                verified(*view.verified(sampled))
            except Exception as e:  # noqa: BLE001 - never take the engine down
                getattr(self.drafter, "specdraft_hook_failed", lambda e: None)(e)
        bind(view)
        try:
            return propose(self, scheduler_output, *args, **kwargs)
        finally:
            bind(None)

    runner_cls.execute_model = execute_model_hooked
    runner_cls.propose_draft_token_ids = propose_hooked
    runner_cls._specdraft_hooked = True
    return None


def _step_begin(runner: Any, scheduler_output: Any) -> StepBegin:
    max_model_len = runner.max_model_len
    lookback = runner.num_spec_tokens + 1 if getattr(runner, "num_spec_tokens", 0) else 1
    finished = []
    for req_id in scheduler_output.finished_req_ids:
        req_state = runner.requests.get(req_id)
        aborted = req_state is None or not ended_normally(req_state, max_model_len, lookback)
        finished.append((req_id, aborted))
    scopes = []
    for new in scheduler_output.scheduled_new_reqs:
        scope = request_scope(new.sampling_params)
        if scope is not None:
            scopes.append((new.req_id, scope))
    return StepBegin(finished, int(scheduler_output.total_num_scheduled_tokens),
                     time.perf_counter(), scopes)


# ---------------------------------------------------------------------------------------------
# CPU rejection-sampler fix (vllm-project/vllm PR #55006)
# ---------------------------------------------------------------------------------------------

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


def sampler_fix_needed(version: tuple[int, int, int]) -> bool:
    lo, hi = SAMPLER_FIX_VERSIONS
    return lo <= version < hi


def apply_sampler_fix() -> str:
    """Install the fixed expand kernel on CPU; returns what happened (for the log)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "not-cpu"
    if os.environ.get(SAMPLER_FIX_ENV, "1") == "0":
        return "disabled"
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
# The copy is checked against each release's source (SOURCE_COPIES, test_vllm_source_contract).
LEAN_SAMPLER_VERSIONS = ((0, 32, 0), (0, 33, 0))
LEAN_SAMPLER_ENV = "SPECDRAFT_VLLM_LEAN_SAMPLER"  # "0": vLLM's forward, copies included
# (file, qualified name, digest of the function's AST without its docstring)
SOURCE_COPIES = (
    ("vllm/v1/sample/rejection_sampler.py", "RejectionSampler.forward", "a20a032b3ab9fd45"),
)


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
    lo, hi = LEAN_SAMPLER_VERSIONS
    return lo <= version < hi


def apply_lean_sampler() -> str:
    """Make this process's rejection sampler skip the logits copies nobody reads (CPU only)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "not-cpu"
    if os.environ.get(LEAN_SAMPLER_ENV, "1") == "0":
        return "disabled"
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    if getattr(RejectionSampler, "_specdraft_vllm_forward", None) is not None:
        return "already"
    RejectionSampler._specdraft_vllm_forward = RejectionSampler.forward
    RejectionSampler.forward = lean_rejection_forward
    return "applied"


def top_k_guard_needed(version: tuple[int, int, int]) -> bool:
    lo, hi = TOP_K_GUARD_VERSIONS
    return lo <= version < hi


def apply_top_k_guard() -> str:
    """Make the CPU top-k path accept a batch of zero rows (see the module docstring)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "not-cpu"
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
    reset = getattr(drafter, "reset_cross_request_state", None)
    if reset is not None:  # a specdraft proposer
        return {"drafter": type(drafter).__name__, **reset()}
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
    drafter = getattr(proposer, "drafter", None)  # a specdraft proposer's SpecDrafter
    if not hasattr(drafter, "metrics"):
        return None
    out = dict(drafter.metrics())
    figures = getattr(proposer, "figures", None)  # what the proposer counted as vLLM called it
    if isinstance(figures, dict):
        out["proposer_seconds"] = float(figures.get("proposer_seconds", 0.0))
        out["proposer_steps"] = int(figures.get("steps", 0))
    steps = getattr(proposer, "steps", None)
    if hasattr(steps, "measured_pass_costs"):
        out["pass_costs"] = steps.measured_pass_costs()
        out["pass_log"] = [list(p) for p in steps.pass_log]
    return out


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


def install_worker_methods() -> None:
    """Adds RESET_METHOD, METRICS_METHOD and SAMPLER_FIX_METHOD to vLLM's worker wrapper (cheap;
    called in every vLLM process)."""
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    for name, method in ((RESET_METHOD, _reset_worker_state),
                         (METRICS_METHOD, _worker_drafter_metrics),
                         (SAMPLER_FIX_METHOD, _worker_sampler_fix_state)):
        if not hasattr(WorkerWrapperBase, name):
            setattr(WorkerWrapperBase, name, method)


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
    a worker without a specdraft proposer). The published figures (``engine_metrics``) trail the
    engine and refresh only on steps; this reads the drafter itself, between steps."""
    return llm.collective_rpc(METRICS_METHOD)


# ---------------------------------------------------------------------------------------------
# Peers and stand-ins for benchmarks (specdraft overhead, replay): vLLM's own proposers built by
# their own __init__, and the runner objects the step hooks read
# ---------------------------------------------------------------------------------------------

def _peer_config(num_speculative_tokens: int, max_model_len: int, max_num_seqs: int,
                 **speculative: Any) -> Any:
    """The VllmConfig attributes 0.32's ngram and suffix proposers read in ``__init__``."""
    from types import SimpleNamespace

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


def benchmark_step_view(input_batch: BatchStandIn, scheduled_spec_decode_tokens: dict,
                        num_speculative_tokens: int) -> StepView:
    """A StepView over stand-ins of the runner and scheduler output (requests without
    per-request options), for driving ``SpecdraftProposer.propose`` outside an engine."""
    from types import SimpleNamespace

    runner = SimpleNamespace(input_batch=input_batch,
                             requests={r: None for r in input_batch.req_ids})
    out = SimpleNamespace(scheduled_spec_decode_tokens=scheduled_spec_decode_tokens,
                          num_spec_tokens_to_schedule=num_speculative_tokens)
    return StepView(runner, out)


def benchmark_step_begin(finished: list[tuple[str, bool]], num_scheduled_tokens: int) -> StepBegin:
    return StepBegin(finished, num_scheduled_tokens, time.perf_counter())


# ---------------------------------------------------------------------------------------------
# What the serving surface and the benchmarks read from vLLM's config, outputs and metrics
# ---------------------------------------------------------------------------------------------
# engine arguments that make generate() outputs carry per-request spec-decode figures (vLLM's
# Prometheus registry is per process: with several engines in one process only the last one's
# global counters survive, so the benchmarks count per request)
def request_latencies(outputs: Any) -> list[tuple[float | None, float | None]]:
    """(TTFT, TPOT) in seconds for each ``generate()`` output, as vLLM's serving benchmark
    defines them: TTFT from arrival to the first token; TPOT the time per output token after
    the first, (last token - first token) / (output tokens - 1). ``RequestOutput.metrics`` is a
    ``RequestStateStats`` when the engine logs stats (its first/last token stamps are the engine
    core's monotonic clock); None where it is missing or the request emitted one token."""
    out = []
    for o in outputs:
        m = getattr(o, "metrics", None)
        if m is None or not getattr(m, "first_token_ts", 0.0):
            out.append((None, None))
            continue
        n = len(o.outputs[0].token_ids)
        ttft = m.first_token_latency or None
        tpot = (m.last_token_ts - m.first_token_ts) / (n - 1) if n > 1 else None
        out.append((ttft, tpot))
    return out


def first_step_requests(outputs: Any) -> int | None:
    """How many of the ``generate()`` outputs the engine's first step admitted: the requests
    sharing the earliest ``scheduled_ts`` (the scheduler stamps every request it schedules in a
    step with one clock reading). Requests reach the engine one by one while it already steps,
    so this is a race a replay must read from the run; None without stamps."""
    stamps = [getattr(getattr(o, "metrics", None), "scheduled_ts", 0.0) or 0.0 for o in outputs]
    if not stamps or not all(stamps):
        return None
    first = min(stamps)
    return sum(1 for t in stamps if t == first)


PER_REQUEST_METRICS_ARGS = {"per_request_spec_decode_metrics": "summary"}


def served_model_name(spec_config: Any) -> str:
    """The name the target is served under (the first of several), else its model path."""
    target = getattr(spec_config, "target_model_config", None)
    served = getattr(target, "served_model_name", None) or getattr(target, "model", "") or ""
    if isinstance(served, (list, tuple)):
        served = served[0] if served else ""
    return str(served)


def request_spec_counters(outputs: Any) -> dict[str, int]:
    """drafts (verify steps with a draft), drafted and accepted tokens, summed over
    ``generate()`` outputs (``RequestSpecDecodeMetrics``: a histogram of accepted draft tokens
    per verify step; zero for an engine without speculation)."""
    c = {"drafts": 0, "drafted_tokens": 0, "accepted_tokens": 0}
    for o in outputs:
        m = getattr(o.outputs[0], "spec_decode_metrics", None)
        if m is None:
            continue
        c["drafts"] += sum(m.histogram)
        c["accepted_tokens"] += sum(j * n for j, n in enumerate(m.histogram))
        c["drafted_tokens"] += m.num_draft_tokens
    return c
