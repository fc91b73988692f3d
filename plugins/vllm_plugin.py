"""specdraft's ``vllm.general_plugins`` entry point.

vLLM runs ``register()`` in every process it starts (API server, engine core, workers), for
every user of an environment where specdraft is installed, so it stays cheap and never raises:

* process 0: teach ``EngineArgs`` the ``"specdraft"`` key of ``speculative_config`` (vLLM's
  config forbids unknown keys). Options are validated there, so a bad option fails startup before
  any engine process starts, and they travel to the workers on the config object. The same hook
  registers the Prometheus collector that exports specdraft's counters for that engine.
* CPU workers of affected vLLM versions: guard the CPU top-k path against steps without draft
  tokens (a top_k request otherwise kills the engine under any speculative method).
* The rejection sampler's expand-kernel fix (vllm-project/vllm PR #55006: temperature > 0
  speculation is wrong on the CPU build) is not applied here but by ``apply_sampler_fix`` from a
  specdraft proposer's constructor, in the worker that verifies its drafts: engines of the same
  environment that do not use specdraft keep vLLM's sampler as vLLM ships it.
* Workers: a named method that clears the drafter's cross-request state (benchmark rounds use
  it through ``LLM.collective_rpc``; see the adapter's ``reset_cross_request_state``).
* The request-identity hooks on the model runner are installed by the proposer's constructor
  (specdraft.adapters), so engines that do not use a specdraft proposer are never touched.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

_log = logging.getLogger("vllm.specdraft")
_PROPOSER_MODULE = "specdraft.plugins.vllm"


def register() -> None:
    try:
        from specdraft.adapters import (
            UnsupportedEngineVersion,
            installed_vllm_version,
            parse_version,
            vllm_adapter,
        )

        try:
            adapter = vllm_adapter()
        except UnsupportedEngineVersion as e:
            _log.warning("specdraft: %s specdraft proposers will refuse to start.", e)
            return
        if hasattr(adapter, "register_speculator"):  # 0.34 on: a registered speculative method
            adapter.register_speculator()
            return
        adapter.install_config_hook(prepare_speculative_config)
        adapter.install_worker_methods()
        version = installed_vllm_version()
        if adapter.top_k_guard_needed(parse_version(version)):
            if adapter.apply_top_k_guard() == "applied":
                adapter.logger().debug("specdraft: guarded vLLM's CPU top-k against batches "
                                       "with no draft token")
    except Exception:  # noqa: BLE001 - a plugin must not stop vLLM from starting
        _log.exception("specdraft: vLLM plugin setup failed; specdraft proposers will still run, "
                       "but options from speculative_config['specdraft'] may be refused")


def apply_sampler_fix(adapter: Any) -> None:
    """Fix this worker's CPU rejection sampler on affected vLLM versions, and drop its unread
    logits copies (each logged once per process). Called by specdraft's proposers: only engines
    that verify specdraft's drafts."""
    from specdraft.adapters import installed_vllm_version, parse_version

    version = installed_vllm_version()
    log = adapter.logger()
    if adapter.lean_sampler_needed(parse_version(version)) \
            and adapter.apply_lean_sampler() == "applied":
        log.info("specdraft: vLLM %s's CPU rejection sampler skips its copies of the target "
                 "logits for batches that ask for no logprobs (%s=0 keeps them)", version,
                 adapter.LEAN_SAMPLER_ENV)
    if not adapter.sampler_fix_needed(parse_version(version)):
        return
    outcome = adapter.apply_sampler_fix()
    if outcome == "applied":
        log.info("specdraft: fixed the CPU rejection sampler of vLLM %s (vllm-project/vllm "
                 "PR #55006: expand_kernel wrote temperature/top-k/top-p into a temporary copy, so "
                 "temperature > 0 speculative decoding sampled from the wrong distribution)",
                 version)
    elif outcome == "disabled":
        log.warning("specdraft: the CPU rejection-sampler fix is disabled (%s=0): temperature > 0 "
                    "speculative decoding on this vLLM samples from the wrong distribution",
                    adapter.SAMPLER_FIX_ENV)


