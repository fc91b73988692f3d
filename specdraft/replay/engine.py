"""Replaying requests sent all at once to a live engine, step by step as vLLM's scheduler runs
them (``replay_engine``): chunked prefill, prefix caching and the in-flight limit."""

from __future__ import annotations

from dataclasses import dataclass

from specdraft.replay.batched import accepted_length, check_budget
from specdraft.replay.methods import Method


@dataclass
class EngineSchedule:
    """What decides when a request of a live run prefills and decodes (vLLM's scheduler):
    at most ``max_num_seqs`` requests in flight, at most ``max_num_batched_tokens`` tokens per
    step (chunked prefill), prefix caching of whole ``block_size`` blocks. ``first_step``
    requests are there for the first step (None: all): an offline ``LLM.generate`` hands its
    requests to an engine that starts stepping on the first (live logs show 1)."""
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int = 16
    prefix_caching: bool = True
    first_step: int | None = None


class _Scheduled:
    __slots__ = ("key", "prompt", "output", "truth", "limit", "computed", "pos", "draft")

    def __init__(self, key, prompt, output, truth, cached):
        self.key, self.prompt, self.output, self.truth = key, prompt, output, truth
        self.limit = len(output)
        self.computed = cached  # prompt tokens whose KV exists (cache hits, prefill chunks)
        self.pos = 0            # output tokens emitted
        self.draft: tuple[list[int], list[int]] = ([], [])


def _cached_prefix(prompt: list[int], seen: list[list[int]], block: int) -> int:
    """Prompt tokens a prefix cache would hold: the longest prefix shared with an earlier
    sequence, in whole blocks, leaving at least one token to compute."""
    best = 0
    for s in seen:
        n = min(len(s), len(prompt) - 1)
        i = 0
        while i < n and s[i] == prompt[i]:
            i += 1
        best = max(best, i)
    return best // block * block


def replay_engine(method: Method, requests: list[tuple], budget: int,
                  schedule: EngineSchedule, pass_cost=None) -> dict:
    """Replay requests sent all at once to a live engine, step by step as vLLM schedules them.

    Each step, requests that decode take 1 + their draft's tokens first, in arrival order;
    the rest of the step's token budget prefills the others in chunks (a new request is
    admitted while fewer than ``max_num_seqs`` are in flight, its prompt's cached blocks
    skipped). A request samples its first token in the step its prefill completes; then every
    request with a token this step is extended and drafted, as the engine's propose call does
    after the pass. A request that reached its limit is drafted too (the engine drops that
    draft) and finishes at the start of the next step, when the engine reports it, unless the
    method ends requests in the step itself (``ends_in_step``: specdraft's engine step sees the
    limit and finishes them after drafting the others).

    ``requests`` are (prompt, output) or (prompt, output, truth): the drafts are judged against
    ``truth``, the output and what the target would have generated after it (a run with a longer
    limit): the engine counts a draft accepted as far as it matches, past the request's limit
    too, and only then cuts the output there.

    ``pass_cost(step, rows, tokens) -> seconds`` (the pass times the live engine measured) is reported
    to a method that learns from step timings (``report_step``) before it drafts, as the engine
    step reports each pass: the live controller's online corrections, replayed. With it the
    result also has ``est_seconds``, the run's passes priced by it, and ``scored_tokens``.
    """
    ends_in_step = getattr(method, "ends_in_step", False)
    report = getattr(method, "report_step", None) if pass_cost is not None else None
    est = 0.0
    scored = 0
    waiting = list(requests)
    running: list[_Scheduled] = []
    ended: list[_Scheduled] = []
    seen: list[list[int]] = []  # computed sequences (what the prefix cache may hold)
    drafted = accepted = drafts = steps = 0
    while waiting or running:
        for q in ended:
            method.finish(q.key)
        ended = []
        token_budget = schedule.max_num_batched_tokens
        emitted_now: list[_Scheduled] = []
        for q in running:  # decoding requests: their token and their draft
            if q.computed < len(q.prompt):
                continue
            toks, parents = q.draft
            q.draft = ([], [])
            acc = accepted_length(toks, parents, q.truth[q.pos:]) if toks else 0
            acc = min(acc, len(q.truth) - q.pos - 1)  # the last known token is the target's own
            token_budget -= 1 + len(toks)
            drafted += len(toks)
            drafts += bool(toks)
            accepted += acc
            emitted = q.output[q.pos:q.pos + acc + 1]
            q.pos += len(emitted)
            method.extend(q.key, emitted, acc if toks else None)
            emitted_now.append(q)
        for q in running:  # partial prefills go on
            if token_budget > 0 and q.computed < len(q.prompt):
                token_budget -= _prefill(q, token_budget, method, emitted_now)
        admit = schedule.max_num_seqs
        if steps == 0 and schedule.first_step is not None:
            admit = min(admit, schedule.first_step)
        while waiting and token_budget > 0 and len(running) < admit:
            prompt, output, *truth = waiting.pop(0)
            cached = (_cached_prefix(prompt, seen, schedule.block_size)
                      if schedule.prefix_caching else 0)
            q = _Scheduled(method.new_key(), prompt, output, truth[0] if truth else output, cached)
            method.start(q.key, prompt)
            running.append(q)
            seen.append(prompt)
            token_budget -= _prefill(q, token_budget, method, emitted_now)
        steps += 1
        if pass_cost is not None:
            tokens = schedule.max_num_batched_tokens - token_budget
            seconds = pass_cost(steps - 1, len(running), tokens)
            if seconds:
                est += seconds
                scored += tokens
                if report is not None:
                    report(tokens, seconds)
        done = [q for q in running if q.pos >= q.limit]
        drafting = [q for q in emitted_now if not (ends_in_step and q.pos >= q.limit)]
        if drafting:
            # the rows that emitted a token this step, as the engine's step sees the batch
            # (rows still in prefill emit nothing and are not in it)
            contexts = [len(q.prompt) + q.pos for q in emitted_now]
            shape = (len(emitted_now), float(sum(contexts)), float(max(contexts)))
            for q, d in zip(drafting, method.draft_batch([q.key for q in drafting], budget, shape)):
                check_budget(method, d[0], budget)
                q.draft = d
        for q in done:
            running.remove(q)
            seen.append(q.prompt + q.output)
            if ends_in_step:
                method.finish(q.key)
            else:
                ended.append(q)
    for q in ended:
        method.finish(q.key)
    out = {"steps": steps, "drafts": drafts, "drafted_tokens": drafted, "accepted_tokens": accepted}
    if pass_cost is not None:  # the run's time as the measured passes price it
        out["est_seconds"], out["scored_tokens"] = est, scored
    return out


def _prefill(q: _Scheduled, token_budget: int, method: Method, emitted_now: list) -> int:
    """One prefill chunk of ``q`` within ``token_budget``; its first token when the prompt is done."""
    n = min(token_budget, len(q.prompt) - q.computed)
    q.computed += n
    if q.computed == len(q.prompt):
        q.pos = 1
        method.extend(q.key, q.output[:1], None)
        emitted_now.append(q)
    return n
