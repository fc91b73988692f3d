"""Speculative decoding for any transformers causal LM, verifying whole draft trees in one pass.

A reference engine on Hugging Face transformers (CPU or GPU, batch size 1): each step asks a
specdraft drafter for a draft tree (one ``SpecDrafter.step``: the tokens emitted since the last
one and what was accepted of its draft go in, a whole tree comes back), runs the target once
over the pending context tokens plus every tree node (tree attention: a 4D mask in which each
node sees the context, its ancestors and itself, and per-node position ids = context length +
depth), and hands the target's rows to the reference verifier, ``specdraft.verify``:
``verify_greedy`` at temperature 0, ``verify_sampling`` (rule 2, deterministic drafts)
otherwise. The KV cache then keeps the accepted path only. Every pass emits the accepted draft
tokens plus one token of the target's own, each distributed exactly as plain
decoding would have produced it::

    from specdraft.hf_generate import SpeculativeGenerator
    gen = SpeculativeGenerator(model, {"strategy": "tree"})
    out = gen.generate(prompt_ids, max_new_tokens=128)          # greedy
    out = gen.generate(prompt_ids, max_new_tokens=128, do_sample=True, temperature=0.8,
                       generator=torch.Generator().manual_seed(0))
    out.token_ids, out.stats.mean_acceptance_length

Every transformers-specific fact (mask format, cache layout, version range) lives in
``specdraft.adapters.transformers``.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Sequence

import numpy as np
import torch

from specdraft.adapters import transformers as hf
from specdraft.proposers import DraftTree, DrafterConfig, SpecDrafter, make_drafter
from specdraft.verify import children, verify_greedy, verify_sampling

__all__ = ["GenerationStats", "GenerationResult", "SpeculativeGenerator", "generate"]

@dataclasses.dataclass
class GenerationStats:
    target_passes: int = 0     # target forward passes (the one over the prompt included)
    generated_tokens: int = 0  # tokens returned
    drafts: int = 0            # passes that verified a non-empty draft
    drafted_tokens: int = 0    # draft nodes verified (all branches of every tree)
    accepted_tokens: int = 0   # draft tokens accepted
    seconds: float = 0.0       # wall time of the generate call
    draft_seconds: float = 0.0  # time inside the drafter

    @property
    def tokens_per_pass(self) -> float:
        return self.generated_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """vLLM's definition: 1 + accepted / drafts (passes without a draft do not count)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 1.0

    @property
    def nodes_per_accepted_token(self) -> float:
        return self.drafted_tokens / self.accepted_tokens if self.accepted_tokens else float("inf")

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(tokens_per_pass=self.tokens_per_pass,
                 mean_acceptance_length=self.mean_acceptance_length,
                 nodes_per_accepted_token=self.nodes_per_accepted_token)
        return d


@dataclasses.dataclass
class GenerationResult:
    token_ids: list[int]  # the generated tokens (without the prompt)
    stats: GenerationStats


def _node_visibility(tree: DraftTree) -> torch.Tensor:
    """``visible[i, j]``: node i attends to node j (j is i or one of its ancestors)."""
    n = len(tree)
    visible = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(tree.parents):
        if parent >= 0:
            visible[i] |= visible[parent]
    return visible


def _depths(tree: DraftTree) -> list[int]:
    depth: list[int] = []
    for parent in tree.parents:
        depth.append(depth[parent] + 1 if parent >= 0 else 1)
    return depth


def _accepted_nodes(tree: DraftTree, emitted: Sequence[int]) -> list[int]:
    """The nodes the verifier walked through: the child carrying each emitted token but the last
    (the verifier takes the first such child, so this is the same walk)."""
    kids = children(tree)
    path, node = [], -1
    for x in emitted[:-1]:
        node = next(c for c in kids[node + 1] if tree.token_ids[c] == x)
        path.append(node)
    return path


