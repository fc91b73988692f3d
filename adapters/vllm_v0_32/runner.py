"""vLLM 0.32 model-runner hooks: request identity for each ``propose`` call.

``install_runner_hooks`` wraps ``GPUModelRunner.execute_model`` (the step's begin: the requests
that ended since the last step, the tokens scheduled, new requests' scopes) and
``propose_draft_token_ids`` (a bound ``StepView`` over the runner's batch and scheduler output).
``StepRows`` is one propose call as ``SpecDrafter.step`` arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
from itertools import chain, repeat
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from specdraft.adapters.vllm_hooks import HOOKS_ATTR
from specdraft.adapters.vllm_step import (NO_LIMIT, ends_in_step, ends_in_step_rows,
                                          stop_token_ids as _stop_token_ids)
from specdraft.adapters.vllm_v0_32.config import request_scope
from specdraft.proposers.base import accepted_counts


def ended_normally(req_state: Any, max_model_len: int, lookback: int) -> bool:
    """Did a request in ``finished_req_ids`` stop on its own (stop token, max_tokens, length)?

    The engine core reports finished and aborted requests alike. vLLM implements stop strings
    as an abort from the front end, so those count as aborted here too.
    """
    sp = getattr(req_state, "sampling_params", None)
    out = getattr(req_state, "output_token_ids", None) or []
    if sp is None:
        return False
    # With speculation, tokens accepted after a stop token stay in the runner's copy.
    return ends_in_step(len(out), req_state.num_tokens, getattr(sp, "max_tokens", None),
                        _stop_token_ids(sp), out[-lookback:], max_model_len)


def _request_speculates(req_state: Any) -> bool:
    from specdraft.proposers.config import request_speculates

    sp = getattr(req_state, "sampling_params", None)
    return request_speculates(getattr(sp, "extra_args", None) if sp is not None else None)


class StepView:
    """Request identity for one ``propose`` call, read from the model runner."""

    __slots__ = ("runner", "scheduler_output")

    def __init__(self, runner: Any, scheduler_output: Any):
        self.runner = runner
        self.scheduler_output = scheduler_output

    def budget(self, num_speculative_tokens: int) -> int:
        n = getattr(self.scheduler_output, "num_spec_tokens_to_schedule", None)
        return n if n and 0 < n < num_speculative_tokens else num_speculative_tokens

    def live_req_ids(self):
        return self.runner.requests.keys()

    def step_rows(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                  token_ids_cpu: Any, num_speculative_tokens: int, max_model_len: int,
                  rules: Any) -> "StepRows":
        """The batch as flat arrays, for ``SpecDrafter.step``, without a Python loop over the
        rows in the common case (rows still in prefill emit nothing and are left out).

        0.32 facts it relies on: at ``propose`` the sampled tokens are already in
        ``token_ids_cpu[i, :num_tokens_no_spec[i]]``, and ``num_tokens_no_spec[i]`` equals
        ``requests[req_ids[i]].num_tokens`` (= ``num_prompt_tokens[i]`` + its output tokens).
        ``rules`` holds each request's ``RequestRule`` (``request_rule``, asked once per
        request: adapters/vllm_step.RequestRules)."""
        num_rows = len(sampled_token_ids)
        batch = self.runner.input_batch
        all_ids = batch.req_ids
        if len(all_ids) < num_rows:
            raise RuntimeError(
                f"vLLM batch has {len(all_ids)} request ids for {num_rows} rows")
        emitted = np.fromiter(map(len, sampled_token_ids), np.int64, num_rows)
        num_tokens = np.asarray(num_tokens_no_spec[:num_rows], dtype=np.int64)
        num_prompt = np.asarray(batch.num_prompt_tokens[:num_rows], dtype=np.int64)
        if all(sampled_token_ids):  # (numpy's own reductions cost microseconds on a few rows)
            rows, req_ids = None, all_ids[:num_rows]
        else:  # some rows are still in prefill
            rows = np.flatnonzero(emitted)
            req_ids = [all_ids[i] for i in rows.tolist()]
            emitted, num_tokens, num_prompt = emitted[rows], num_tokens[rows], num_prompt[rows]
        n = len(req_ids)
        out = self.scheduler_output
        scheduled = out.scheduled_spec_decode_tokens
        num_drafted = (np.fromiter(map(len, map(scheduled.get, req_ids, repeat(()))), np.int64, n)
                       if scheduled else np.zeros(n, dtype=np.int64))
        num_accepted = accepted_counts(emitted, num_drafted)
        invalid = getattr(out, "num_invalid_spec_tokens", None)
        invalid_tokens = (sum(invalid.get(r, 0) for r, a in zip(req_ids, num_accepted.tolist())
                              if a >= 0) if invalid else 0)
        speculates, max_tokens = rules.columns(req_ids, self)
        # requests this step's tokens ended: finished (into the global cache) in this step, not
        # at the next one (finished_req_ids arrives only then, if traffic goes on at all). The
        # rule is ends_in_step_rows; a row's stop ids and new tokens are read only in a step
        # where some row emitted one of the stop ids the batch's requests hold (a request's
        # last step, mostly).
        stops, new_tokens = _NO_STOPS, _NO_TOKENS
        if rules.stop_set and not rules.stop_set.isdisjoint(chain.from_iterable(sampled_token_ids)):
            stops, new_tokens = _stop_columns(sampled_token_ids, rows, req_ids, rules)
        done = ends_in_step_rows(num_tokens - num_prompt, num_tokens, max_tokens, stops,
                                 new_tokens, emitted, max_model_len)
        budget = self.budget(num_speculative_tokens)
        if np.count_nonzero(done):
            budgets = np.where(np.array(speculates) & ~done, budget, 0)
            ended = [req_ids[j] for j in np.flatnonzero(done).tolist()]
        else:  # most steps: no request ends, and every row may draft unless one opted out
            budgets = budget if all(speculates) else np.where(speculates, budget, 0)
            ended = []
        return StepRows(num_rows, rows, req_ids, num_tokens, num_prompt, budgets, num_accepted,
                        emitted, max_model_len - 1, ended, num_drafted, invalid_tokens)

    def request_rule(self, req_id: str) -> "RequestRule":
        """What the step needs of a request, asked once: whether it speculates (per-request
        opt-out), its ``max_tokens`` and its stop token ids (``stop_token_ids``)."""
        req_state = self.runner.requests.get(req_id)
        sp = getattr(req_state, "sampling_params", None)
        if sp is None:
            return RequestRule(True, NO_LIMIT, ())
        max_tokens = getattr(sp, "max_tokens", None)
        return RequestRule(_request_speculates(req_state),
                           NO_LIMIT if max_tokens is None else max_tokens,
                           tuple(sorted(_stop_token_ids(sp))))


_NO_STOPS = np.empty((0, 0), dtype=np.int64)
_NO_TOKENS = np.empty((0, 0), dtype=np.int64)


def _stop_columns(sampled_token_ids: list[list[int]], rows: np.ndarray | None, req_ids: list,
                  rules: Any) -> tuple[np.ndarray, np.ndarray]:
    """(stop ids, new tokens) of the step's rows (``rows`` of the batch; None: all) for
    ``ends_in_step_rows``: filled in for the rows whose new tokens hold a stop id some request
    has, -1 elsewhere."""
    rows = (sampled_token_ids if rows is None
            else [sampled_token_ids[i] for i in rows.tolist()])
    width = max(map(len, rows))
    stops = np.full((len(rows), max(rules.stop_width, 1)), -1, dtype=np.int64)
    new_tokens = np.full((len(rows), width), -1, dtype=np.int64)
    for j, row in enumerate(rows):
        if not rules.stop_set.isdisjoint(row):
            own = rules.stops(req_ids[j])
            stops[j, :len(own)] = own
            new_tokens[j, width - len(row):] = row
    return stops, new_tokens


class RequestRule(NamedTuple):
    speculates: bool
    max_tokens: int   # NO_LIMIT: none
    stops: tuple      # stop token ids (EOS unless ignore_eos)


# ---------------------------------------------------------------------------------------------
# The engine step: vLLM's propose call as SpecDrafter.step arguments
# ---------------------------------------------------------------------------------------------

# vLLM 0.32 calls ``drafter.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
# slot_mappings=...)`` (GPUModelRunner.propose_draft_token_ids, custom_class branch).
PROPOSE_PARAMS = ("sampled_token_ids", "num_tokens_no_spec", "token_ids_cpu", "slot_mappings")


def propose_arguments(args: tuple, kwargs: dict) -> tuple[list[list[int]], Any, Any]:
    """(sampled_token_ids, num_tokens_no_spec, token_ids_cpu) from vLLM's propose call."""
    if len(args) >= 3:
        return args[0], args[1], args[2]
    bound = dict(zip(PROPOSE_PARAMS, args))
    bound.update(kwargs)
    try:
        return bound["sampled_token_ids"], bound["num_tokens_no_spec"], bound["token_ids_cpu"]
    except KeyError as e:
        raise TypeError(f"propose() called without {e.args[0]}; vLLM 0.32 passes "
                        f"{', '.join(PROPOSE_PARAMS)}") from None


