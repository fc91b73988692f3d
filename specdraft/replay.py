"""``specdraft replay``: exact acceptance of every drafting method on recorded greedy traces.

No model runs. A trace records, per request in arrival order, the prompt and the target's greedy
output. Under greedy verification a draft's fate is fully determined by that output: at each step
the method drafts from the context so far, the accepted length is the longest prefix of the draft
(for a tree, the longest root path) that matches the recorded continuation, and the target adds
one token of its own. So the number of target passes, drafted and accepted tokens are exactly
what the engine would see, and a cost model turns them into an estimated speedup.

The step sequence mirrors vLLM: prefill emits the first output token without a draft; from then
on every pass verifies the draft proposed after the previous pass. Each workload is replayed on
its own (a fresh method per workload and batch size), with up to B requests in flight
(``replay_batched``): the methods see requests start and end in trace order, and specdraft's
adaptive controller sizes drafts for the whole batch under the chosen cost model (by default the
GPU preset for the trace's model size; ``--cost-model medium`` for an 8B shape).

Figures (names as vLLM uses them):

- tokens per pass: output tokens / target passes (prefill passes included), what sets the
  speedup when verification is cheap;
- mean acceptance length (MAL): 1 + accepted / drafts, vLLM's definition (a step without a
  draft does not count);
- drafted per accepted: draft tokens sent per draft token accepted (waste);
- est. speedup at batch B: cost of the same schedule without drafts / cost with drafts, each
  pass priced by the cost model for its batch (requests, contexts, tokens scored);
- drafted per step at batch B: draft tokens per decode row per pass (what the controller chose).

Methods: every specdraft strategy (adaptive and fixed-length), vLLM's own ``ngram`` proposer
function and arctic-inference's own ``SuffixDecodingCache`` (imported from their packages), and
Hugging Face's prompt-lookup candidate generator (imported from transformers).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Iterable

from specdraft.cli import parser as cli_parser
from specdraft.jsonl import located, read_jsonl, token_ids
from specdraft.proposers.controller import COST_MODELS, CostModel
from specdraft.results import write_results

TRACE_FIELDS = {"id": str, "prompt_token_ids": list, "output_token_ids": list}


# ----------------------------------------------------------------------------- traces
def _trace_vocab_size(rec: dict) -> int | None:
    """The vocabulary size in a recorded ``tokenizer`` stamp ("NAME:VOCAB:HASH"), if any."""
    parts = str(rec.get("tokenizer", "")).split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def _check_trace_record(rec) -> dict:
    if not isinstance(rec, dict):
        raise ValueError("expected a JSON object per line")
    for field, typ in TRACE_FIELDS.items():
        if field not in rec:
            raise ValueError(f"missing field {field!r}")
        if not isinstance(rec[field], typ):
            raise ValueError(f"field {field!r} must be a {typ.__name__}")
    vocab_size = _trace_vocab_size(rec)
    for field in ("prompt_token_ids", "output_token_ids"):
        token_ids(rec[field], field, vocab_size)
    if not rec["output_token_ids"]:
        raise ValueError("field 'output_token_ids' is empty")
    topk = rec.get("output_topk")  # specdraft record --top-k: the target's top-k per position
    if topk is not None:
        if not isinstance(topk, list) or len(topk) != len(rec["output_token_ids"]):
            raise ValueError("field 'output_topk' must be a list with one entry per output token")
        for row in topk:
            token_ids(row, "output_topk", vocab_size)
    max_tokens = rec.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                   or max_tokens < 1):
        raise ValueError(f"field 'max_tokens' must be an integer >= 1, got {json.dumps(max_tokens)}")
    scope = rec.get("scope")
    if scope is not None and not isinstance(scope, str):
        raise ValueError(f"field 'scope' must be a string or null, got {json.dumps(scope)}")
    rec.setdefault("workload", "default")
    rec.setdefault("session", None)
    return rec


def load_trace(path: str) -> list[dict]:
    """Records of a trace file; a bad line raises ValueError naming the file and line."""
    out = []
    for lineno, rec in read_jsonl(path):
        try:
            out.append(_check_trace_record(rec))
        except ValueError as e:
            raise located(path, lineno, e) from None
    if not out:
        raise ValueError(f"{path}: no records")
    return out


# ---------------------------------------------------------------------------- methods
class Method:
    """One drafting method driven through a trace: requests are keys, several may be in flight."""
    name = "method"

    def new_key(self) -> int:
        self._last_key = getattr(self, "_last_key", 0) + 1
        return self._last_key

    def start(self, key, prompt: list[int], scope: str | None = None) -> None:
        """``scope``: the record's tenant scope (specdraft replays each as its own pool; the
        peer methods have one global cache and ignore it)."""
    def extend(self, key, tokens: list[int], num_accepted: int | None) -> None: ...
    def draft(self, key, max_k: int) -> tuple[list[int], list[int]]:
        """(token_ids, parents) of the draft; a chain has parents i-1."""
        raise NotImplementedError

    def draft_batch(self, keys, max_k: int, batch: tuple | None = None) -> list[tuple[list[int], list[int]]]:
        """Drafts of the requests ``keys`` for one pass; ``batch`` = (requests, sum of contexts,
        longest context) of the whole pass (only a method that sizes drafts by cost reads it)."""
        return [self.draft(k, max_k) for k in keys]

    def finish(self, key) -> None: ...


class NoDraftMethod(Method):
    """No speculation: the schedule without drafts (the reference a replay is priced against)."""
    name = "no-drafts"

    def draft(self, key, max_k):
        return [], []


class SpecdraftMethod(Method):
    ends_in_step = True  # in an engine, specdraft's step finishes a request that reached its limit

    def __init__(self, name: str, options: dict, chain_only: bool = False):
        from specdraft.proposers import make_drafter
        self.name = name
        self.drafter = make_drafter(options, chain_only=chain_only)

    def start(self, key, prompt, scope=None):
        self.drafter.start(key, prompt, scope=scope)

    def extend(self, key, tokens, num_accepted):
        self.drafter.extend(key, tokens, num_accepted)

    def draft_batch(self, keys, max_k, batch=None):
        return [(t.token_ids, t.parents) for t in self.drafter.draft_batch(keys, max_k, batch)]

    def draft(self, key, max_k):
        return self.draft_batch([key], max_k)[0]

    def report_step(self, tokens: int, seconds: float) -> None:
        self.drafter.report_step(tokens, seconds)

    def finish(self, key):
        self.drafter.finish(key)


class SpecdraftRecycleMethod(SpecdraftMethod):
    """specdraft's suffix drafts and, where the drafter sends none, a draft from the recycled
    top-k table (``proposers/recycle.py``): a chain of ``depth`` first choices, or with
    ``branching`` a tree (engines that verify trees). The replay feeds the table the top-k of
    every position it emits (``observe_topk``, from traces recorded with ``--top-k``); a
    request's tokens reach the drafter's controller as usual, a recycled draft's acceptance is
    not reported to it (it did not size that draft)."""

    def __init__(self, name: str, options: dict, chain_only: bool = False, depth: int = 2,
                 branching: tuple[int, ...] | None = None, top_k: int = 8):
        from specdraft.proposers.recycle import RecycleTable

        super().__init__(name, options, chain_only=chain_only)
        self.table = RecycleTable(top_k)
        self.depth, self.branching = depth, branching
        self._last: dict = {}  # key -> the request's last token
        self._recycled: set = set()  # keys whose pending draft came from the table

    def start(self, key, prompt, scope=None):
        super().start(key, prompt, scope)
        self._last[key] = prompt[-1]

    def observe_topk(self, key, tokens, topk):
        """``tokens`` were emitted at positions whose target top-k were ``topk``: each
        position's input is the token before it."""
        self.table.update([self._last[key]] + list(tokens[:-1]), topk)

    def extend(self, key, tokens, num_accepted):
        if key in self._recycled:
            self._recycled.discard(key)
            num_accepted = None
        super().extend(key, tokens, num_accepted)
        if tokens:
            self._last[key] = tokens[-1]

    def draft_batch(self, keys, max_k, batch=None):
        out = super().draft_batch(keys, max_k, batch)
        for i, key in enumerate(keys):
            if out[i][0] or max_k <= 0:
                continue
            last = self._last[key]
            t = (self.table.tree(last, self.branching, max_k) if self.branching
                 else self.table.chain(last, min(self.depth, max_k)))
            if t.token_ids:
                out[i] = (t.token_ids, t.parents)
                self._recycled.add(key)
        return out

    def finish(self, key):
        super().finish(key)
        self._last.pop(key, None)
        self._recycled.discard(key)


