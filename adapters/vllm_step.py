"""vLLM's ``custom_class`` step as one ``SpecDrafter.step`` call.

``VllmStep`` collects what the runner hooks report between two ``propose`` calls (requests that
ended, the start of the step) and turns each ``propose`` call into the drafter's step arguments:
flat arrays read straight from vLLM's batch by the adapter's ``StepView.step_rows`` (its
``token_ids_cpu`` buffer is handed over as is), then the drafter's flat answer back into vLLM's
``list[list[int]]`` in the runner's row order. Every fact that depends on the vLLM version comes
from the version adapter module it is given (``specdraft.adapters.vllm_adapter()``): the
``propose`` signature, how request identity and accepted counts are read from the runner, the
per-row cap rule. The rules every vLLM adapter shares (what ends a request in a step, a
failure, the verified-draft counts) are here.
"""

from __future__ import annotations

import time
from collections import deque
from types import ModuleType
from typing import Any, Sequence

import numpy as np

# The engine may hold request state the drafter missed a finish event for; every this many steps
# the drafter drops requests the runner no longer holds.
RETAIN_EVERY = 64
PASS_LOG = 1 << 16  # passes kept in order for benchmarks (about 3 MB at most)


def stop_token_ids(sampling_params: Any) -> set[int]:
    """The token ids that end a request as vLLM's scheduler checks them (stop ids, and EOS
    unless ``ignore_eos``)."""
    stops = set(getattr(sampling_params, "stop_token_ids", None) or ())
    eos = getattr(sampling_params, "eos_token_id", None)
    if eos is not None and not getattr(sampling_params, "ignore_eos", False):
        stops.add(eos)
    return stops


def ends_in_step(num_output: int, num_tokens: int, max_tokens: int | None, stops: Any,
                 new_tokens: Sequence[int], max_model_len: int) -> bool:
    """Did the tokens a request emitted in this step (``new_tokens``, the last of its
    ``num_output`` output tokens) end it, so the scheduler will finish it? Every vLLM adapter
    asks this rule (``max_tokens``, ``max_model_len``, a stop token), so a request's history
    reaches the global cache in the step that ends it. As the scheduler's check_stop, a stop
    token ends the request whatever min_tokens says (the min_tokens logits processor keeps stop
    tokens from being sampled before then). Stop strings are found by the front end, which then
    aborts: those wait for the engine's finish notice. ``ends_in_step_rows`` is the same rule
    over a batch."""
    new = list(new_tokens) or [-1]
    return bool(ends_in_step_rows(
        np.array([num_output]), np.array([num_tokens]),
        np.array([NO_LIMIT if max_tokens is None else max_tokens]),
        np.array([sorted(stops) or [-1]]), np.array([new]), np.array([len(new_tokens)]),
        max_model_len)[0])


NO_LIMIT = np.iinfo(np.int64).max


def ends_in_step_rows(num_output: np.ndarray, num_tokens: np.ndarray, max_tokens: np.ndarray,
                      stops: np.ndarray, last_tokens: np.ndarray, num_new: np.ndarray,
                      max_model_len: int) -> np.ndarray:
    """``ends_in_step`` for R rows at once: ``max_tokens`` per row (``NO_LIMIT``: none),
    ``stops`` an (R, S) array of stop ids padded with -1, ``last_tokens`` an (R, W) array whose
    last ``num_new[j]`` entries are row j's tokens of this step."""
    done = (num_output >= max_tokens) | (num_tokens >= max_model_len)
    if last_tokens.size and stops.size and (stops >= 0).any():
        width = last_tokens.shape[1]
        new = np.arange(width)[None, :] >= (width - num_new)[:, None]
        hit = (last_tokens[:, :, None] == stops[:, None, :]) & (stops >= 0)[:, None, :]
        done |= (hit.any(axis=2) & new).any(axis=1)
    return done


def verified_counts(num_accepted: np.ndarray, num_drafted: np.ndarray) -> tuple[int, int, int]:
    """(drafts, draft tokens, accepted tokens) that vLLM verified over rows of steps, counted as
    its scheduler counts ``vllm:spec_decode_*`` (``Scheduler.update_from_output``): a row counts
    when it was scheduled with a draft and emitted tokens, which is where ``accepted_counts``
    is >= 0."""
    verified = num_accepted >= 0
    return (int(np.count_nonzero(verified)), int(num_drafted[verified].sum()),
            int(num_accepted[verified].sum()))


