"""specdraft as a vLLM 0.34 speculator: each ``propose`` call mapped onto one ``SpecDrafter.step``.

Per step, one device-to-host copy brings, for every row, its length, the tokens it emitted this
step and its last K + 1 tokens (a gather on the device; more only for a request the drafter has
not seen, once). That copy waits for the step's sampling: with async scheduling it is the one
host sync specdraft adds per step (``transfer``; docs/vllm.md; integration_tests/gpu/
host_sync_cost.py measures it). The drafter's answer goes back as one pinned host-to-device copy.

Drafts are fixed width, as vLLM 0.34 verifies them: a row's draft fills its first slots, the
rest repeat the last sampled token (as vLLM's own suffix speculator pads), and
``draft_token_confidence_probs`` is 1 for drafted slots and 0 for padding, so adaptive
verification trims exactly what the controller did not draft. Without adaptive verification
every slot is scored anyway, so specdraft drafts the whole budget unless ``adaptive`` is set in
``speculator_options``.

A failure never reaches the engine: the step goes on with padding only (confidence 0), the
failure is counted and logged once, and the drafter's state is rebuilt from the engine's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator

from specdraft.adapters.vllm_step import (NO_LIMIT, ends_in_step_rows, record_failure,
                                          stop_token_ids, verified_counts)
from specdraft.adapters.vllm_v0_34.transfer import drafts_to_device, rows_to_host, window_offsets
from specdraft.proposers.base import accepted_counts


class RequestRule:
    """What a row's step needs of its request, read once from its SamplingParams."""

    __slots__ = ("speculates", "max_tokens", "stops")

    def __init__(self, speculates: bool = True, max_tokens: int | None = None,
                 stops: Any = ()):
        self.speculates = speculates
        self.max_tokens = max_tokens
        self.stops = stops


_DEFAULT_RULE = RequestRule()