class OracleMethod(Method):
    """Drafts the target's own continuation (all accepted), ``length`` tokens a step; or with
    ``pass_cost(rows, tokens) -> seconds`` and no length, each step the length (the same for
    every row) that emits the most tokens per second of that pass. ``truths``: each prompt's
    continuation, keyed by the prompt's tokens."""
    ends_in_step = True

    def __init__(self, length: int | None, truths: dict, pass_cost=None):
        self.name = f"oracle-{length or 'per-step'}"
        self.length, self.truths, self.pass_cost = length, truths, pass_cost
        self._req: dict = {}  # key -> [continuation, tokens emitted]

    def draft_batch(self, keys, max_k, batch=None):
        if self.length is None and keys:
            rows = len(keys)
            self._step_length = max(range(max_k + 1), key=lambda n: rows * (n + 1) / (
                self.pass_cost(rows, rows * (n + 1)) or float("inf")))
        return [self.draft(k, max_k) for k in keys]

    def start(self, key, prompt, scope=None):
        self._req[key] = [self.truths[tuple(prompt)], 0]

    def extend(self, key, tokens, num_accepted):
        self._req[key][1] += len(tokens)

    def draft(self, key, max_k):
        truth, pos = self._req[key]
        length = self.length if self.length is not None else self._step_length
        toks = truth[pos:pos + min(length, max_k)]
        return toks, list(range(-1, len(toks) - 1))

    def finish(self, key):
        self._req.pop(key, None)