def record_failure(owner: Any, error: Exception, what: str) -> None:
    """A failing step never reaches the engine: the step goes on without drafts, the failure is
    counted (``specdraft:errors_total``) and logged once with its traceback, and the drafter's
    request state is dropped, to be rebuilt from the engine's history. ``owner`` is the engine's
    proposer or speculator (``counters``, ``drafter``, ``log``, ``_error_logged``)."""
    owner.counters["errors"] += 1
    try:
        owner.drafter.count_error()
    except Exception:  # noqa: BLE001
        pass
    if not owner._error_logged:
        owner._error_logged = True
        owner.log.error("specdraft: %s failed; this step goes on without drafts and the drafter's "
                        "request state is rebuilt from vLLM's. Later failures are only counted "
                        "(specdraft:errors_total).", what, exc_info=error)
    try:
        owner.drafter.reset()
    except Exception:  # noqa: BLE001 - the drafter is in trouble; the next step rebuilds it
        pass


class RequestRules:
    """Each request's ``RequestRule`` (speculates, max_tokens, stop ids), asked of the adapter's
    view once per request and read by the step as columns."""

    def __init__(self):
        self._speculates: dict = {}
        self._max_tokens: dict = {}
        self._stops: dict = {}
        self.stop_set: set = set()  # every stop id the requests held have had (a prefilter)
        self.stop_width = 0         # the most stop ids a request has

    def columns(self, req_ids: Sequence, view: Any) -> tuple[list, np.ndarray]:
        """(speculates, a list of bools; max_tokens, an array) of these requests."""
        speculates = list(map(self._speculates.get, req_ids))
        if None in speculates:  # requests seen for the first time
            for req_id, known in zip(req_ids, speculates):
                if known is None:
                    self._add(req_id, view.request_rule(req_id))
            speculates = list(map(self._speculates.__getitem__, req_ids))
        return (speculates,
                np.fromiter(map(self._max_tokens.__getitem__, req_ids), np.int64, len(req_ids)))

    def stops(self, req_id) -> tuple:
        return self._stops[req_id]

    def _add(self, req_id, rule: Any) -> None:
        self._speculates[req_id] = bool(rule.speculates)
        self._max_tokens[req_id] = rule.max_tokens
        self._stops[req_id] = rule.stops
        if rule.stops:
            self.stop_width = max(self.stop_width, len(rule.stops))
            self.stop_set.update(rule.stops)

    def pop(self, req_id) -> None:
        self._speculates.pop(req_id, None)
        self._max_tokens.pop(req_id, None)
        self._stops.pop(req_id, None)

    def clear(self) -> None:
        self.__init__()


