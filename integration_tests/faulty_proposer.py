"""A specdraft proposer whose drafter misbehaves on purpose (imported by vLLM's worker)."""

from __future__ import annotations

import numpy as np

from specdraft.plugins.vllm import SuffixProposer


class _Wrapped:
    """Passes everything but ``step`` through to the wrapped object; counts step calls."""

    def __init__(self, inner, vocab_size: int):
        self.inner = inner
        self.vocab_size = vocab_size
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)


class FaultyDrafter(_Wrapped):
    """Wraps a real drafter's step: raises, over-drafts, proposes impossible tokens, and is
    handed vLLM's token buffer with an id outside the vocabulary among a row's new tokens, now
    and then."""

    def step(self, req_ids, token_ids, num_tokens, *args, **kwargs):
        self.calls += 1
        if self.calls % 7 == 0:
            raise RuntimeError("injected failure in step")
        if self.calls % 13 == 0 and len(req_ids) and np.ndim(token_ids) == 2:
            # must be refused, never drafted from (the failure costs the step its drafts)
            rows = kwargs.get("rows")
            row = int(rows[0]) if rows is not None else 0
            token_ids = np.array(token_ids, copy=True)
            token_ids[row, int(num_tokens[0]) - 1] = self.vocab_size + 5
        out = self.inner.step(req_ids, token_ids, num_tokens, *args, **kwargs)
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
    """A suffix proposer over a faulty drafter."""

    def build_drafter(self, options, vllm_config):
        return FaultyDrafter(super().build_drafter(options, vllm_config), self.vocab_size)