@dataclasses.dataclass
class StepRows:
    """One propose call as ``SpecDrafter.step`` arguments (per-row values: lists or arrays)."""

    num_rows: int           # rows in vLLM's batch (len(sampled_token_ids))
    rows: Any               # the batch rows handed to the drafter (None: all of them; rows still
    #                         in prefill emit nothing and are left out)
    req_ids: list           # their request ids
    num_tokens: Any
    num_prompt_tokens: Any
    budgets: Any            # an int for every row, or one per row (0: the request opted out)
    num_accepted: Any
    num_emitted: Any
    # A sequence may not grow past max_model_len, and the step emits one token past the draft:
    # a draft ends at max_model_len - 1 tokens. (vLLM also skips drafting for a step whose
    # longest sequence + K exceeds max_model_len.)
    max_len: int
    ended: list = dataclasses.field(default_factory=list)  # requests this step's tokens ended
    # the drafts vLLM verified in this step, as its scheduler counts them: draft tokens
    # scheduled per row (0: none), and draft tokens vLLM marked invalid among them
    num_drafted: Any = None
    invalid_tokens: int = 0


def stateless_rows(sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                   num_speculative_tokens: int, max_model_len: int) -> StepRows:
    """Rows without request ids (propose called outside the runner hook): each row its own
    throwaway request."""
    num_rows = len(sampled_token_ids)
    rows = [i for i, s in enumerate(sampled_token_ids) if s]
    num_tokens = np.asarray(num_tokens_no_spec[:num_rows], dtype=np.int64)[rows]
    return StepRows(num_rows, rows, [f"specdraft-row-{i}" for i in rows], num_tokens, num_tokens,
                    num_speculative_tokens, None, None, max_model_len - 1)


