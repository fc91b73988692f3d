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
from typing import Any, Callable

from specdraft.adapters.request_sync import Row

SUPPORTED = ((0, 32, 0), (0, 33, 0))
# The CPU expand-kernel bug is in every release up to the newest checked (0.33.0).
SAMPLER_FIX_VERSIONS = ((0, 32, 0), (0, 34, 0))
SAMPLER_FIX_ENV = "SPECDRAFT_VLLM_SAMPLER_FIX"  # "0" leaves the bug in (tests show it matters)
TOP_K_GUARD_VERSIONS = ((0, 32, 0), (0, 33, 0))  # only checked on 0.32

OPTIONS_KEY = "specdraft"                  # the key users add to speculative_config
OPTIONS_ATTR = "specdraft_options"         # validated options, on the built SpeculativeConfig
METRICS_DIR_ATTR = "specdraft_metrics_dir"  # where workers leave figures for process 0
REQUEST_OPTIONS_KEY = "specdraft"          # SamplingParams.extra_args[...] per-request options
# The OpenAI server copies a request's "vllm_xargs" (values: strings, numbers, lists; JSON false
# arrives as 0) into SamplingParams.extra_args; every request of every front end passes
# InputProcessor._validate_params in process 0, where a VLLMValidationError becomes HTTP 400.
_INPUT_PROCESSOR = "vllm.v1.engine.input_processor"

_EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


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
    """specdraft's verification-cost prior for this engine's device and dtype."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "gpu"
    import torch

    dtype = getattr(vllm_config.model_config, "dtype", None)
    return "cpu-fp32" if dtype == torch.float32 else "cpu-bf16"


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
    import importlib

    from vllm.exceptions import VLLMValidationError

    module = importlib.import_module(_INPUT_PROCESSOR)
    processor_cls = module.InputProcessor
    original = processor_cls._validate_params
    if getattr(original, "_specdraft_hook", False):
        return True

    @functools.wraps(original)
    def _validate_params(self, params, *args, **kwargs):
        spec = getattr(self, "speculative_config", None)
        extra = getattr(params, "extra_args", None)
        if extra and getattr(spec, OPTIONS_ATTR, None) is not None:
            try:
                check(extra)
            except ValueError as e:
                raise VLLMValidationError(str(e), parameter="vllm_xargs") from None
        return original(self, params, *args, **kwargs)

    _validate_params._specdraft_hook = True  # type: ignore[attr-defined]
    processor_cls._validate_params = _validate_params
    return True


# ---------------------------------------------------------------------------------------------
# Request identity: hooks on the model runner
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class StepBegin:
    """What a step tells before the runner updates its batch."""

    finished: list[tuple[str, bool]]  # (req_id, aborted) for requests that ended since last step
    num_scheduled_tokens: int         # tokens the target scores this step
    started_at: float                 # perf_counter() at execute_model entry


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

    def rows(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
             token_ids_cpu: Any) -> list[Row | None]:
        """One Row per batch row that emitted tokens; None for rows still in prefill."""
        batch = self.runner.input_batch
        req_ids = batch.req_ids
        if len(req_ids) < len(sampled_token_ids):
            raise RuntimeError(
                f"vLLM batch has {len(req_ids)} request ids for {len(sampled_token_ids)} rows")
        requests = self.runner.requests
        scheduled = self.scheduler_output.scheduled_spec_decode_tokens
        rows: list[Row | None] = []
        for i, sampled in enumerate(sampled_token_ids):
            if not sampled:
                rows.append(None)
                continue
            req_id = req_ids[i]
            req_state = requests.get(req_id)
            rows.append(Row(
                req_id=req_id,
                tokens=token_ids_cpu[i],
                num_prompt_tokens=int(batch.num_prompt_tokens[i]),
                num_tokens=int(num_tokens_no_spec[i]),
                num_drafted=len(scheduled.get(req_id, ())),
                num_emitted=len(sampled),
                speculate=req_state is None or _request_speculates(req_state),
                ended=req_state is not None and stopped_in_step(
                    req_state, self.runner.max_model_len, len(sampled)),
            ))
        return rows

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
    return StepBegin(finished, int(scheduler_output.total_num_scheduled_tokens),
                     time.perf_counter())


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
