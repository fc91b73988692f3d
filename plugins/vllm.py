"""specdraft proposers for vLLM's ``custom_class`` speculative method.

    vllm serve MODEL --speculative-config '{"method": "custom_class",
        "model": "specdraft.plugins.vllm.SuffixProposer", "num_speculative_tokens": 16,
        "specdraft": {"global_cache_tokens": 1000000}}'

``LookupProposer`` (prompt lookup), ``SuffixProposer`` (suffix index with the global cache) and
``TreeProposer`` (tree drafts reduced to the chain with the most expected accepted tokens: vLLM
verifies chains only). ``num_speculative_tokens`` is the upper bound of every draft; the adaptive
controller picks lengths below it. Options go under the ``"specdraft"`` key (a dict, or the path
of a JSON file holding one); specdraft's vLLM plugin takes them out before vLLM checks the config.

vLLM calls ``propose`` with batch rows only. The plugin's hooks (specdraft.adapters) bind the
runner's request identity to each call; the adapter reads vLLM's arrays as flat arrays (request
ids, tokens emitted, vLLM's token buffer as is, the drafts verified this step, budgets, the
requests this step ended) and the whole batch is one ``SpecDrafter.step``, the step every engine
adapter calls; its answer goes back as vLLM's ``list[list[int]]``. Without the
hooks the proposer drafts each row from its tokens alone. This module holds no vLLM-version
fact: those are in specdraft.adapters. A proposer failure never reaches vLLM: the step goes on without drafts,
the failure is counted (``specdraft:errors_total``) and logged once.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from typing import Any

import numpy as np

from specdraft.adapters import vllm_adapter
from specdraft.adapters.vllm_hooks import RunnerHooks
from specdraft.adapters.vllm_step import VllmStep, record_failure, verified_counts
from specdraft.plugins.vllm_metrics import SnapshotWriter, read_snapshot, wait_for_snapshot

__all__ = ["SpecdraftProposer", "LookupProposer", "SuffixProposer", "TreeProposer",
           "load_options", "engine_metrics", "PROPOSERS"]


def config_error(message: str) -> Exception:
    from specdraft.proposers.base import SpecdraftConfigError

    return SpecdraftConfigError(message)


def load_options(raw: Any, key: str = "speculative_config['specdraft']") -> dict:
    """The options under ``key`` (vLLM 0.32: ``speculative_config["specdraft"]``; 0.34:
    ``speculator_options``): a dict, a JSON file's path, or None."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, (str, os.PathLike)):
        path = os.fspath(raw)
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as e:
            raise config_error(f"{key}: cannot read options file "
                                f"{path!r}: {e.strerror}") from None
        except ValueError as e:
            raise config_error(f"{key}: options file {path!r} "
                                f"is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise config_error(f"{key}: options file {path!r} must "
                                f"hold a JSON object, got {type(data).__name__}")
        return data
    raise config_error(f"{key} must be an object of specdraft options "
                        f"or the path of a JSON file holding one, got {type(raw).__name__}")


def _validate(options: dict) -> dict:
    """Options checked as the drafter will read them, without building it (process 0)."""
    from specdraft.proposers import DrafterConfig

    DrafterConfig.from_dict(options)
    files = options.get("corpus_files") or ()
    for path in [files] if isinstance(files, str) else files:
        if isinstance(path, str) and not os.path.isfile(path):
            raise config_error(f"invalid specdraft option corpus_files: {path!r} is not a file")
    return options