def _runner_class():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner


def _has_params(fn: Callable, names: tuple[str, ...]) -> bool:
    params = list(inspect.signature(fn).parameters)
    return params[: len(names)] == list(names)


def hooked_step_begin(hooks: Any, runner: Any, scheduler_output: Any) -> None:
    """What the wrapped ``execute_model`` does before vLLM's: the step's start, to the hooks
    (``RunnerHooks.step_begin``: the requests that ended since the last step as (req_id,
    aborted), the tokens scheduled, the start time, new requests' (req_id, scope)). Most steps
    end no request and start none: those go to ``step_started`` (tokens scheduled, start time)."""
    try:
        started_at = time.perf_counter()
        ended = scheduler_output.finished_req_ids
        new_reqs = scheduler_output.scheduled_new_reqs
        if ended or new_reqs:
            hooks.step_begin(_ended(runner, ended) if ended else (),
                             scheduler_output.total_num_scheduled_tokens, started_at,
                             _scopes(new_reqs) if new_reqs else ())
        else:
            hooks.step_started((scheduler_output.total_num_scheduled_tokens, started_at))
    except Exception as e:  # noqa: BLE001 - never take the engine down
        hooks.failed(e)


def hooked_propose(hooks: Any, propose: Callable, runner: Any, scheduler_output: Any,
                   args: tuple, kwargs: dict) -> Any:
    """The wrapped ``propose_draft_token_ids``: the runner and the scheduler's output bound (the
    proposer's ``StepView`` over them), vLLM's ``propose``, then unbound (the benchmark of the
    proposer's cost calls this too, so it times what the engine runs)."""
    try:
        hooks.bind(runner, scheduler_output)
    except Exception as e:  # noqa: BLE001 - never take the engine down (the view is bound)
        hooks.failed(e)
    try:
        return propose(runner, scheduler_output, *args, **kwargs)
    finally:
        hooks.unbind()


