"""specdraft's ``SpeculatorConfig`` for vLLM 0.34 (imported by vLLM in every process that builds
or reads a speculative config with ``"method": "specdraft"``; it imports no speculator)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from vllm.v1.worker.gpu.spec_decode.speculator_config import SpeculatorConfig

if TYPE_CHECKING:
    from vllm.config import SpeculativeConfig

# What vLLM's built-in suffix method defaults to: every slot is verified, so a deep default costs
# throughput under load.
DEFAULT_NUM_SPECULATIVE_TOKENS = 8


class SpecdraftSpeculatorConfig(SpeculatorConfig):
    """No draft model; options in ``speculator_options``; drafts from the host-side index."""

    base_method: ClassVar[str | None] = None  # not a variant of a built-in speculator
    speculator_class: ClassVar[str | None] = (
        "specdraft.adapters.vllm_v0_34.speculator.SpecdraftSpeculator")
    supported_options: ClassVar[frozenset[str]] = frozenset({"speculator_options"})
    # The index reads each row's new tokens on the host: the token history may stay in UVA.
    prefer_dense_token_history: ClassVar[bool] = False
    # Confidences come from the controller's draft lengths, not from draft logits.
    adaptive_verification_uses_draft_logits: ClassVar[bool] = False

    @classmethod
    def configure(cls, spec: "SpeculativeConfig") -> None:
        super().configure(spec)
        if spec.num_speculative_tokens is None:
            spec.num_speculative_tokens = DEFAULT_NUM_SPECULATIVE_TOKENS
        from specdraft.plugins.vllm_plugin import configure_speculator

        configure_speculator(spec)  # raises SpecdraftConfigError (a ValueError) naming the option