class SpecdraftProposer:
    """Drafts with the strategy named in the options ("suffix" unless told)."""

    strategy: str | None = None

    @classmethod
    def resolve_options(cls, options: dict | None) -> dict:
        """Options with this class's strategy, validated; raises SpecdraftConfigError."""
        opts = dict(options or {})
        _validate(opts)  # an invalid value is reported as such before any conflict
        if cls.strategy is not None:
            if opts.get("strategy", cls.strategy) != cls.strategy:
                other = PROPOSERS.get(opts["strategy"], "SpecdraftProposer")
                raise config_error(
                    f"{cls.__module__}.{cls.__name__} drafts with strategy {cls.strategy!r}, but "
                    f"speculative_config['specdraft']['strategy'] is {opts['strategy']!r}; drop "
                    f"the option or use {cls.__module__}.{other}")
            opts["strategy"] = cls.strategy
        return _validate(opts)

    def __init__(self, vllm_config: Any):
        self.adapter = vllm_adapter()  # raises UnsupportedEngineVersion naming the supported range
        self.log = self.adapter.logger()
        # This worker verifies specdraft's drafts: fix its CPU rejection sampler (and only its).
        from specdraft.plugins.vllm_plugin import apply_sampler_fix

        apply_sampler_fix(self.adapter)
        facts = self.adapter.engine_facts(vllm_config)
        self.num_speculative_tokens = facts.num_speculative_tokens
        self.max_model_len = facts.max_model_len
        self.vocab_size = facts.vocab_size
        if facts.options is None and (excluded := self.adapter.plugin_excluded()) is not None:
            raise config_error(
                f"specdraft's vLLM plugin did not run: {self.adapter.PLUGINS_ENV}={excluded!r} "
                f"leaves it out; add it ({self.adapter.PLUGINS_ENV}={excluded + ',' if excluded else ''}"
                f"{self.adapter.PLUGIN_NAME}) or unset {self.adapter.PLUGINS_ENV}")
        if facts.options is None:
            self.log.info("specdraft: no options from process 0 (specdraft's vLLM plugin did not "
                          "see the config); using defaults")
        self.options = self.resolve_options(facts.options)
        drafter_options = dict(self.options)
        # The controller's prior for verification cost; step timings refine it.
        drafter_options.setdefault("cost_model", self.adapter.cost_model_preset(vllm_config))
        self._drafter_args = (drafter_options, vllm_config)
        self.drafter = self.build_drafter(drafter_options, vllm_config)
        self.steps = VllmStep(self.adapter, self.drafter, self.num_speculative_tokens,
                              self.max_model_len, self.vocab_size)
        self._view = self.adapter.StepView(None, None)  # bound to each step's runner (_bind)
        self._stateless_logged = False
        self._error_logged = False
        # drafts/draft_tokens/accepted_tokens: as vLLM verified them (_bind);
        # proposed_*: what this proposer handed over (vLLM drops those of finished requests).
        self.counters = {"steps": 0, "proposer_seconds": 0.0, "rows": 0, "drafts": 0,
                        "draft_tokens": 0, "accepted_tokens": 0, "proposed_drafts": 0,
                        "proposed_draft_tokens": 0, "errors": 0}
        self._length_counts = np.zeros(self.num_speculative_tokens + 1, dtype=np.int64)
        self._lengths: list[np.ndarray] = []  # draft lengths of recent steps, not yet counted
        self._verified: list[tuple] = []  # (accepted, drafted) of recent steps, not yet counted
        self._drafter_counters: dict = {}
        self._drafter_counters_at = 0.0
        self.tracked = False
        # what the adapter's runner wrappers and worker methods call (every step: the step's
        # methods themselves, bound once)
        self.specdraft_hooks = RunnerHooks(
            step_begin=self._step_begin, bind=self._bind,
            # every step: C-level setattrs, no Python frame
            step_started=functools.partial(setattr, self.steps, "step_started"),
            unbind=functools.partial(setattr, self.steps, "view", None),
            failed=self._failed, metrics=self.worker_metrics, reset=self.reset_cross_request_state)
        reason = self.adapter.install_runner_hooks()
        self.hook_problem = reason
        if reason is not None:
            self.log.warning("specdraft: cannot see vLLM's request ids (%s); drafting each row "
                             "from its tokens alone: per-request state and the global cache's "
                             "learning from finished requests are off", reason)
        # counters are read by the writer's thread (_snapshot): the step only says they changed
        self._counters_lock = threading.RLock()
        self.writer = (SnapshotWriter(facts.metrics_dir, source=self._snapshot)
                       if facts.metrics_dir and facts.tp_rank == 0 else None)
        self.log.info("specdraft: %s drafting up to %d tokens (options %s)",
                      type(self).__name__, self.num_speculative_tokens, self.options)
        self._publish()  # counters exist (zeros) before the first step

    def build_drafter(self, options: dict, vllm_config: Any) -> Any:
        """The engine-agnostic drafter behind this proposer (subclasses may wrap it)."""
        from specdraft.proposers import make_drafter

        tokenizer = (self.adapter.load_tokenizer(vllm_config)
                     if options.get("corpus_files") else None)
        return make_drafter(options, chain_only=True, vocab_size=self.vocab_size,
                            tokenizer=tokenizer)

    # -- vLLM's custom_class interface -----------------------------------------------------------

    def load_model(self, *args, **kwargs) -> None:
        """No draft model: specdraft drafts from token history."""

    def propose(self, *args, **kwargs) -> list[list[int]]:
        """vLLM's call, whatever its version passes (the adapter reads the arguments)."""
        start = time.perf_counter()
        try:
            sampled, num_tokens_no_spec, token_ids_cpu = self.adapter.propose_arguments(
                args, kwargs)
            drafts = self._propose(sampled, num_tokens_no_spec, token_ids_cpu)
        except Exception as e:  # noqa: BLE001 - a proposer failure must not reach the engine
            self._failed(e)
            rows = args[0] if args else kwargs.get("sampled_token_ids", ())
            drafts = [[] for _ in rows]
        elapsed = time.perf_counter() - start
        self.counters["steps"] += 1
        self.counters["proposer_seconds"] += elapsed
        if self.writer is not None:
            self.writer.publish()  # built in the writer's thread (_snapshot)
        return drafts

    # -- called by specdraft.adapters' runner wrappers and worker methods (specdraft_hooks) --------

    def reset_cross_request_state(self) -> dict:
        """Forget every request and the global cache (corpora are loaded again): what a
        benchmark round needs so that it cannot copy the previous round's outputs. Called between
        rounds, with no request in flight; finish notices still pending are dropped with them."""
        live = len(self.drafter.req_ids())
        cached = self.drafter.metrics().get("global_cache_tokens", 0)
        self.steps.forget_events()
        self.steps.step_started = None
        self.steps.pass_log.clear()
        self._count_lengths()  # the counters of the drafter that goes
        self.drafter = self.build_drafter(*self._drafter_args)
        self.steps.drafter = self.drafter
        return {"dropped_requests": live, "dropped_cache_tokens": cached}

    def _step_begin(self, finished: Any, num_scheduled_tokens: int, started_at: float,
                    scopes: Any) -> None:
        """The runner hooks' ``step_begin``; a step that schedules nothing applied the ends it
        brought (``VllmStep.step_begin``), which /metrics shows without waiting for a step."""
        self.steps.step_begin(finished, num_scheduled_tokens, started_at, scopes)
        if not num_scheduled_tokens:
            self._publish()

    def _bind(self, runner: Any, scheduler_output: Any) -> None:
        """The runner hooks' ``bind``: the step's view for ``propose`` (one ``StepView``, pointed
        at this step's runner and scheduler output; None after it: the hooks' ``unbind``). The
        drafts vLLM verified in this step are counted by the step itself (``_propose``)."""
        view = self._view
        view.runner = runner
        view.scheduler_output = scheduler_output
        self.steps.view = view

    def worker_metrics(self) -> dict:
        """The drafter's ``metrics()``, the time spent in ``propose`` and its calls, and the
        verification passes measured (what the adapter's worker method returns). Read between
        steps, so the ends vLLM reported since the last ``propose`` are applied first."""
        try:
            self.steps.apply_end_events()
        except Exception as error:  # noqa: BLE001 - never fail a metrics read; the next step rebuilds
            self._failed(error)
        out = dict(self.drafter.metrics())
        out["proposer_seconds"] = float(self.counters["proposer_seconds"])
        out["proposer_steps"] = int(self.counters["steps"])
        out["pass_costs"] = self.steps.measured_pass_costs()
        out["pass_log"] = [list(p) for p in self.steps.pass_log]
        return out

    # -- the step: one drafter call for the whole batch --------------------------------------------

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> list[list[int]]:
        if self.steps.view is None and not self._stateless_logged:
            self._stateless_logged = True
            why = f" ({self.hook_problem})" if self.hook_problem else ""
            self.log.warning("specdraft: vLLM called propose outside specdraft's runner hook%s; "
                             "drafting statelessly", why)
        drafts, out, step = self.steps.propose(sampled_token_ids, num_tokens_no_spec,
                                               token_ids_cpu)
        tracked = step.num_drafted is not None
        self.tracked = self.tracked or tracked
        # proposed_*: what the proposer handed over; drafts/draft_tokens/accepted_tokens: what
        # vLLM verified in this step, as its spec_decode counters count it (verified_counts)
        with self._counters_lock:
            self.counters["proposed_draft_tokens"] += out.tokens.shape[0]
            self._lengths.append(out.lengths)  # counted in bulk (_count_lengths)
            if tracked:
                self._verified.append((step.num_accepted, step.num_drafted))
                if step.invalid_tokens:
                    self.counters["draft_tokens"] -= step.invalid_tokens
            if len(self._lengths) >= 256:
                self._count_lengths()
        return drafts

    def _count_lengths(self) -> None:
        with self._counters_lock:
            self._count_lengths_locked()

    def _count_lengths_locked(self) -> None:
        if self._verified:
            accepted, drafted = zip(*self._verified)
            self._verified = []
            drafts, tokens, accepted_tokens = verified_counts(np.concatenate(accepted),
                                                              np.concatenate(drafted))
            f = self.counters
            f["drafts"] += drafts
            f["draft_tokens"] += tokens
            f["accepted_tokens"] += accepted_tokens
        if not self._lengths:
            return
        lengths = np.concatenate(self._lengths)
        self._lengths = []
        f = self.counters
        f["rows"] += lengths.shape[0]
        f["proposed_drafts"] += int(np.count_nonzero(lengths))
        if lengths.size:
            self._length_counts += np.bincount(lengths, minlength=self._length_counts.size)

    def _failed(self, error: Exception) -> None:
        self.steps.forget_events()
        record_failure(self, error, "proposer")

    def _publish(self) -> None:
        if self.writer is not None:
            self.writer.publish()

    def _snapshot(self) -> dict:
        """The counters as published (called from the writer's thread)."""
        self._count_lengths()
        now = time.monotonic()
        if now - self._drafter_counters_at > 0.2:
            self._drafter_counters_at = now
            try:
                m = self.drafter.metrics()
                self._drafter_counters = {k: m[k] for k in _DRAFTER_COUNTERS if k in m}
            except Exception:  # noqa: BLE001 - counters are best effort
                self._drafter_counters = {}
        stats = self.drafter.counters
        return {
            **self._drafter_counters, **self.counters,
            "draft_length_counts": self._length_counts.tolist(),
            "requests_started": stats.requests, "requests_finished": stats.finished,
            "requests_aborted": stats.aborted, "tracked": self.tracked,
            "strategy": self.options.get("strategy"),
            "num_speculative_tokens": self.num_speculative_tokens}