def install_runner_hooks() -> str | None:
    """Wrap the runner's step entry and propose call site; None on success, else the reason.

    Called from the proposer's constructor: the runner module is loaded by then (it is building
    the proposer), and engines without a specdraft proposer are never touched. The wrappers do
    nothing unless the runner's drafter holds a ``RunnerHooks`` (specdraft.adapters.vllm_hooks).
    """
    try:
        runner_cls = _runner_class()
    except Exception as e:  # noqa: BLE001
        return f"cannot import vLLM's model runner ({e!r})"
    if getattr(runner_cls, "_specdraft_hooked", False):
        return None
    execute_model = getattr(runner_cls, "execute_model", None)
    propose = getattr(runner_cls, "propose_draft_token_ids", None)
    if execute_model is None or propose is None:
        return "vLLM's model runner has no execute_model/propose_draft_token_ids"
    if not (_has_params(execute_model, ("self", "scheduler_output"))
            and _has_params(propose, ("self", "scheduler_output", "sampled_token_ids"))):
        return "vLLM's model runner methods have unexpected signatures"

    @functools.wraps(execute_model)
    def execute_model_hooked(self, scheduler_output, *args, **kwargs):
        hooks = getattr(getattr(self, "drafter", None), HOOKS_ATTR, None)
        if hooks is not None:
            hooked_step_begin(hooks, self, scheduler_output)
        return execute_model(self, scheduler_output, *args, **kwargs)

    @functools.wraps(propose)
    def propose_hooked(self, scheduler_output, *args, **kwargs):
        hooks = getattr(getattr(self, "drafter", None), HOOKS_ATTR, None)
        if hooks is None:
            return propose(self, scheduler_output, *args, **kwargs)
        return hooked_propose(hooks, propose, self, scheduler_output, args, kwargs)

    runner_cls.execute_model = execute_model_hooked
    runner_cls.propose_draft_token_ids = propose_hooked
    runner_cls._specdraft_hooked = True
    return None


# Step timing for benchmarks, in any engine (vLLM's own proposers, no speculation, specdraft's):
# the time from one execute_model call to the next, filed under the first's shape (requests
# scheduled, tokens scheduled). It covers the whole step as the worker sees it (forward pass,
# sampling or verification, the proposer, output handling and waiting for the next schedule).
# Installed in a worker the first time a benchmark asks for the times (worker.STEP_TIMES_METHOD).
STEP_TIMES_ATTR = "_specdraft_step_times"


def install_step_timer() -> bool:
    """Wrap the runner's execute_model to time steps (idempotent); False if it cannot."""
    runner_cls = _runner_class()
    if getattr(runner_cls, "_specdraft_step_timer", False):
        return True
    execute_model = getattr(runner_cls, "execute_model", None)
    if execute_model is None or not _has_params(execute_model, ("self", "scheduler_output")):
        return False

    @functools.wraps(execute_model)
    def execute_model_timed(self, scheduler_output, *args, **kwargs):
        timer = self.__dict__.get(STEP_TIMES_ATTR)
        if timer is not None:
            now = time.perf_counter()
            last = timer.get("last")
            if last is not None:
                cell = timer["shapes"].setdefault(last[:2], [0, 0.0])
                cell[0] += 1
                cell[1] += now - last[2]
            tokens = int(scheduler_output.total_num_scheduled_tokens)
            timer["last"] = ((len(scheduler_output.num_scheduled_tokens), tokens, now)
                             if tokens else None)
        return execute_model(self, scheduler_output, *args, **kwargs)

    runner_cls.execute_model = execute_model_timed
    runner_cls._specdraft_step_timer = True
    return True


def take_step_times(runner: Any) -> list[list] | None:
    """[requests, tokens scheduled, steps, mean seconds] per step shape since the last call, and
    a fresh start (the step running at the call is not counted); None if steps cannot be timed."""
    if not install_step_timer():
        return None
    timer = runner.__dict__.get(STEP_TIMES_ATTR)
    runner.__dict__[STEP_TIMES_ATTR] = {"shapes": {}, "last": None}
    if timer is None:
        return []
    return [[r, t, n, secs / n] for (r, t), (n, secs) in sorted(timer["shapes"].items())]


def _ended(runner: Any, ended: Any) -> list[tuple[str, bool]]:
    """(req_id, aborted) for the requests in the step's ``finished_req_ids``."""
    max_model_len = runner.max_model_len
    lookback = runner.num_spec_tokens + 1 if getattr(runner, "num_spec_tokens", 0) else 1
    requests = runner.requests
    finished = []
    for req_id in ended:
        req_state = requests.get(req_id)
        aborted = req_state is None or not ended_normally(req_state, max_model_len, lookback)
        finished.append((req_id, aborted))
    return finished


def _scopes(new_reqs: Any) -> list[tuple[str, str]]:
    """(req_id, scope) of the step's new requests that carry a tenant scope."""
    scopes = []
    for new in new_reqs:
        scope = request_scope(new.sampling_params)
        if scope is not None:
            scopes.append((new.req_id, scope))
    return scopes