class VllmNgramMethod(Method):
    """vLLM's ``ngram`` proposer: its own numba function, as its NgramProposer calls it.

    n-gram sizes 2..5, as `specdraft bench` configures it live (vLLM defaults to 5..5 when neither
    is given).
    """

    def __init__(self, name: str, prompt_lookup_min: int = 2, prompt_lookup_max: int = 5,
                 max_model_len: int = 1 << 30):
        import numpy as np

        from specdraft.adapters import vllm_adapter
        self.name = name
        self._np = np
        self._fn = vllm_adapter().ngram_match_function()
        self.min_n, self.max_n, self.max_model_len = prompt_lookup_min, prompt_lookup_max, max_model_len
        self._bufs: dict = {}  # key -> [buffer, length]

    def start(self, key, prompt, scope=None):
        self._bufs[key] = [self._np.zeros(1024, dtype=self._np.int32), 0]
        self._append(key, prompt)

    def _append(self, key, tokens):
        np = self._np
        st = self._bufs[key]
        buf, n = st
        need = n + len(tokens)
        if need > len(buf):
            grown = np.zeros(max(need, 2 * len(buf)), dtype=np.int32)
            grown[:n] = buf[:n]
            st[0] = buf = grown
        buf[n:need] = tokens
        st[1] = need

    def extend(self, key, tokens, num_accepted):
        self._append(key, tokens)

    def draft(self, key, max_k):
        buf, n = self._bufs[key]
        d = self._fn(buf[:n], self.min_n, self.max_n, self.max_model_len, max_k)
        toks = [int(t) for t in d]
        return toks, list(range(-1, len(toks) - 1))

    def finish(self, key):
        del self._bufs[key]


class ArcticSuffixMethod(Method):
    """arctic-inference's SuffixDecodingCache, driven the way vLLM's ``suffix`` method drives it."""

    def __init__(self, name: str, max_tree_depth: int = 24, max_cached_requests: int = 10000,
                 max_spec_factor: float = 1.0, min_token_prob: float = 0.1):
        import numpy as np
        from arctic_inference.suffix_decoding import SuffixDecodingCache
        self.name = name
        self._np = np
        self.cache = SuffixDecodingCache(max_tree_depth=max_tree_depth,
                                         max_cached_requests=max_cached_requests)
        self.depth, self.factor, self.min_prob = max_tree_depth, max_spec_factor, min_token_prob
        self._tokens: dict = {}
        self._prompt: dict = {}

    def start(self, key, prompt, scope=None):
        self._tokens[key] = list(prompt)
        self._prompt[key] = list(prompt)

    def extend(self, key, tokens, num_accepted):
        rid = str(key)
        prompt = self._prompt.pop(key, None)
        if prompt is not None:  # vLLM starts the request when the first token is sampled
            self.cache.start_request(rid, self._np.asarray(prompt, dtype=self._np.int32))
        self.cache.add_active_response(rid, list(tokens))
        self._tokens[key].extend(tokens)

    def draft(self, key, max_k):
        pattern = self._np.asarray(self._tokens[key][-self.depth:], dtype=self._np.int32)
        d = self.cache.speculate(str(key), pattern, max_spec_tokens=max_k,
                                 max_spec_factor=self.factor, min_token_prob=self.min_prob)
        return list(d.token_ids), list(d.parents)

    def finish(self, key):
        self.cache.stop_request(str(key))
        del self._tokens[key]


class HFPromptLookupMethod(Method):
    """Hugging Face's prompt lookup decoding (transformers' PromptLookupCandidateGenerator)."""

    def __init__(self, name: str, max_matching_ngram_size: int = 2):
        import torch
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
        self.name = name
        self._torch = torch
        self._cls = PromptLookupCandidateGenerator
        self.ngram = max_matching_ngram_size
        self._tokens: dict = {}

    def start(self, key, prompt, scope=None):
        self._tokens[key] = list(prompt)

    def extend(self, key, tokens, num_accepted):
        self._tokens[key].extend(tokens)

    def draft(self, key, max_k):
        if max_k <= 0:
            return [], []
        tokens = self._tokens[key]
        gen = self._cls(num_output_tokens=max_k, max_matching_ngram_size=self.ngram,
                        max_length=len(tokens) + max_k + 1)
        ids = self._torch.tensor([tokens], dtype=self._torch.long)
        cand, _ = gen.get_candidates(ids)
        toks = cand[0, len(tokens):].tolist()
        return toks, list(range(-1, len(toks) - 1))

    def finish(self, key):
        del self._tokens[key]


def _specdraft(name: str, chain_only: bool = False, method=SpecdraftMethod, **options):
    """A specdraft method's factory; ``method`` (a class, or a partial of one) takes
    (name, options, chain_only=...)."""
    def make(cost_model=None, overrides: dict | None = None):
        opts = {**options, **(overrides or {})}
        if cost_model is not None:
            opts["cost_model"] = cost_model
        return method(name, opts, chain_only=chain_only)
    make.specdraft = True  # takes option overrides (--specdraft-options)
    return make