# Counters taken from the drafter's metrics(); the rest are counted here, as vLLM saw them.
_DRAFTER_COUNTERS = ("global_cache_tokens", "global_cache_nodes", "global_cache_bytes",
                    "live_requests", "native", "cache_scopes", "scope_cache_tokens_top",
                    # the shared cache's (specdraft.proposers.shared_cache), when it is on
                    "shared_cache_published_tokens", "shared_cache_pulled_tokens",
                    "shared_cache_errors", "shared_cache_restarts_seen",
                    "shared_cache_store_tokens")


class LookupProposer(SpecdraftProposer):
    """Prompt lookup: continue the latest earlier occurrence of the context's suffix."""

    strategy = "lookup"


class SuffixProposer(SpecdraftProposer):
    """Suffix index over the request and a global cache of finished requests and corpora."""

    strategy = "suffix"


class TreeProposer(SpecdraftProposer):
    """Tree drafts, reduced to the chain with the most expected accepted tokens."""

    strategy = "tree"


PROPOSERS = {"lookup": "LookupProposer", "suffix": "SuffixProposer", "tree": "TreeProposer"}


def engine_metrics(llm: Any, wait_for: Any = None, timeout: float = 5.0) -> dict | None:
    """specdraft's counters for an offline ``vllm.LLM`` (what /metrics shows when serving).

    ``wait_for(snapshot) -> bool`` waits until the worker's counters satisfy it (they trail the
    engine by a fraction of a second).
    """
    adapter = vllm_adapter()
    spec = adapter.speculative_config_of(llm)
    metrics_dir = getattr(spec, adapter.METRICS_DIR_ATTR, None)
    if wait_for is None:
        return read_snapshot(metrics_dir)
    return wait_for_snapshot(metrics_dir, wait_for, timeout)
