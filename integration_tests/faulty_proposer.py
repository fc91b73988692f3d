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
    """Wraps a real drafter's step: raises, over-drafts and proposes impossible tokens now and
    then (the plain-Python step path); its native engine step is wrapped by FaultyEngine."""

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

    def native_engine_step(self):
        engine, core = self.inner.native_engine_step()
        return FaultyEngine(engine, self.vocab_size), core


class FaultyEngine(_Wrapped):
    """Wraps the drafter's native engine step: raises now and then, and now and then is handed
    vLLM's token buffer with an id outside the vocabulary among a row's new tokens."""

    def step(self, core, req_ids, new_tokens, num_tokens, token_buffer, *args):
        self.calls += 1
        if self.calls % 7 == 0:
            raise RuntimeError("injected failure in the engine step")
        rows = [j for j, t in enumerate(new_tokens) if t]
        if self.calls % 11 == 0 and rows:  # must be refused, never drafted from
            token_buffer = np.array(token_buffer, copy=True)
            token_buffer[rows[0], int(num_tokens[rows[0]]) - 1] = self.vocab_size + 5
        return self.inner.step(core, req_ids, new_tokens, num_tokens, token_buffer, *args)


class FaultySuffixProposer(SuffixProposer):
    """Alternates between the native engine step and its plain-Python twin, each faulty."""

    def build_drafter(self, options, vllm_config):
        return FaultyDrafter(super().build_drafter(options, vllm_config), self.vocab_size)

    def propose(self, *args, **kwargs):
        self.steps.use_native = not self.steps.use_native
        return super().propose(*args, **kwargs)