class SpecdraftSpeculator(BaseSpeculator):
    def __init__(self, vllm_config: Any, device: torch.device, req_states: Any = None):
        from specdraft.adapters import vllm_adapter
        from specdraft.adapters.vllm_v0_34.runner import install_request_params
        from specdraft.plugins import vllm as proposers
        from specdraft.plugins.vllm_metrics import SnapshotWriter

        self.adapter = vllm_adapter()
        self.log = self.adapter.logger()
        self.device = device
        self.req_states = req_states
        facts = self.adapter.engine_facts(vllm_config)
        spec = vllm_config.speculative_config
        self.num_speculative_tokens = k = facts.num_speculative_tokens
        self.max_model_len = facts.max_model_len
        self.vocab_size = facts.vocab_size
        if facts.options is None:
            self.log.info("specdraft: no options from process 0; using defaults")
        self.options = proposers.SpecdraftProposer.resolve_options(facts.options)
        self.adaptive_verification = bool(getattr(spec, "enable_adaptive_verification", False))
        drafter_options = dict(self.options)
        if not self.adaptive_verification:
            # every slot is scored: a shorter draft saves nothing
            drafter_options.setdefault("adaptive", False)
        drafter_options.setdefault("cost_model", self.adapter.cost_model_preset(vllm_config))
        self._drafter_args = (drafter_options, vllm_config)
        self.drafter = self._build_drafter(*self._drafter_args)
        max_num_reqs = int(vllm_config.scheduler_config.max_num_seqs)
        pin = torch.device(device).type == "cuda"
        self.drafts = torch.zeros((max_num_reqs, k), dtype=torch.int64, device=device)
        self.draft_token_confidence_probs = torch.zeros((max_num_reqs, k), dtype=torch.float32,
                                                        device=device)
        self._host_drafts = torch.zeros((max_num_reqs, k), dtype=torch.int64, pin_memory=pin)
        self._host_conf = torch.zeros((max_num_reqs, k), dtype=torch.float32, pin_memory=pin)
        self._window = window_offsets(k, device)
        # per request-state slot (vLLM's req_states index), for the request in it
        self.pending: dict[str, RequestRule] = {}  # new_request -> add_request
        self.held = np.full(max_num_reqs, -1, dtype=np.int64)   # tokens the drafter holds
        self.sent = np.zeros(max_num_reqs, dtype=np.int64)      # draft tokens handed over
        self.speculates = np.ones(max_num_reqs, dtype=bool)
        self.max_tokens = np.full(max_num_reqs, NO_LIMIT, dtype=np.int64)
        self.stops = np.full((max_num_reqs, 1), -1, dtype=np.int64)  # padded with -1
        self.ended: set[str] = set()            # finished in the step that ended them
        self.clock = time.perf_counter          # step timings for the controller's cost model
        self._last_propose: float | None = None
        self._error_logged = False
        self.counters = {"steps": 0, "proposer_seconds": 0.0, "rows": 0, "drafts": 0,
                         "draft_tokens": 0, "accepted_tokens": 0, "proposed_drafts": 0,
                         "proposed_draft_tokens": 0, "errors": 0}
        self._length_counts = np.zeros(k + 1, dtype=np.int64)
        self._lengths: list[np.ndarray] = []   # each step's draft lengths, counted in bulk
        self._verified: list[tuple] = []  # (accepted, drafted) of recent steps, not yet counted
        self._offsets = np.arange(max_num_reqs + 1, dtype=np.int64) * (k + 1)
        self.hook_problem = install_request_params()
        if self.hook_problem is not None:
            self.log.warning("specdraft: %s; requests draft without tenant scope, opt-out or "
                             "stop rules", self.hook_problem)
        self.writer = (SnapshotWriter(facts.metrics_dir, source=self._snapshot)
                       if facts.metrics_dir and facts.tp_rank == 0 else None)
        self.log.info("specdraft: speculator drafting up to %d tokens a row, fixed width, "
                      "adaptive verification %s (options %s)", k,
                      "on" if self.adaptive_verification else "off", self.options)

    def _build_drafter(self, options: dict, vllm_config: Any) -> Any:
        from specdraft.proposers import make_drafter

        tokenizer = (self.adapter.load_tokenizer(vllm_config)
                     if options.get("corpus_files") else None)
        return make_drafter(options, chain_only=True, vocab_size=self.vocab_size,
                            tokenizer=tokenizer)

    # -- vLLM's lifecycle hooks ----------------------------------------------------------------
    def init_cudagraph_manager(self, cudagraph_mode: Any) -> None:
        del cudagraph_mode  # nothing runs on the device but two copies and a gather

    def capture(self) -> None:
        return None

    def new_request(self, req_id: str, sampling_params: Any) -> None:
        """From the runner patch, before the runner adds the request: its scope and rules."""
        from specdraft.proposers.config import request_speculates

        extra = getattr(sampling_params, "extra_args", None)
        self.pending[req_id] = RequestRule(
            request_speculates(extra), getattr(sampling_params, "max_tokens", None),
            sorted(stop_token_ids(sampling_params)) if sampling_params is not None else ())
        if not self.drafter.has(req_id):
            self.drafter.set_scope(req_id, self.adapter.request_scope(sampling_params))

    def add_request(self, req_index: int) -> None:
        """vLLM gave a request slot ``req_index``: its rules move there (a preempted request
        comes back in a new slot; the drafter then reads its history again from the start)."""
        req_id = self.req_states.index_to_req_id.get(req_index)
        rule = self.pending.pop(req_id, None) or _DEFAULT_RULE
        self.held[req_index] = -1
        self.sent[req_index] = 0
        self.speculates[req_index] = rule.speculates
        self.max_tokens[req_index] = NO_LIMIT if rule.max_tokens is None else rule.max_tokens
        stops = list(rule.stops) or [-1]
        if len(stops) > self.stops.shape[1]:
            self.stops = np.pad(self.stops, ((0, 0), (0, len(stops) - self.stops.shape[1])),
                                constant_values=-1)
        self.stops[req_index] = -1
        self.stops[req_index, :len(stops)] = stops

    def on_requests_finished(self, finished_req_ids: Any) -> None:
        """Requests that ended: those the step that ended them already finished are forgotten;
        the rest (aborted, or stopped by a stop string, which vLLM implements as an abort) leave
        the drafter without entering the global cache."""
        try:
            for req_id in finished_req_ids:
                self.pending.pop(req_id, None)
                if req_id in self.ended:
                    self.ended.discard(req_id)
                elif self.drafter.has(req_id):
                    self.drafter.abort(req_id)
        except Exception as e:  # noqa: BLE001 - a proposer failure must not reach the engine
            self._failed(e)

    def reset_state(self) -> None:
        """After warm-up: forget every request and the global cache."""
        self.drafter = self._build_drafter(*self._drafter_args)
        self.pending.clear()
        self.ended.clear()
        self.held[:] = -1
        self.sent[:] = 0
        self._last_propose = None

    # -- the step ------------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, input_batch: Any, attn_metadata: Any, slot_mappings: Any,
                last_hidden_states: Any, aux_hidden_states: Any, num_sampled: torch.Tensor,
                num_rejected: torch.Tensor, last_sampled: torch.Tensor,
                next_prefill_tokens: Any, temperature: Any, seeds: Any, dp_sync_state: Any = None,
                dummy_run: bool = False, skip_attn_for_dummy_run: bool = False,
                mm_inputs: Any = None, is_profile: bool = False,
                num_speculative_tokens: int | None = None) -> torch.Tensor:
        num_reqs = input_batch.num_reqs
        if dummy_run or is_profile:
            return self.drafts[:num_reqs]
        start = time.perf_counter()
        try:
            self._propose(input_batch, num_sampled, num_speculative_tokens)
        except Exception as e:  # noqa: BLE001 - a proposer failure must not reach the engine
            self._failed(e)
            idx = input_batch.idx_mapping[:num_reqs]
            self.drafts[:num_reqs] = last_sampled.view(-1)[idx].unsqueeze(1)
            self.draft_token_confidence_probs[:num_reqs] = 0.0
        self.counters["steps"] += 1
        self.counters["proposer_seconds"] += time.perf_counter() - start
        if self.writer is not None:
            self.writer.publish()
        return self.drafts[:num_reqs]

    def _propose(self, input_batch: Any, num_sampled: torch.Tensor,
                 num_speculative_tokens: int | None) -> None:
        k = self.num_speculative_tokens
        num_reqs = input_batch.num_reqs
        budget = k if num_speculative_tokens is None else max(0, min(k, num_speculative_tokens))
        states = self.req_states
        history = states.all_token_ids.gpu
        idx = input_batch.idx_mapping[:num_reqs]
        packed = rows_to_host(history, states.total_len.gpu, idx, num_sampled[:num_reqs],
                              self._window)  # the host sync
        now = self.clock()
        seconds = None if self._last_propose is None else now - self._last_propose
        self._last_propose = now
        slots = np.asarray(input_batch.idx_mapping_np[:num_reqs], dtype=np.int64)
        self.step(input_batch.req_ids[:num_reqs], slots, packed[:, 0], packed[:, 1],
                  packed[:, 2:], states.prompt_len.np[slots],
                  getattr(input_batch, "num_draft_tokens_per_req", None), budget,
                  int(getattr(input_batch, "num_tokens", 0)), seconds,
                  lambda j, n: history[int(slots[j]), :n].cpu().numpy())
        drafts_to_device(self._host_drafts, self.drafts, self._host_conf,
                         self.draft_token_confidence_probs if self.adaptive_verification else None,
                         num_reqs)

    def step(self, req_ids: list, slots: np.ndarray, num_tokens: np.ndarray,
             emitted: np.ndarray, window: np.ndarray, num_prompt: np.ndarray,
             scheduled_drafts: Any, budget: int, scored_tokens: int, seconds: float | None,
             full_history: Any) -> None:
        """One step on host arrays, without a Python loop over rows in the common case: rows
        that emitted tokens (others are mid-prefill) into ``SpecDrafter.step``, drafts into the
        pinned host buffers. ``window[j]`` holds row j's last K + 1 tokens, which is all a row
        brings in a step; ``full_history(j, n)`` the first ``n`` (a request the drafter does not
        hold, or one that moved on by more than the window)."""
        drafter = self.drafter
        width = window.shape[1]
        every = bool((emitted > 0).all())
        if every:  # the common case: no copies
            rows, s, n, e, w, prompt = None, slots, num_tokens, emitted, window, num_prompt
            ids = req_ids if isinstance(req_ids, list) else list(req_ids)
        else:  # rows mid-prefill emit nothing and are left out
            rows = np.flatnonzero(emitted > 0)
            s, n, e, w, prompt = slots[rows], num_tokens[rows], emitted[rows], window[rows], \
                num_prompt[rows]
            ids = [req_ids[j] for j in rows.tolist()]
        held = self.held[s]
        drafted = self.sent[s]
        if scheduled_drafts is not None:  # vLLM may have verified fewer slots than sent
            sd = np.asarray(scheduled_drafts)
            drafted = np.minimum(drafted, sd if every else sd[rows])
        accepted = accepted_counts(e, drafted)
        done = ends_in_step_rows(n - prompt, n, self.max_tokens[s], self.stops[s], w, e,
                                 self.max_model_len)
        budgets = np.where(self.speculates[s] & ~done, budget, 0)
        # history to hand over: each row's last K + 1 tokens, of which the drafter reads the ones
        # it has not seen; a request it does not hold (new, or after a failure) or one that moved
        # on by more than the window needs its whole history, once
        far = ((n - held) > width) | (n < held) | (n < width)
        if far.any():
            batch_rows = range(len(e)) if every else rows.tolist()
            parts = [full_history(j, int(m)) if f else t
                     for j, m, f, t in zip(batch_rows, n.tolist(), far.tolist(), w)]
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            tokens = np.concatenate(parts).astype(np.int32)
        else:
            offsets = self._offsets[:len(e) + 1] if len(e) < len(self._offsets) else \
                np.arange(len(e) + 1, dtype=np.int64) * width
            tokens = w.astype(np.int32).ravel()
        if seconds is not None and scored_tokens > 0:
            drafter.report_step(scored_tokens, seconds)
        out = drafter.step(ids, tokens, n, prompt, budgets, token_offsets=offsets,
                           num_accepted=accepted, num_emitted=e, max_len=self.max_model_len - 1)
        self.held[s] = n
        lengths = out.lengths
        self.sent[s] = lengths
        if done.any():  # into the global cache now, not at vLLM's finish notice
            for j in np.flatnonzero(done).tolist():
                if drafter.has(ids[j]):
                    drafter.finish(ids[j])
                self.ended.add(ids[j])
        # fixed width: the draft, then the last token repeated; confidence 1 where drafted
        n_rows = len(num_tokens)
        host = self._host_drafts[:n_rows].numpy()
        conf = self._host_conf[:n_rows].numpy()
        host[:] = window[:, -1:]
        conf[:] = 0.0
        if out.tokens.size:
            r_idx = np.repeat(np.arange(len(e)) if every else rows, lengths)
            c_idx = np.arange(out.tokens.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            host[r_idx, c_idx] = out.tokens
            conf[r_idx, c_idx] = 1.0
        c = self.counters
        c["rows"] += len(ids)
        c["proposed_draft_tokens"] += int(out.tokens.size)
        self._lengths.append(lengths)
        self._verified.append((accepted, drafted))
        if len(self._lengths) >= 256:
            self._count()

    def read_counters(self) -> dict:
        """The counters, bulk counts included."""
        self._count()
        return dict(self.counters)

    def _count(self) -> None:
        """Counters kept per step in bulk (as the 0.32 proposer keeps its draft lengths)."""
        if not self._lengths:
            return
        k = self.num_speculative_tokens
        lengths = np.concatenate(self._lengths)
        accepted, drafted = (np.concatenate(a) for a in zip(*self._verified))
        self._lengths, self._verified = [], []
        c = self.counters
        c["proposed_drafts"] += int(np.count_nonzero(lengths))
        drafts, draft_tokens, accepted_tokens = verified_counts(accepted, drafted)
        c["drafts"] += drafts
        c["draft_tokens"] += draft_tokens  # specdraft's own tokens (vLLM verifies K wide)
        c["accepted_tokens"] += accepted_tokens
        self._length_counts += np.bincount(np.minimum(lengths, k), minlength=k + 1)

    def drafts_of(self, num_rows: int) -> list[list[int]]:
        """The last step's drafts as lists (the real tokens of each row, without padding)."""
        host = self._host_drafts[:num_rows].numpy()
        conf = self._host_conf[:num_rows].numpy()
        return [host[j, :int(np.count_nonzero(conf[j]))].tolist() for j in range(num_rows)]

    # -- failures and counters -----------------------------------------------------------------
    def _failed(self, error: Exception) -> None:
        self.held[:] = -1  # the drafter reads every request's history again
        self.sent[:] = 0
        record_failure(self, error, "speculator")

    def _snapshot(self) -> dict:
        from specdraft.plugins.vllm import _DRAFTER_COUNTERS

        self._count()
        try:
            m = self.drafter.metrics()
            drafter = {key: m[key] for key in _DRAFTER_COUNTERS if key in m}
        except Exception:  # noqa: BLE001 - counters are best effort
            drafter = {}
        stats = self.drafter.counters
        return {**drafter, **self.counters,
                "draft_length_counts": self._length_counts.tolist(),
                "requests_started": stats.requests, "requests_finished": stats.finished,
                "requests_aborted": stats.aborted, "tracked": True,
                "strategy": self.options.get("strategy"),
                "num_speculative_tokens": self.num_speculative_tokens}
