"""A specdraft proposer whose drafter misbehaves on purpose (imported by vLLM's worker)."""

from __future__ import annotations

import numpy as np

from specdraft.plugins.vllm import SuffixProposer


class FaultyDrafter:
    """Wraps a real drafter's step: raises, over-drafts and proposes impossible tokens now and then."""

    def __init__(self, drafter, vocab_size: int):
        self.inner = drafter
        self.vocab_size = vocab_size
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, req_ids, *args, **kwargs):
        self.calls += 1
        if self.calls % 7 == 0:
            raise RuntimeError("injected failure in step")
        out = self.inner.step(req_ids, *args, **kwargs)
        if not len(req_ids):
            return out
        from specdraft.proposers.drafter import StepDrafts

        if self.calls % 5 == 0:  # far more tokens than num_speculative_tokens: must not reach vLLM
            lengths = np.full(len(req_ids), 40, dtype=np.int32)
            return StepDrafts(np.zeros(int(lengths.sum()), dtype=np.int32), lengths)
        if self.calls % 11 == 0:  # a token id outside the vocabulary: must never reach vLLM
            lengths = np.ones(len(req_ids), dtype=np.int32)
            return StepDrafts(np.full(len(req_ids), self.vocab_size + 5, dtype=np.int32), lengths)
        return out


class FaultySuffixProposer(SuffixProposer):
    def build_drafter(self, options, vllm_config):
        return FaultyDrafter(super().build_drafter(options, vllm_config), self.vocab_size)