class SpeculativeGenerator:
    """Drafts with a specdraft drafter, verifies whole trees in one pass of a transformers model.

    ``drafter``: a ``SpecDrafter`` (kept across calls: its global cache learns from earlier
    outputs), or options for ``make_drafter`` (``{"strategy": "tree"}``, ...; the cost model
    defaults from the model's device and dtype). ``max_draft_tokens``: the most nodes per tree.
    """

    _ids = itertools.count()

    def __init__(self, model, drafter: SpecDrafter | DrafterConfig | dict | None = None, *,
                 max_draft_tokens: int = 16):
        hf.check_version()
        hf.check_model(model)
        if not isinstance(max_draft_tokens, int) or max_draft_tokens < 0:
            raise ValueError(f"max_draft_tokens={max_draft_tokens!r}: accepted an integer >= 0")
        if not isinstance(drafter, SpecDrafter):
            options = (dataclasses.asdict(drafter) if isinstance(drafter, DrafterConfig)
                       else dict(drafter or {}))
            options.setdefault("cost_model", hf.default_cost_model(model))
            drafter = make_drafter(options, vocab_size=model.config.vocab_size)
        self.model = model
        self.drafter = drafter
        self.max_draft_tokens = max_draft_tokens

    @torch.inference_mode()
    def generate(self, input_ids: Sequence[int] | torch.Tensor, max_new_tokens: int, *,
                 do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, eos_token_id: int | Sequence[int] | None = "default",
                 generator: torch.Generator | None = None) -> GenerationResult:
        """Up to ``max_new_tokens`` tokens after ``input_ids`` (one sequence), stopping after an
        end-of-sequence token (default: the model's ``generation_config.eos_token_id``; None: never).
        Greedy, or sampling with ``generate()``'s temperature / top-k / top-p warpers."""
        prompt = self._prompt(input_ids)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens!r}: accepted an integer >= 1")
        if do_sample and not temperature > 0:
            raise ValueError(f"temperature={temperature!r}: accepted a number > 0 when sampling")
        if eos_token_id == "default":
            eos_token_id = self.model.generation_config.eos_token_id
        eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())
        warpers = hf.sampling_warpers(temperature, top_k, top_p) if do_sample else None
        if do_sample and generator is None:
            generator = torch.Generator().manual_seed(int(torch.randint(2**62, ()).item()))
        max_len = getattr(self.model.config, "max_position_embeddings", None) or 2**31

        stats = GenerationStats()
        t_start = time.perf_counter()
        req = f"hf-{next(self._ids)}"
        cache = hf.new_cache(self.model)
        out: list[int] = []
        pending = prompt  # tokens whose keys and values are not in the cache yet
        new, num_accepted = prompt, -1  # tokens the drafter has not seen; accepted of its draft
        finished = False
        try:
            while not finished:
                cached = hf.cache_length(cache)
                room = min(max_new_tokens - len(out) - 1, max_len - cached - len(pending))
                budget = max(0, min(self.max_draft_tokens, room))
                t0 = time.perf_counter()
                tree = self._step(req, len(prompt), len(out), new, budget, num_accepted)
                stats.draft_seconds += time.perf_counter() - t0
                tree = tree.truncate(budget)

                t0 = time.perf_counter()
                rows = self._verify_pass(cache, cached, pending, tree)
                emitted = self._accept(rows, tree, generator, warpers)
                if len(pending) == 1:  # a decode pass: its time is a verification cost sample
                    self.drafter.report_step(1 + len(tree), time.perf_counter() - t0)
                accepted = _accepted_nodes(tree, emitted)
                hf.keep_in_cache(cache, cached + len(pending), accepted)

                stats.target_passes += 1
                if len(tree):
                    stats.drafts += 1
                    stats.drafted_tokens += len(tree)
                    stats.accepted_tokens += len(accepted)
                for i, x in enumerate(emitted):
                    if x in eos or len(out) + i + 1 >= max_new_tokens:
                        emitted = emitted[:i + 1]
                        finished = True
                        break
                out += emitted
                new, num_accepted = emitted, len(accepted) if len(tree) else -1
                pending = [emitted[-1]]
            self._step(req, len(prompt), len(out), new, 0, num_accepted)  # its last tokens
        finally:  # the output feeds the global cache (an id the drafter never saw is ignored)
            self.drafter.step([], np.zeros(0, dtype=np.int32), [], [], 0, token_offsets=[0],
                              finished=[req])
        stats.generated_tokens = len(out)
        stats.seconds = time.perf_counter() - t_start
        return GenerationResult(out, stats)

    def _step(self, req: str, num_prompt: int, num_out: int, new: list[int], budget: int,
              num_accepted: int) -> DraftTree:
        """One ``SpecDrafter.step`` for this request: the tokens it has not seen (the whole
        prompt at first), what was accepted of its last draft, and a tree of up to ``budget``
        nodes (none for 0)."""
        drafts = self.drafter.step([req], np.asarray(new, dtype=np.int32),
                                   [num_prompt + num_out], [num_prompt], [budget],
                                   token_offsets=[0, len(new)], num_accepted=[num_accepted],
                                   trees=True)
        return drafts.trees()[0]

    def _prompt(self, input_ids) -> list[int]:
        if isinstance(input_ids, torch.Tensor):
            if input_ids.dim() == 2 and input_ids.shape[0] == 1:
                input_ids = input_ids[0]
            if input_ids.dim() != 1:
                raise ValueError(f"input_ids: expected one sequence ([n] or [1, n]), got shape "
                                 f"{list(input_ids.shape)}; batch size 1 only")
            input_ids = input_ids.tolist()
        prompt = [int(t) for t in input_ids]
        if not prompt:
            raise ValueError("input_ids: the prompt is empty; accepted at least one token")
        return prompt

    def _verify_pass(self, cache, cached: int, pending: list[int], tree: DraftTree) -> torch.Tensor:
        """One target pass over ``pending`` + the tree; the rows ``verify`` takes:
        ``[len(tree) + 1, vocab]`` (row 0 after the last pending token, row i + 1 after node i)."""
        model = self.model
        visible = _node_visibility(tree)
        mask = hf.attention_mask(cached, len(pending), visible, model.dtype, model.device)
        base = cached + len(pending) - 1  # position of the last pending token
        positions = list(range(cached, base + 1)) + [base + d for d in _depths(tree)]
        return hf.forward(model, pending + tree.token_ids, mask, positions, cache, len(tree) + 1)

    def _accept(self, rows: torch.Tensor, tree: DraftTree, generator, warpers) -> list[int]:
        if warpers is None:
            return verify_greedy(rows, tree)
        return verify_sampling(torch.softmax(warpers(None, rows), dim=-1), tree, generator)


def generate(model, input_ids, max_new_tokens: int, drafter=None, *, max_draft_tokens: int = 16,
             **kwargs) -> GenerationResult:
    """One-call form of ``SpeculativeGenerator(model, drafter, ...).generate(input_ids, ...)``."""
    return SpeculativeGenerator(model, drafter, max_draft_tokens=max_draft_tokens).generate(
        input_ids, max_new_tokens, **kwargs)