def proposer_class(model: str) -> type | None:
    """The specdraft proposer class named by speculative_config's ``model``, None if not one.

    Names under ``specdraft.`` must be one of specdraft's proposers (a typo fails startup here,
    not in a worker); other names count when they import to a subclass of SpecdraftProposer.
    """
    from specdraft.plugins import vllm as proposers

    module, _, name = model.rpartition(".")
    if model.startswith("specdraft."):
        cls = getattr(proposers, name, None) if module == _PROPOSER_MODULE else None
        if not (isinstance(cls, type) and issubclass(cls, proposers.SpecdraftProposer)):
            choices = ", ".join(f"{_PROPOSER_MODULE}.{n}"
                                for n in ("SpecdraftProposer", *proposers.PROPOSERS.values()))
            raise proposers.config_error(
                f"speculative_config['model'] = {model!r} is not a specdraft proposer; "
                f"choose one of {choices}")
        return cls
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except Exception:  # noqa: BLE001 - not ours to judge; vLLM reports it in the worker
        return None
    return cls if isinstance(cls, type) and issubclass(cls, proposers.SpecdraftProposer) else None


def prepare_speculative_config(spec_config: Any, raw_options: Any, given: bool) -> None:
    """Validate specdraft's options and attach them to the built SpeculativeConfig (process 0)."""
    from specdraft.adapters import vllm_adapter
    from specdraft.plugins import vllm as proposers
    from specdraft.plugins import vllm_metrics

    adapter = vllm_adapter()
    model = getattr(spec_config, "model", None) or ""
    cls = proposer_class(model) if adapter.is_custom_class(spec_config) and "." in model else None
    if cls is None:
        if given:
            raise proposers.config_error(
                "speculative_config has specdraft options ('specdraft' key) but does not use a "
                "specdraft proposer; set \"method\": \"custom_class\" and \"model\": "
                f"\"{_PROPOSER_MODULE}.SuffixProposer\" (or LookupProposer, TreeProposer)")
        return
    options = cls.resolve_options(proposers.load_options(raw_options))
    _prepare(adapter, spec_config, cls.__name__, options)


def configure_speculator(spec_config: Any) -> None:
    """vLLM 0.34's ``SpeculatorConfig.configure`` for ``"method": "specdraft"`` (process 0):
    the options in ``speculator_options`` validated and attached as on 0.32."""
    from specdraft.adapters import vllm_adapter
    from specdraft.plugins import vllm as proposers

    adapter = vllm_adapter()
    key = f"speculative_config['{adapter.OPTIONS_FIELD}']"
    options = proposers.SpecdraftProposer.resolve_options(
        proposers.load_options(getattr(spec_config, adapter.OPTIONS_FIELD, None), key))
    _prepare(adapter, spec_config, proposers.PROPOSERS[options.get("strategy", "suffix")],
             options)


def _prepare(adapter: Any, spec_config: Any, proposer: str, options: dict) -> None:
    """What every vLLM version does with validated options in process 0: check them against
    the engine, register the metrics source, attach them to the config (they travel to the
    workers on it), and install the per-request checks and the tenant-scope transport."""
    from specdraft.plugins import vllm_metrics
    from specdraft.proposers.config import request_options

    check_engine_fit(spec_config, options)
    metrics_dir = vllm_metrics.new_metrics_dir()
    labels = {"model_name": adapter.served_model_name(spec_config), "proposer": proposer}
    vllm_metrics.SpecdraftCollector.add_source(metrics_dir, labels)
    adapter.attach(spec_config, options, metrics_dir)
    try:
        adapter.install_request_check(request_options)  # bad specdraft* request keys: HTTP 400
    except Exception:  # noqa: BLE001 - serving goes on; only the per-request check is missing
        adapter.logger().exception("specdraft: cannot check per-request specdraft options; "
                                   "unknown specdraft* keys in requests will be ignored")
    # tenant scopes: each request's cache_salt reaches the workers; failing that, serving must
    # not go on with every tenant in one pool
    adapter.install_scope_transport()


def check_engine_fit(spec_config: Any, options: dict) -> None:
    """What the options mean for this engine, checked before it starts: the draft budget
    against the context length, and every corpus file read and parsed (its token ids against
    the target's vocabulary), so a bad value fails start-up, not a worker step later."""
    from specdraft.plugins import vllm as proposers
    from specdraft.proposers.corpus import check_corpus_files

    target = getattr(spec_config, "target_model_config", None)
    max_model_len = getattr(target, "max_model_len", None)
    k = getattr(spec_config, "num_speculative_tokens", None)
    if isinstance(max_model_len, int) and isinstance(k, int) and k >= max_model_len:
        raise proposers.config_error(
            f"speculative_config['num_speculative_tokens'] = {k} does not fit max_model_len = "
            f"{max_model_len}: accepted an integer in [1, {max_model_len - 1}]")
    vocab_size = None
    try:
        vocab_size = int(target.get_vocab_size())
    except Exception:  # noqa: BLE001 - no vocabulary known here: ids are checked against int32
        pass
    check_corpus_files(options.get("corpus_files") or (), vocab_size)
