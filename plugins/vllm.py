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
runner's request identity to each call, so requests are started, extended with their accepted
counts, finished and aborted as the engine sees them. Without the hooks the proposer drafts each
row from its tokens alone. A proposer failure never reaches vLLM: the step goes on without drafts,
the failure is counted (``specdraft:errors_total``) and logged once.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from specdraft.adapters import vllm_adapter
from specdraft.adapters.request_sync import RequestSync, Row
from specdraft.plugins.vllm_metrics import SnapshotWriter, read_snapshot, wait_for_snapshot

__all__ = ["SpecdraftProposer", "LookupProposer", "SuffixProposer", "TreeProposer",
           "load_options", "engine_metrics", "PROPOSERS"]


def config_error(message: str) -> Exception:
    from specdraft.proposers.base import SpecdraftConfigError

    return SpecdraftConfigError(message)


def load_options(raw: Any) -> dict:
    """The value of ``speculative_config["specdraft"]``: a dict, a JSON file's path, or None."""
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
            raise config_error(f"speculative_config['specdraft']: cannot read options file "
                                f"{path!r}: {e.strerror}") from None
        except ValueError as e:
            raise config_error(f"speculative_config['specdraft']: options file {path!r} "
                                f"is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise config_error(f"speculative_config['specdraft']: options file {path!r} must "
                                f"hold a JSON object, got {type(data).__name__}")
        return data
    raise config_error("speculative_config['specdraft'] must be an object of specdraft options "
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
        facts = self.adapter.engine_facts(vllm_config)
        self.num_speculative_tokens = facts.num_speculative_tokens
        self.max_model_len = facts.max_model_len
        self.vocab_size = facts.vocab_size
        if facts.options is None:
            self.log.info("specdraft: no options from process 0 (specdraft's vLLM plugin did not "
                          "see the config); using defaults")
        self.options = self.resolve_options(facts.options)
        drafter_options = dict(self.options)
        # The controller's prior for verification cost; step timings refine it.
        drafter_options.setdefault("cost_model", self.adapter.cost_model_preset(vllm_config))
        self.drafter = self.build_drafter(drafter_options, vllm_config)
        self.requests = RequestSync(self.drafter)
        self._rows_alone = RequestSync(self.drafter)  # stateless drafting's throwaway requests
        self._view = None          # StepView while vLLM is inside propose_draft_token_ids
        self._finished: list[tuple[str, bool]] = []
        self._step_started: tuple[int, float] | None = None
        self._stateless_logged = False
        self._error_logged = False
        # drafts/draft_tokens/accepted_tokens: as vLLM verified them (specdraft_verified);
        # proposed_*: what this proposer handed over (vLLM drops those of finished requests).
        self.figures = {"steps": 0, "proposer_seconds": 0.0, "rows": 0, "drafts": 0,
                        "draft_tokens": 0, "accepted_tokens": 0, "proposed_drafts": 0,
                        "proposed_draft_tokens": 0, "errors": 0,
                        "draft_length_counts": [0] * (self.num_speculative_tokens + 1)}
        self._drafter_figures: dict = {}
        self._drafter_figures_at = 0.0
        self.tracked = False
        reason = self.adapter.install_runner_hooks()
        self.hook_problem = reason
        if reason is not None:
            self.log.warning("specdraft: cannot see vLLM's request ids (%s); drafting each row "
                             "from its tokens alone: per-request state and the global cache's "
                             "learning from finished requests are off", reason)
        self.writer = (SnapshotWriter(facts.metrics_dir)
                       if facts.metrics_dir and facts.tp_rank == 0 else None)
        self.log.info("specdraft: %s drafting up to %d tokens (options %s)",
                      type(self).__name__, self.num_speculative_tokens, self.options)
        self._publish()  # figures exist (zeros) before the first step

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

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                token_ids_cpu: Any, slot_mappings: Any = None) -> list[list[int]]:
        start = time.perf_counter()
        try:
            drafts = self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        except Exception as e:  # noqa: BLE001 - a proposer failure must not reach the engine
            self._failed(e)
            drafts = [[] for _ in sampled_token_ids]
        elapsed = time.perf_counter() - start
        self.figures["steps"] += 1
        self.figures["proposer_seconds"] += elapsed
        self._publish()
        return drafts

    # -- hooks called by specdraft.adapters' runner wrappers -------------------------------------

    def specdraft_step_begin(self, begin: Any) -> None:
        self._finished.extend(f for f in begin.finished if f[0] in self.requests)
        self._step_started = (begin.num_scheduled_tokens, begin.started_at)

    def specdraft_bind(self, view: Any) -> None:
        self._view = view

    def specdraft_hook_failed(self, error: Exception) -> None:
        self._failed(error)

    def specdraft_verified(self, drafts: int, draft_tokens: int, accepted_tokens: int) -> None:
        """Drafts vLLM verified in this step, counted as vLLM's spec_decode counters count them."""
        self.figures["drafts"] += drafts
        self.figures["draft_tokens"] += draft_tokens
        self.figures["accepted_tokens"] += accepted_tokens

    # -- the step --------------------------------------------------------------------------------

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> list[list[int]]:
        view = self._view
        if view is None:
            return self._propose_stateless(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        self.tracked = True
        finished, self._finished = self._finished, []
        for req_id, aborted in finished:
            self.requests.drop(req_id, aborted)
        if self._step_started is not None:
            num_tokens, started_at = self._step_started
            self._step_started = None
            self.drafter.report_step(num_tokens, time.perf_counter() - started_at)

        rows = view.rows(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        budget = view.budget(self.num_speculative_tokens)
        wanted: list[tuple[int, Row, int]] = []
        for i, row in enumerate(rows):
            if row is None:
                continue
            self.requests.sync(row)
            if row.ended:  # stopped in this step: to the global cache now, not at the next step
                self.requests.drop(row.req_id, aborted=False)
                continue
            cap = min(budget, self.max_model_len - row.num_tokens - 1)
            if row.speculate and cap > 0:
                wanted.append((i, row, cap))
        if self.figures["steps"] % 64 == 0:
            self.requests.retain(view.live_req_ids())
        return self._draft(wanted, len(sampled_token_ids))

    def _propose_stateless(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu):
        """No request ids: draft each row from its own tokens, forgetting it afterwards."""
        if not self._stateless_logged:
            self._stateless_logged = True
            why = f" ({self.hook_problem})" if self.hook_problem else ""
            self.log.warning("specdraft: vLLM called propose outside specdraft's runner hook%s; "
                             "drafting statelessly", why)
        wanted = []
        try:
            for i, sampled in enumerate(sampled_token_ids):
                n = int(num_tokens_no_spec[i])
                cap = min(self.num_speculative_tokens, self.max_model_len - n - 1)
                if not sampled or cap <= 0:
                    continue
                row = Row(f"specdraft-row-{i}", token_ids_cpu[i], n, n)
                self._rows_alone.sync(row)
                wanted.append((i, row, cap))
            return self._draft(wanted, len(sampled_token_ids))
        finally:
            self._rows_alone.reset()

    def _draft(self, wanted: list[tuple[int, Row, int]], num_rows: int) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in range(num_rows)]
        if not wanted:
            return drafts
        max_cap = max(cap for _, _, cap in wanted)
        trees = self.drafter.draft_batch([row.req_id for _, row, _ in wanted], max_cap)
        counts = self.figures["draft_length_counts"]
        for (i, _, cap), tree in zip(wanted, trees):
            chain = tree if tree.is_chain() else tree.best_path()
            tokens = [int(t) for t in chain.token_ids[:cap]]
            if any(t < 0 or t >= self.vocab_size for t in tokens):
                raise ValueError(f"drafter proposed a token outside the vocabulary "
                                 f"(0..{self.vocab_size - 1}): {tokens}")
            drafts[i] = tokens
            counts[len(tokens)] += 1
            if tokens:
                self.figures["proposed_drafts"] += 1
                self.figures["proposed_draft_tokens"] += len(tokens)
        self.figures["rows"] += len(wanted)
        return drafts

    def _failed(self, error: Exception) -> None:
        self.figures["errors"] += 1
        try:
            self.drafter.count_error()
        except Exception:  # noqa: BLE001
            pass
        if not self._error_logged:
            self._error_logged = True
            self.log.error("specdraft: proposer failed; this step goes on without drafts and the "
                           "drafter's request state is rebuilt from vLLM's. Later failures are "
                           "only counted (specdraft:errors_total).", exc_info=error)
        self._finished.clear()
        self.requests.reset()

    def _publish(self) -> None:
        if self.writer is None:
            return
        now = time.monotonic()
        if now - self._drafter_figures_at > 0.2:
            self._drafter_figures_at = now
            try:
                m = self.drafter.metrics()
                self._drafter_figures = {k: m[k] for k in _DRAFTER_FIGURES if k in m}
            except Exception:  # noqa: BLE001 - figures are best effort
                self._drafter_figures = {}
        stats = self.drafter.stats
        self.writer.publish({
            **self._drafter_figures, **self.figures,
            "draft_length_counts": list(self.figures["draft_length_counts"]),
            "requests_started": stats.requests, "requests_finished": stats.finished,
            "requests_aborted": stats.aborted, "tracked": self.tracked,
            "strategy": self.options.get("strategy"),
            "num_speculative_tokens": self.num_speculative_tokens})


# Figures taken from the drafter's metrics(); the rest are counted here, as vLLM saw them.
_DRAFTER_FIGURES = ("global_cache_tokens", "global_cache_nodes", "global_cache_bytes",
                    "live_requests", "native")


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
    """specdraft's figures for an offline ``vllm.LLM`` (what /metrics shows when serving).

    ``wait_for(snapshot) -> bool`` waits until the worker's figures satisfy it (they trail the
    engine by a fraction of a second).
    """
    adapter = vllm_adapter()
    spec = llm.llm_engine.vllm_config.speculative_config
    metrics_dir = getattr(spec, adapter.METRICS_DIR_ATTR, None)
    if wait_for is None:
        return read_snapshot(metrics_dir)
    return wait_for_snapshot(metrics_dir, wait_for, timeout)
