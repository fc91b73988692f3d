"""A specdraft proposer whose drafter misbehaves on purpose (imported by vLLM's worker)."""

from __future__ import annotations

from specdraft.plugins.vllm import SuffixProposer


class FaultyDrafter:
    """Wraps a real drafter: raises, over-drafts and proposes impossible tokens now and then."""

    def __init__(self, drafter, vocab_size: int):
        self.inner = drafter
        self.vocab_size = vocab_size
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft_batch(self, req_ids, max_budget):
        self.calls += 1
        if self.calls % 7 == 0:
            raise RuntimeError("injected failure in draft_batch")
        trees = self.inner.draft_batch(req_ids, max_budget)
        if self.calls % 5 == 0:  # far more tokens than num_speculative_tokens: must be capped
            from specdraft.proposers.base import DraftTree

            trees = [DraftTree.chain(list(t.token_ids) * 40 or [0] * 40) for t in trees]
        if self.calls % 11 == 0:  # a token id outside the vocabulary: must never reach vLLM
            from specdraft.proposers.base import DraftTree

            trees = [DraftTree.chain([self.vocab_size + 5]) for _ in trees]
        return trees

    def extend(self, req_id, token_ids, num_accepted=None):
        self.calls += 1
        if self.calls % 13 == 0:
            raise RuntimeError("injected failure in extend")
        return self.inner.extend(req_id, token_ids, num_accepted)


class FaultySuffixProposer(SuffixProposer):
    def build_drafter(self, options, vllm_config):
        return FaultyDrafter(super().build_drafter(options, vllm_config), self.vocab_size)