class VllmStep:
    def __init__(self, adapter: ModuleType, drafter: Any, num_speculative_tokens: int,
                 max_model_len: int, vocab_size: int):
        self.adapter = adapter
        self.drafter = drafter
        self.num_speculative_tokens = num_speculative_tokens
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.view: Any = None                       # StepView while vLLM is inside propose
        self.finished: list[str] = []
        self.aborted: list[str] = []
        self.step_started: tuple[int, float] | None = None
        self.rules = RequestRules()
        self.steps = 0
        # the latest passes in order, (rows, tokens scored, seconds): what the controller was
        # told, and what the engine's verification actually costs by batch and tokens (read by
        # benchmarks, between steps; a step only appends)
        self.pass_log: deque = deque(maxlen=PASS_LOG)

    # -- runner hooks ------------------------------------------------------------------------------
    def step_begin(self, finished: Any, num_scheduled_tokens: int, started_at: float,
                   scopes: Any) -> None:
        """The runner hooks' ``step_begin`` (specdraft.adapters.vllm_hooks.RunnerHooks); steps
        that ended no request and started none go to ``step_started`` instead. A step that
        schedules nothing (how vLLM hands an idle server's last ends to the worker) has no
        ``propose`` after it: its ends are applied at once."""
        for req_id, aborted in finished:
            (self.aborted if aborted else self.finished).append(req_id)
            self.rules.pop(req_id)
        for req_id, scope in scopes:  # before its first row: it starts in its scope
            if not self.drafter.has(req_id):
                self.drafter.set_scope(req_id, scope)
        if num_scheduled_tokens:
            self.step_started = (num_scheduled_tokens, started_at)
        else:
            self.step_started = None
            self.apply_end_events()

    def count_pass(self, rows: int, tokens: int, seconds: float) -> None:
        self.pass_log.append((rows, tokens, seconds))

    def measured_pass_costs(self) -> list[list]:
        """[rows, tokens scored, passes, mean seconds] per shape, over the passes in the log
        (the latest PASS_LOG)."""
        costs: dict[tuple[int, int], list] = {}
        for rows, tokens, seconds in self.pass_log:
            cell = costs.get((rows, tokens))
            if cell is None:
                costs[rows, tokens] = [1, seconds]
            else:
                cell[0] += 1
                cell[1] += seconds
        return [[r, t, n, s / n] for (r, t), (n, s) in sorted(costs.items())]

    def apply_end_events(self) -> None:
        """Requests that ended since the last ``propose`` leave the drafter now (finished ones
        into the global cache). vLLM does not call ``propose`` in every step (not when the
        longest sequence plus K would pass max_model_len, nor once the batch is empty), so the
        events of the last steps would otherwise wait for a step that may not come; called
        between steps, from the thread that steps."""
        finished, aborted = self.finished, self.aborted
        if not (finished or aborted):
            return
        self.finished, self.aborted = [], []
        self._finish(finished)
        for req_id in aborted:
            self.drafter.abort(req_id)

    def _finish(self, req_ids) -> None:
        """Finish the requests the drafter holds (into the global cache), one by one: an empty
        step would size an empty batch, which the cost model's next observation would be read
        against."""
        drafter = self.drafter
        for req_id in req_ids:
            if drafter.has(req_id):
                drafter.finish(req_id)

    def forget_events(self) -> None:
        """After a failure: the drafter's state is rebuilt from the engine's history."""
        self.finished.clear()
        self.aborted.clear()
        self.rules.clear()

    # -- the step ----------------------------------------------------------------------------------
    def rows(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu):
        """The adapter's view of this step; None for stateless rows (no request ids)."""
        view = self.view
        if view is None:
            return None
        return view.step_rows(sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
                              self.num_speculative_tokens, self.max_model_len, self.rules)

    def propose(self, sampled_token_ids, num_tokens_no_spec,
                token_ids_cpu) -> tuple[list[list[int]], Any, Any]:
        """(drafts for vLLM, the drafter's StepDrafts, the step's StepRows) for one propose
        call; the rows' ``num_drafted`` is None for stateless rows (no request ids)."""
        self.steps += 1
        tracked = self.view is not None
        if tracked:
            step = self.rows(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
            if self.step_started is not None:
                num_tokens, started_at = self.step_started
                self.step_started = None
                seconds = time.perf_counter() - started_at
                self.count_pass(len(sampled_token_ids), num_tokens, seconds)
                self.drafter.report_step(num_tokens, seconds)
            finished, aborted = self.finished, self.aborted
            self.finished, self.aborted = [], []
            if self.steps % RETAIN_EVERY == 0:
                live = self.view.live_req_ids()
                aborted = aborted + [r for r in self.drafter.req_ids() if r not in live]
        else:
            step = self.adapter.stateless_rows(sampled_token_ids, num_tokens_no_spec,
                                               self.num_speculative_tokens, self.max_model_len)
            finished, aborted = [], []
        try:
            out = self.drafter.step(
                step.req_ids, token_ids_cpu, step.num_tokens, step.num_prompt_tokens, step.budgets,
                rows=step.rows, num_accepted=step.num_accepted, num_emitted=step.num_emitted,
                finished=finished, aborted=aborted, max_len=step.max_len)
        finally:
            if not tracked and step.req_ids:  # forget the throwaway requests
                self.drafter.step([], token_ids_cpu, [], [], [], aborted=step.req_ids)
        # into the global cache now; vLLM's finish notice will find them gone
        self._finish(step.ended)
        return self.engine_drafts(out, step), out, step

    def engine_drafts(self, out: Any, step: Any) -> list[list[int]]:
        """The drafter's answer as vLLM takes it, after checks that keep a bad draft away from
        the engine (more tokens than allowed, ids outside the vocabulary)."""
        budgets = step.budgets
        if isinstance(budgets, int):
            budgets = [budgets] * len(step.req_ids)
        return engine_rows(out.tokens, out.lengths, step.num_rows, step.rows, budgets,
                           self.vocab_size)


def _engine_rows(tokens, lengths, num_rows, rows, budgets, vocab_size) -> list[list[int]]:
    """Plain-Python ``engine_rows`` (when the native extension is not built)."""
    budgets = np.maximum(np.asarray(budgets, dtype=np.int64), 0)
    if lengths.shape != budgets.shape or (lengths < 0).any() or (lengths > budgets).any():
        raise ValueError(f"drafter returned drafts longer than allowed: lengths "
                         f"{lengths.tolist()}, budgets {budgets.tolist()}")
    if int(lengths.sum()) != tokens.shape[0]:
        raise ValueError(f"drafter returned {tokens.shape[0]} tokens for lengths adding up to "
                         f"{int(lengths.sum())}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"drafter proposed a token outside the vocabulary (0..{vocab_size - 1})")
    flat = tokens.tolist()
    ends = np.cumsum(lengths).tolist()
    drafts = [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]
    if rows is None:
        return drafts
    full: list[list[int]] = [[] for _ in range(num_rows)]
    for i, d in zip(rows, drafts):
        full[i] = d
    return full


try:
    from specdraft.proposers._suffix_native import engine_rows
except ImportError:  # pragma: no cover - the extension is part of the package
    engine_rows = _engine_rows