METHODS = {
    "specdraft-suffix": _specdraft("specdraft-suffix", strategy="suffix"),
    "specdraft-suffix-fixed": _specdraft("specdraft-suffix-fixed", strategy="suffix", adaptive=False),
    "specdraft-tree": _specdraft("specdraft-tree", strategy="tree"),
    "specdraft-tree-fixed": _specdraft("specdraft-tree-fixed", strategy="tree", adaptive=False),
    # the tree reduced to its best path, as specdraft runs in chain-verifying engines (vLLM)
    "specdraft-tree-path": _specdraft("specdraft-tree-path", chain_only=True, strategy="tree"),
    "specdraft-lookup": _specdraft("specdraft-lookup", strategy="lookup"),
    # target-logit recycling where the suffix draft is empty (traces recorded with --top-k)
    "specdraft-recycle": _specdraft("specdraft-recycle", chain_only=True, strategy="suffix",
                                    method=partial(SpecdraftRecycleMethod, depth=2)),
    "specdraft-recycle-tree": _specdraft("specdraft-recycle-tree", strategy="tree",
                                         method=partial(SpecdraftRecycleMethod,
                                                        branching=(4, 2, 1))),
    "vllm-ngram": lambda cost_model=None: VllmNgramMethod("vllm-ngram"),
    "arctic-suffix": lambda cost_model=None: ArcticSuffixMethod("arctic-suffix"),
    "hf-prompt-lookup": lambda cost_model=None: HFPromptLookupMethod("hf-prompt-lookup"),
    "no-drafts": lambda cost_model=None: NoDraftMethod(),
}
DEFAULT_METHODS = ["specdraft-suffix", "specdraft-suffix-fixed", "specdraft-tree",
                   "specdraft-tree-path", "specdraft-lookup", "vllm-ngram", "arctic-suffix", "hf-prompt-lookup"]


