"""vLLM 0.32 configuration hooks, in process 0: specdraft's options routed around
``SpeculativeConfig``'s extra-key check, per-request options checked as vLLM validates a request,
and each request's tenant scope (its ``cache_salt``) carried to the workers. Also what a worker
reads of the engine's configuration (``engine_facts``, the cost-model preset, the tokenizer).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from typing import Any, Callable

OPTIONS_KEY = "specdraft"                  # the key users add to speculative_config
OPTIONS_ATTR = "specdraft_options"         # validated options, on the built SpeculativeConfig
PLUGINS_ENV = "VLLM_PLUGINS"  # comma-separated: vLLM loads only the plugins it names (unset: all)
PLUGIN_NAME = "specdraft"     # our vllm.general_plugins entry point's name (pyproject.toml)
METRICS_DIR_ATTR = "specdraft_metrics_dir"  # where workers leave counters for process 0
REQUEST_OPTIONS_KEY = "specdraft"          # SamplingParams.extra_args[...] per-request options
# The OpenAI server copies a request's "vllm_xargs" (values: strings, numbers, lists; JSON false
# arrives as 0) into SamplingParams.extra_args; every request of every front end passes
# InputProcessor._validate_params in process 0, where a VLLMValidationError becomes HTTP 400.
_INPUT_PROCESSOR = "vllm.v1.engine.input_processor"

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


def plugin_excluded() -> str | None:
    """``VLLM_PLUGINS``' value when it leaves specdraft's plugin out (vLLM then never runs it:
    no config hook, so a ``"specdraft"`` key fails vLLM's own config check), else None."""
    value = os.environ.get(PLUGINS_ENV)
    if value is None or PLUGIN_NAME in value.split(","):
        return None
    return value


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
