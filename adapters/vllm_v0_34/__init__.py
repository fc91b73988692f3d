"""Everything specdraft knows about vLLM 0.34.x, in one place.

vLLM 0.34 removed Model Runner V1 and ``custom_class``. Custom speculative methods register
instead (``vllm/v1/worker/gpu/spec_decode/speculator_config.py``, marked experimental by vLLM):

* ``register_speculative_method("specdraft", <config qualname>)`` runs from specdraft's
  ``vllm.general_plugins`` entry point, so every vLLM process knows the method. Users write
  ``--speculative-config '{"method": "specdraft", "num_speculative_tokens": 16,
  "speculator_options": {...}}'``; ``custom_class`` is not accepted on 0.34 (vLLM refuses it as
  an unknown method: 0.34 has no such method to alias).
* The config (``config.SpecdraftSpeculatorConfig``) validates ``speculator_options`` in
  ``configure`` (process 0, as ``SpeculativeConfig`` is built), with the same one-line errors as
  on 0.32; vLLM reports them as a ``ValidationError`` carrying the message.
* The speculator (``speculator.SpecdraftSpeculator``) is vLLM's ``BaseSpeculator``: ``propose``
  once a step with the batch's request ids (``input_batch.req_ids``), and the lifecycle hooks
  ``add_request``, ``on_requests_finished`` (before slots are freed) and ``reset_state`` (after
  warm-up). It maps each call onto ``SpecDrafter.step``, the same step the 0.32 adapter calls.
* Drafts are fixed width: every row is verified K wide. Short drafts are padded with the last
  sampled token and their padded slots get confidence 0, so adaptive verification trims them.
* One patch (``runner.install_request_params``): the runner's ``add_requests`` hands each new
  request's ``SamplingParams`` to specdraft's speculator (tenant scope, per-request opt-out, stop
  rules), which vLLM's ``add_request(req_index)`` hook does not carry.

Process 0's request checks and tenant-scope transport are 0.32's (the same ``InputProcessor``
methods, checked against 0.34's source in ``contract``).
"""

from __future__ import annotations

from specdraft.adapters.vllm_v0_32.config import (  # unchanged in 0.34 (contract.py checks)
    METRICS_DIR_ATTR,
    OPTIONS_ATTR,
    PLUGIN_NAME,
    PLUGINS_ENV,
    REQUEST_OPTIONS_KEY,
    SCOPE_ARG,
    EngineFacts,
    attach,
    cost_model_preset,
    engine_facts,
    install_request_check,
    install_scope_transport,
    load_tokenizer,
    logger,
    plugin_excluded,
    request_scope,
)
from specdraft.adapters.vllm_v0_32.outputs import served_model_name
from specdraft.adapters.vllm_v0_34.contract import (
    PROPOSE_CALL,
    SOURCE_COPIES,
    SOURCE_FIELDS,
    SOURCE_FUNCTIONS,
    SUPPORTED,
)

METHOD = "specdraft"  # --speculative-config '{"method": "specdraft", ...}'
OPTIONS_FIELD = "speculator_options"  # SpeculativeConfig's field for a custom method's options
CONFIG_CLASS = "specdraft.adapters.vllm_v0_34.config.SpecdraftSpeculatorConfig"


def register_speculator() -> None:
    """Register the ``specdraft`` speculative method (every process: the plugin entry point).
    The config class is named, not imported: vLLM imports it when a config uses the method."""
    from vllm.v1.worker.gpu.spec_decode.speculator_config import register_speculative_method

    register_speculative_method(METHOD, CONFIG_CLASS)


__all__ = [
    "SUPPORTED", "SOURCE_FUNCTIONS", "SOURCE_FIELDS", "PROPOSE_CALL", "SOURCE_COPIES",
    "METHOD", "OPTIONS_FIELD", "CONFIG_CLASS", "register_speculator", "OPTIONS_ATTR",
    "METRICS_DIR_ATTR", "PLUGIN_NAME", "PLUGINS_ENV",
    "REQUEST_OPTIONS_KEY", "SCOPE_ARG", "EngineFacts", "attach", "cost_model_preset",
    "engine_facts", "install_request_check", "install_scope_transport", "load_tokenizer",
    "logger", "plugin_excluded", "request_scope", "served_model_name",
]