# ----------------------------------------------------------------------------- replay
def accepted_length(tokens: list[int], parents: list[int], truth: list[int]) -> int:
    """Longest root path of the draft that matches ``truth`` (the recorded continuation)."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    node, depth = -1, 0
    while depth < len(truth):
        nxt = next((c for c in children.get(node, ()) if tokens[c] == truth[depth]), None)
        if nxt is None:
            break
        node, depth = nxt, depth + 1
    return depth


def _start(method: Method, key, prompt: list[int], scope: str | None) -> None:
    if scope is None:  # methods written before scopes take (key, prompt)
        method.start(key, prompt)
    else:
        method.start(key, prompt, scope)


def replay_request(method: Method, prompt: list[int], output: list[int], max_k: int,
                   limit: int | None = None, scope: str | None = None) -> dict:
    """Replay one request alone; ``limit`` is the live generation limit when the recorded output
    extends past it (record --lookahead), so drafts in the last step can be judged as vLLM did."""
    limit = len(output) if limit is None else min(limit, len(output))
    key = method.new_key()
    _start(method, key, prompt, scope)
    method.extend(key, output[:1], None)  # prefill: one pass, no draft
    passes, drafted, accepted, drafts = 1, 0, 0, 0
    pass_sizes = [1]
    pos = 1
    while pos < limit:
        toks, parents = method.draft(key, max_k)
        if len(toks) > max_k:
            raise RuntimeError(f"{method.name} drafted {len(toks)} > {max_k} tokens")
        acc = accepted_length(toks, parents, output[pos:]) if toks else 0
        acc = min(acc, len(output) - pos - 1)  # the last recorded token is the target's own
        emitted = output[pos:pos + acc + 1]
        passes += 1
        drafted += len(toks)
        drafts += bool(toks)
        accepted += acc
        pass_sizes.append(1 + len(toks))
        pos += len(emitted)
        method.extend(key, emitted, acc if toks else None)
    method.finish(key)
    return {"target_passes": passes, "drafted_tokens": drafted, "accepted_tokens": accepted,
            "drafts": drafts, "output_tokens": limit, "pass_sizes": pass_sizes}


# ----------------------------------------------------------------------- batched replay
def output_limit(rec: dict, n_out: int) -> int:
    """Tokens a request generates: its live limit, within the recorded output."""
    return min(rec.get("max_tokens") or n_out, n_out)


class _InFlight:
    __slots__ = ("key", "rec", "prompt", "output", "limit", "pos", "session")

    def __init__(self, key, rec, prompt, output, session):
        self.key, self.rec, self.prompt, self.output, self.session = key, rec, prompt, output, session
        self.limit = output_limit(rec, len(output))
        self.pos = 0  # output tokens emitted so far


def batch_queue(records: list[dict], batch: int) -> list[tuple[list[int], list[int], dict, object]]:
    """The requests a batch of ``batch`` replays: (prompt, output, record, session), in arrival
    order. A trace with fewer requests than the batch is repeated, each repetition in its own
    block of token ids (ids shifted by a multiple of the trace's largest id + 1): a copy is the
    same request in a disjoint vocabulary, so no copy can draft from another (its recorded
    top-k, if any, shifted with it)."""
    vocab = 1 + max(max(r["prompt_token_ids"] + r["output_token_ids"]
                        + [t for row in r.get("output_topk") or () for t in row])
                    for r in records)
    copies = -(-batch // len(records))
    out = []
    for c in range(copies):
        shift = c * vocab
        for r in records:
            rec = r
            if c and r.get("output_topk") is not None:
                rec = dict(r, output_topk=[[t + shift for t in row] for row in r["output_topk"]])
            out.append(([t + shift for t in r["prompt_token_ids"]],
                        [t + shift for t in r["output_token_ids"]], rec,
                        None if r.get("session") is None else (c, r["session"])))
    return out


def replay_batched(method: Method, records: list[dict], max_k: int, batch: int, cost,
                   baseline: float | None = None) -> dict:
    """Replay ``records`` with up to ``batch`` requests in flight through one method instance.

    Requests start in arrival order as slots free; a later turn of a session waits until the
    session's earlier turns have ended (its prompt holds their output). Each step is one target
    pass over every request in flight: a new request's prefill emits its first token without a
    draft, the others verify the draft proposed for them this step (the method sees the whole
    batch: B requests and their contexts). ``cost`` (a ``CostModel``) prices each pass with its
    base prediction; the same schedule without drafts (one token per request per pass) gives
    the baseline (``baseline``, when the caller has it already: it does not depend on the
    method), and est. speedup = baseline cost / cost with drafts (equal tokens emitted).
    """
    queue = batch_queue(records, batch)
    num_requests = len(queue)
    output_tokens = sum(output_limit(r, len(o)) for _, o, r, _ in queue)
    waiting: list = []  # sessions with a turn in flight
    inflight: list[_InFlight] = []
    passes = drafted = accepted = drafts = decode_rows = cost_spec = 0
    steps = 0
    while queue or inflight:
        for prompt, output, rec, session in _admit(queue, batch - len(inflight), waiting):
            st = _InFlight(method.new_key(), rec, prompt, output, session)
            _start(method, st.key, prompt, rec.get("scope"))
            inflight.append(st)
        contexts = [len(q.prompt) + q.pos for q in inflight]
        shape = (len(inflight), float(sum(contexts)), float(max(contexts)))
        decoding = [q for q in inflight if q.pos > 0]
        ds = method.draft_batch([q.key for q in decoding], max_k, shape) if decoding else []
        tokens = len(inflight)
        for q, (toks, parents) in zip(decoding, ds):
            if len(toks) > max_k:
                raise RuntimeError(f"{method.name} drafted {len(toks)} > {max_k} tokens")
            acc = accepted_length(toks, parents, q.output[q.pos:]) if toks else 0
            acc = min(acc, len(q.output) - q.pos - 1)  # the last recorded token is the target's own
            emitted = q.output[q.pos:q.pos + acc + 1]
            _observe_topk(method, q, q.pos, emitted)
            drafted += len(toks)
            drafts += bool(toks)
            accepted += acc
            tokens += len(toks)
            q.pos += len(emitted)
            method.extend(q.key, emitted, acc if toks else None)
        decode_rows += len(decoding)
        for q in inflight:
            if q.pos == 0:  # prefill: one pass, no draft
                _observe_topk(method, q, 0, q.output[:1])
                q.pos = 1
                method.extend(q.key, q.output[:1], None)
        passes += len(inflight)
        steps += 1
        if cost is not None:
            cost_spec += cost.base_cost(tokens, *shape)
        for q in [q for q in inflight if q.pos >= q.limit]:
            method.finish(q.key)
            inflight.remove(q)
            if q.session is not None:
                waiting.remove(q.session)
    out = {"requests": num_requests, "steps": steps,
           "target_passes": passes, "drafted_tokens": drafted, "accepted_tokens": accepted,
           "drafts": drafts, "decode_passes": decode_rows, "output_tokens": output_tokens}
    if cost is not None:
        base = baseline if baseline is not None else baseline_cost(records, batch, cost)
        out["est_speedup"] = base / cost_spec if cost_spec else 1.0
    return out


def _observe_topk(method: Method, q: "_InFlight", pos: int, emitted: list[int]) -> None:
    """The target's top-k at the positions a pass emitted, to a method that recycles them.

    A trace holds the top-k along the output only: a pass also scores the positions after its
    rejected draft tokens, which an engine could recycle too and the replay cannot."""
    topk = q.rec.get("output_topk")
    observe = getattr(method, "observe_topk", None)
    if topk is not None and observe is not None:
        observe(q.key, emitted, topk[pos:pos + len(emitted)])


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


def replay_engine(method: Method, requests: list[tuple], max_k: int,
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
        budget = schedule.max_num_batched_tokens
        emitted_now: list[_Scheduled] = []
        for q in running:  # decoding requests: their token and their draft
            if q.computed < len(q.prompt):
                continue
            toks, parents = q.draft
            q.draft = ([], [])
            acc = accepted_length(toks, parents, q.truth[q.pos:]) if toks else 0
            acc = min(acc, len(q.truth) - q.pos - 1)  # the last known token is the target's own
            budget -= 1 + len(toks)
            drafted += len(toks)
            drafts += bool(toks)
            accepted += acc
            emitted = q.output[q.pos:q.pos + acc + 1]
            q.pos += len(emitted)
            method.extend(q.key, emitted, acc if toks else None)
            emitted_now.append(q)
        for q in running:  # partial prefills go on
            if budget > 0 and q.computed < len(q.prompt):
                budget -= _prefill(q, budget, method, emitted_now)
        admit = schedule.max_num_seqs
        if steps == 0 and schedule.first_step is not None:
            admit = min(admit, schedule.first_step)
        while waiting and budget > 0 and len(running) < admit:
            prompt, output, *truth = waiting.pop(0)
            cached = (_cached_prefix(prompt, seen, schedule.block_size)
                      if schedule.prefix_caching else 0)
            q = _Scheduled(method.new_key(), prompt, output, truth[0] if truth else output, cached)
            method.start(q.key, prompt)
            running.append(q)
            seen.append(prompt)
            budget -= _prefill(q, budget, method, emitted_now)
        steps += 1
        if pass_cost is not None:
            tokens = schedule.max_num_batched_tokens - budget
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
            for q, d in zip(drafting, method.draft_batch([q.key for q in drafting], max_k, shape)):
                if len(d[0]) > max_k:
                    raise RuntimeError(f"{method.name} drafted {len(d[0])} > {max_k} tokens")
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


def _prefill(q: _Scheduled, budget: int, method: Method, emitted_now: list) -> int:
    """One prefill chunk of ``q`` within ``budget``; its first token when the prompt is done."""
    n = min(budget, len(q.prompt) - q.computed)
    q.computed += n
    if q.computed == len(q.prompt):
        q.pos = 1
        method.extend(q.key, q.output[:1], None)
        emitted_now.append(q)
    return n


def _admit(queue: list, free: int, waiting: list) -> list:
    """Up to ``free`` queued requests that may start now, taken in arrival order: a later turn of
    a session waits while an earlier one is in flight (``waiting`` holds those sessions; the
    admitted requests' sessions are added). Queue items end with their session (or None)."""
    out = []
    while len(out) < free and queue:
        i = next((i for i, q in enumerate(queue) if q[-1] is None or q[-1] not in waiting), None)
        if i is None:
            break
        item = queue.pop(i)
        if item[-1] is not None:
            waiting.append(item[-1])
        out.append(item)
    return out


def baseline_cost(records: list[dict], batch: int, cost) -> float:
    """Cost of the same schedule without drafts: every pass emits one token per request."""
    queue = [(len(p), len(o), r, s) for p, o, r, s in batch_queue(records, batch)]
    waiting: list = []
    inflight: list[list] = []  # [prompt length, emitted, limit, session]
    total = 0.0
    while queue or inflight:
        for n_prompt, n_out, rec, session in _admit(queue, batch - len(inflight), waiting):
            inflight.append([n_prompt, 0, output_limit(rec, n_out), session])
        contexts = [q[0] + q[1] for q in inflight]
        total += cost.base_cost(len(inflight), len(inflight), float(sum(contexts)), float(max(contexts)))
        for q in inflight:
            q[1] += 1
        for q in [q for q in inflight if q[1] >= q[2]]:
            inflight.remove(q)
            if q[3] is not None:
                waiting.remove(q[3])
    return total


def _replay_method(factory, records: list[dict], max_k: int, workloads, cost_model, batches,
                   progress, specdraft_options: dict | None = None,
                   baselines: dict | None = None, advance=None) -> tuple[dict, float]:
    """Per workload: counts at batch 1, and each batch's est. speedup and draft length; each
    (workload, batch) run starts from a fresh method (its caches see only that workload).
    ``baselines`` keeps each (workload, batch)'s no-draft cost for the next method."""
    baselines = {} if baselines is None else baselines
    per_w = {}
    seconds = 0.0
    cm = CostModel(cost_model)
    for w in workloads:
        recs = [r for r in records if r["workload"] == w]
        agg = None
        for b in batches:
            if (w, b) not in baselines:  # the same for every method: not timed
                baselines[w, b] = baseline_cost(recs, b, cm)
            t0 = time.perf_counter()
            method = (factory(cost_model, specdraft_options) if getattr(factory, "specdraft", False)
                      else factory(cost_model))
            r = replay_batched(method, recs, max_k, b, cm, baselines[w, b])
            if b == batches[0]:
                seconds += time.perf_counter() - t0
            if agg is None:
                agg = {k: r[k] for k in ("requests", "target_passes", "drafted_tokens",
                                         "accepted_tokens", "drafts", "output_tokens")}
                agg["batch"] = {}
            agg["batch"][str(b)] = {
                "est_speedup": r["est_speedup"],
                "drafted_per_step": r["drafted_tokens"] / r["decode_passes"] if r["decode_passes"] else 0.0,
                "tokens_per_pass": r["output_tokens"] / r["target_passes"],
                "requests": r["requests"]}
        per_w[w] = agg
        if progress:
            progress(f"[replay]   {w}: done")
        if advance is not None:
            advance()
    return per_w, seconds


def default_cost_model(records: list[dict]) -> str:
    """The GPU preset for the size of the trace's model (from its name: "...-1.5b", "-135m")."""
    import re

    from specdraft.proposers.controller import preset_for_parameters
    sizes = []
    for r in records:
        m = re.search(r"(\d+(?:\.\d+)?)([bm])\b", str(r.get("model", "")).lower())
        if m:
            sizes.append(float(m.group(1)) * (1e9 if m.group(2) == "b" else 1e6))
    return preset_for_parameters(max(sizes)) if sizes else "medium"


def replay(records: list[dict], methods: list[str], max_k: int = 16, cost_model=None,
           batches=(1, 16, 64), progress=None, specdraft_options: dict | None = None,
           advance=None) -> dict:
    """Replay every method over the records, per workload, at each batch size.

    The counts (passes, drafted, accepted) are those of batch ``batches[0]``; each batch size
    adds its est. speedup under ``cost_model`` (default: the preset for the trace's model size)
    and its draft tokens per decode step. Adaptive specdraft methods size drafts with that cost
    model, seeing the whole batch. ``specdraft_options`` override the options of every specdraft
    method (ablations). ``advance()``, if given, is called as each method finishes a workload.
    """
    cost_model = cost_model or default_cost_model(records)
    batches = list(batches)
    workloads = sorted({r["workload"] for r in records})
    results: dict = {w: {} for w in workloads}
    speed: dict = {}
    baselines: dict = {}  # (workload, batch) -> no-draft cost, shared by the methods
    for mname in methods:
        if mname not in METHODS:
            raise ValueError(f"unknown method {mname!r}; accepted: {', '.join(METHODS)}")
        per_w, secs = _replay_method(METHODS[mname], records, max_k, workloads, cost_model,
                                     batches, progress, specdraft_options, baselines, advance)
        total_out = sum(a["output_tokens"] for a in per_w.values())
        speed[mname] = {"seconds": secs, "replayed_tokens_per_s": total_out / secs if secs else 0.0}
        for w, agg in per_w.items():
            agg["tokens_per_pass"] = agg["output_tokens"] / agg["target_passes"]
            agg["mean_acceptance_length"] = (1 + agg["accepted_tokens"] / agg["drafts"]
                                             if agg["drafts"] else None)
            agg["drafted_per_accepted"] = (agg["drafted_tokens"] / agg["accepted_tokens"]
                                           if agg["accepted_tokens"] else None)
            results[w][mname] = agg
        if progress:
            progress(f"[replay] {mname}: done, {secs:.1f}s at batch {batches[0]} "
                     f"({speed[mname]['replayed_tokens_per_s']:,.0f} tokens/s)")
    return {"results": results, "speed": speed, "settings": {
        "max_draft": max_k, "methods": methods, "cost_model": cost_model, "batches": batches,
        "requests": len(records), "models": sorted({str(r.get("model")) for r in records}),
        "specdraft_options": specdraft_options or {}}}


# ------------------------------------------------------------------------------ output
def _f(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def format_replay_table(out: dict) -> str:
    bs = out["settings"]["batches"]
    cm = out["settings"]["cost_model"]
    rows = [f"{'workload':<14} {'method':<22} {'tok/pass':>8} {'MAL':>6} {'drafted':>8} "
            f"{'accepted':>8} {'dr/acc':>6} " + " ".join(f"{'x@' + str(b):>6}" for b in bs)
            + " " + " ".join(f"{'dr/st@' + str(b):>8}" for b in bs) + f"   (est x: {cm})"]
    for w, methods in out["results"].items():
        for m, a in methods.items():
            rows.append(f"{w:<14} {m:<22} {a['tokens_per_pass']:>8.2f} "
                        f"{_f(a['mean_acceptance_length']):>6} {a['drafted_tokens']:>8} "
                        f"{a['accepted_tokens']:>8} {_f(a['drafted_per_accepted']):>6} "
                        + " ".join(f"{a['batch'][str(b)]['est_speedup']:>6.2f}" for b in bs) + " "
                        + " ".join(f"{a['batch'][str(b)]['drafted_per_step']:>8.2f}" for b in bs))
    return "\n".join(rows)


def markdown_table(out: dict) -> str:
    """Per workload and method: tokens per pass, MAL, drafted per accepted, and per batch size
    the estimated speedup and draft tokens per decode step."""
    bs = out["settings"]["batches"]
    head = (["workload", "method", "tokens/pass", "MAL", "passes", "drafted", "accepted",
             "drafted/acc"] + [f"est x b{b}" for b in bs] + [f"drafted/step b{b}" for b in bs])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w, methods in out["results"].items():
        for m, a in methods.items():
            rows.append("| " + " | ".join(
                [w, m, f"{a['tokens_per_pass']:.2f}", _f(a["mean_acceptance_length"]),
                 str(a["target_passes"]), str(a["drafted_tokens"]), str(a["accepted_tokens"]),
                 _f(a["drafted_per_accepted"])]
                + [f"{a['batch'][str(b)]['est_speedup']:.2f}" for b in bs]
                + [f"{a['batch'][str(b)]['drafted_per_step']:.2f}" for b in bs]) + " |")
    return "\n".join(rows)


def summary_table(out: dict, ours: str = "specdraft-suffix", peer: str = "arctic-suffix",
                  other: str = "vllm-ngram") -> str:
    """Per workload: the default strategy against arctic (and vLLM ngram), and the default's
    estimated speedup and draft tokens per step at each batch size."""
    bs = out["settings"]["batches"]
    at = " / ".join(f"b{b}" for b in bs)
    head = ["workload", f"tokens/pass: {ours} / {peer} / {other}", "ratio to arctic",
            f"MAL: {ours} / {peer}", f"drafted/acc: {ours} / {peer}",
            f"{ours} est x {at}", f"{ours} drafted/step {at}"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def get(a, key):
        return None if a is None else a[key]

    for w, methods in out["results"].items():
        a, p, o = methods.get(ours), methods.get(peer), methods.get(other)
        if a is None:
            continue
        ratio = a["tokens_per_pass"] / p["tokens_per_pass"] if p else None
        rows.append("| " + " | ".join([
            w, " / ".join(_f(get(x, "tokens_per_pass")) for x in (a, p, o)), _f(ratio),
            " / ".join(_f(get(x, "mean_acceptance_length")) for x in (a, p)),
            " / ".join(_f(get(x, "drafted_per_accepted")) for x in (a, p)),
            " / ".join(f"{a['batch'][str(b)]['est_speedup']:.2f}" for b in bs),
            " / ".join(f"{a['batch'][str(b)]['drafted_per_step']:.2f}" for b in bs)]) + " |")
    return "\n".join(rows)


def plot_replay(out: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    workloads = list(out["results"])
    methods = out["settings"]["methods"]
    bs = out["settings"]["batches"]
    panels = [("tokens_per_pass", "output tokens per target pass")] + [
        (b, f"estimated speedup at batch {b} ({out['settings']['cost_model']} cost model)")
        for b in (bs[0], bs[-1])]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(9, 1.3 * len(workloads)), 4 * len(panels)))
    width = 0.8 / max(1, len(methods))
    for ax, (key, title) in zip(axes, panels):
        for j, m in enumerate(methods):
            vals = []
            for w in workloads:
                a = out["results"][w].get(m)
                vals.append(0 if a is None else a[key] if isinstance(key, str)
                            else a["batch"][str(key)]["est_speedup"])
            ax.bar([i + j * width for i in range(len(workloads))], vals, width, label=m)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))])
        ax.set_xticklabels(workloads, rotation=30, ha="right")
        ax.set_title(title, fontsize=10)
        ax.axhline(1.0, color="grey", lw=0.8)
    axes[0].legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def load_cost_model(spec: str | None) -> tuple[str | None, object]:
    """(name, model) of a preset name, or of NAME=FILE.json (a list of [tokens, relative cost]
    points or a dict of the cost model's parameters); (None, None): the trace's default."""
    if spec is None or spec in COST_MODELS:
        return spec, spec
    if "=" in spec:
        name, path = spec.split("=", 1)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return name, data if isinstance(data, dict) else [tuple(p) for p in data]
    raise SystemExit(f"--cost-model {spec!r}: accepted {', '.join(COST_MODELS)} or NAME=FILE.json")


def main(argv=None) -> int:
    ap = cli_parser("specdraft replay", __doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, nargs="+",
                    help="trace JSONL file(s) from specdraft record (.jsonl or .jsonl.gz)")
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS),
                    metavar="METHOD", help=f"methods to replay, of: {' '.join(METHODS)}")
    ap.add_argument("--max-draft", type=int, default=16, help="draft budget per step")
    ap.add_argument("--cost-model", help=f"verification cost model: a preset ({', '.join(COST_MODELS)}) "
                    "or NAME=FILE.json; default: the GPU preset for the trace's model size")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64],
                    help="batch sizes to estimate speedup at; counts are the first's")
    ap.add_argument("--specdraft-options", default="{}", metavar="JSON",
                    help='options for every specdraft method, e.g. \'{"max_waste": 64}\' (ablations)')
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--png", help="chart path (default: next to --json)")
    ap.add_argument("--markdown", help="also write the table as Markdown here")
    args = ap.parse_args(argv)
    if args.max_draft < 1:
        ap.error(f"--max-draft must be >= 1, got {args.max_draft}")
    if min(args.batches) < 1:
        ap.error(f"--batches must be >= 1, got {args.batches}")
    from specdraft.proposers.base import SpecdraftConfigError
    from specdraft.proposers.config import DrafterConfig
    try:
        sd_opts = json.loads(args.specdraft_options)
        if not isinstance(sd_opts, dict):
            raise SpecdraftConfigError("--specdraft-options must be a JSON object")
        DrafterConfig.from_dict(sd_opts)
    except (json.JSONDecodeError, SpecdraftConfigError) as e:
        print(f"specdraft replay: --specdraft-options: {e}", file=sys.stderr)
        return 2
    records = []
    for path in args.traces:
        try:
            records.extend(load_trace(path))
        except (OSError, ValueError) as e:
            print(f"specdraft replay: {e}", file=sys.stderr)
            return 2
    name, spec = load_cost_model(args.cost_model)
    name = name or default_cost_model(records)
    print(f"[replay] {len(records)} requests, {sum(len(r['output_token_ids']) for r in records):,} "
          f"output tokens, cost model {name}, batches {' '.join(map(str, args.batches))}, "
          f"methods: {' '.join(args.methods)}", flush=True)
    from specdraft.progress import Progress
    workloads = len({r["workload"] for r in records})
    with Progress(len(args.methods) * workloads, "[replay]", "workload") as bar:
        out = replay(records, args.methods, args.max_draft, spec or name, args.batches,
                     progress=bar.say, specdraft_options=sd_opts, advance=bar.advance)
    out["settings"]["cost_model"] = name
    print(format_replay_table(out))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown_table(out) + "\n")
        print(f"[replay] markdown table: {args.markdown}")
    write_results(args.json, out, plot=lambda png: plot_replay(out, png), png=args.png,
                  tag="replay")
    return 0
