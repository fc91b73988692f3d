"""The drafting methods ``specdraft replay`` drives through a trace: every specdraft strategy,
vLLM's ``ngram`` function, arctic-inference's ``SuffixDecodingCache``, vLLM 0.34's GPU suffix
rule (re-implemented), Hugging Face's prompt lookup, an oracle and no drafts. ``METHODS`` makes
each by name."""

from __future__ import annotations

from functools import partial


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
    def draft(self, key, budget: int) -> tuple[list[int], list[int]]:
        """(token_ids, parents) of the draft; a chain has parents i-1."""
        raise NotImplementedError

    def draft_batch(self, keys, budget: int, batch: tuple | None = None) -> list[tuple[list[int], list[int]]]:
        """Drafts of the requests ``keys`` for one pass; ``batch`` = (requests, sum of contexts,
        longest context) of the whole pass (only a method that sizes drafts by cost reads it)."""
        return [self.draft(k, budget) for k in keys]

    def finish(self, key) -> None: ...


class NoDraftMethod(Method):
    """No speculation: the schedule without drafts (the reference a replay is priced against)."""
    name = "no-drafts"

    def draft(self, key, budget):
        return [], []


class SpecdraftMethod(Method):
    """specdraft driven as an engine drives it: each ``draft_batch`` is one ``SpecDrafter.step``.

    ``start`` and ``extend`` only record what the next step brings: each request's tokens the
    drafter does not hold yet, the accepted count of its last draft and the tokens it emitted.
    A step's rows are the requests that emitted since the last step, in the order they emitted
    (a row that ends in the step, or is not drafted, has budget 0: the live engine's step holds it
    too, and the controller sizes the batch from every row), then requests drafted without new
    tokens, and the requests started since the last step that have not emitted yet when the
    pass's shape (``batch``) counts them (a replay whose pass holds their prefill). The rows'
    shape must be ``batch`` when it is given: the controller sizes the pass the replay prices. A
    request's first row starts it in the drafter (its scope set when it started). ``finish``
    finishes the request at once, as the live adapter finishes a row that ended in its step; when
    it has tokens the drafter has not seen yet (a replay that ends requests after their pass, not
    in the step), a step of the rows that emitted since the last one (budget 0) syncs them first,
    so the drafter sees the pass's tokens before the request leaves, as before. Tree strategies that the replay verifies as trees get whole trees
    (``trees=True``); a ``chain_only`` drafter's trees come back as their best chain."""
    ends_in_step = True  # in an engine, specdraft's step finishes a request that reached its limit

    def __init__(self, name: str, options: dict, chain_only: bool = False):
        from specdraft.proposers import make_drafter
        self.name = name
        self.drafter = make_drafter(options, chain_only=chain_only)
        self._trees = self.drafter.config.strategy == "tree" and not chain_only
        self._num: dict = {}     # key -> history length (prompt + output emitted)
        self._prompt: dict = {}  # key -> prompt length
        self._tail: dict = {}    # key -> the history's last tokens the drafter does not hold yet
        self._acc: dict = {}     # key -> accepted count of its last draft (-1: none to report)
        self._emitted: dict = {}   # keys that emitted since the last step (emission order)
        self._unsynced: dict = {}  # keys started since the last step, not emitted yet

    def start(self, key, prompt, scope=None):
        if scope is not None:
            self.drafter.set_scope(key, scope)
        self._num[key] = self._prompt[key] = len(prompt)
        self._tail[key] = list(prompt)
        self._acc[key] = -1
        self._unsynced[key] = None

    def extend(self, key, tokens, num_accepted):
        if key in self._emitted and num_accepted is not None and self._acc[key] >= 0:
            self._sync(key)  # two accepted counts before a step: the first one's step
        self._unsynced.pop(key, None)
        if key not in self._emitted:
            self._emitted[key] = None
        self._tail[key].extend(tokens)
        self._num[key] += len(tokens)
        if num_accepted is not None:
            self._acc[key] = num_accepted

    def _step(self, keys, budget: int, rows: list):
        """One ``SpecDrafter.step`` over ``rows`` (``keys`` among them get ``budget``)."""
        import numpy as np

        want = set(keys)
        tails = [self._tail[k] for k in rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tails], out=offsets[1:])
        tokens = np.fromiter((t for tail in tails for t in tail), np.int32, int(offsets[-1]))
        num = [self._num[k] for k in rows]
        out = self.drafter.step(
            rows, tokens, num, [self._prompt[k] for k in rows],
            [budget if k in want else 0 for k in rows], token_offsets=offsets,
            num_accepted=[self._acc[k] for k in rows],
            num_emitted=[len(t) if self.drafter.num_tokens(k) >= 0 else -1
                         for k, t in zip(rows, tails)],
            trees=self._trees)
        for k in rows:
            self._tail[k] = []
            self._acc[k] = -1
            self._emitted.pop(k, None)
            self._unsynced.pop(k, None)
        return out

    def _sync(self, key) -> None:
        self._step((), 0, [key])

    def draft_batch(self, keys, budget, batch=None):
        rows = list(self._emitted)
        rows += [k for k in dict.fromkeys(keys) if k not in self._emitted]
        if batch is not None and int(batch[0]) > len(rows):
            rows += [k for k in self._unsynced if k not in keys]
        if batch is not None:
            ctx = [self._num[k] for k in rows]
            shape = (len(rows), float(sum(ctx)), float(max(ctx, default=0)))
            if shape != tuple(batch):
                raise RuntimeError(f"{self.name}: the step's rows {shape} are not the pass the "
                                   f"replay sized {tuple(batch)}")
        out = self._step(keys, budget, rows)
        if self._trees:
            drafts = {k: (t.token_ids, t.parents) for k, t in zip(rows, out.trees())}
        else:
            drafts = {k: (t, list(range(-1, len(t) - 1))) for k, t in zip(rows, out.rows())}
        return [drafts[k] for k in keys]

    def draft(self, key, budget):
        return self.draft_batch([key], budget)[0]

    def report_step(self, tokens: int, seconds: float) -> None:
        self.drafter.report_step(tokens, seconds)

    def finish(self, key):
        if self._tail[key]:  # the tokens it emitted: a step of the rows that emitted (budget 0)
            self._step((), 0, list(dict.fromkeys([*self._emitted, key])))
        self._unsynced.pop(key, None)
        for d in (self._num, self._prompt, self._tail, self._acc):
            d.pop(key, None)
        if self.drafter.num_tokens(key) >= 0:
            self.drafter.finish(key)
        else:  # started, never emitted: only its scope to forget
            self.drafter.abort(key)


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

    def draft_batch(self, keys, budget, batch=None):
        out = super().draft_batch(keys, budget, batch)
        for i, key in enumerate(keys):
            if out[i][0] or budget <= 0:
                continue
            last = self._last[key]
            t = (self.table.tree(last, self.branching, budget) if self.branching
                 else self.table.chain(last, min(self.depth, budget)))
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

    def draft_batch(self, keys, budget, batch=None):
        if self.length is None and keys:
            rows = len(keys)
            self._step_length = max(range(budget + 1), key=lambda n: rows * (n + 1) / (
                self.pass_cost(rows, rows * (n + 1)) or float("inf")))
        return [self.draft(k, budget) for k in keys]

    def start(self, key, prompt, scope=None):
        self._req[key] = [self.truths[tuple(prompt)], 0]

    def extend(self, key, tokens, num_accepted):
        self._req[key][1] += len(tokens)

    def draft(self, key, budget):
        truth, pos = self._req[key]
        length = self.length if self.length is not None else self._step_length
        toks = truth[pos:pos + min(length, budget)]
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

    def draft(self, key, budget):
        buf, n = self._bufs[key]
        d = self._fn(buf[:n], self.min_n, self.max_n, self.max_model_len, budget)
        toks = [int(t) for t in d]
        return toks, list(range(-1, len(toks) - 1))

    def finish(self, key):
        del self._bufs[key]


class ArcticSuffixMethod(Method):
    """arctic-inference's SuffixDecodingCache, driven the way vLLM's ``suffix`` method drives it.

    ``options``: the suffix method's ``suffix_decoding_*`` options; the installed vLLM's defaults
    (its adapter's ``SUFFIX_DEFAULTS``) for the rest.
    """

    def __init__(self, name: str, **options):
        import numpy as np
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        from specdraft.adapters import vllm_adapter
        self.name = name
        self._np = np
        cache_args, self._speculate_args = vllm_adapter().suffix_cache_arguments(**options)
        self.cache = SuffixDecodingCache(**cache_args)
        self.depth = cache_args["max_tree_depth"]
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

    def draft(self, key, budget):
        pattern = self._np.asarray(self._tokens[key][-self.depth:], dtype=self._np.int32)
        d = self.cache.speculate(str(key), pattern, max_spec_tokens=budget, **self._speculate_args)
        return list(d.token_ids), list(d.parents)

    def finish(self, key):
        self.cache.stop_request(str(key))
        del self._tokens[key]


_I64 = 1 << 64


def _wrap64(x: int) -> int:
    """``x`` as a signed 64-bit integer (two's complement wrap, as the GPU computes it)."""
    x &= _I64 - 1
    return x - _I64 if x >> 63 else x


class Vllm034SuffixMethod(Method):
    """vLLM 0.34's ``suffix`` drafting rule, re-implemented in plain Python for the replay.

    The rule of ``vllm/v1/worker/gpu/spec_decode/suffix/speculator.py`` (vLLM 0.34.0, its Triton
    kernels ``_suffix_local_scan_kernel``, ``_corpus_draft``, ``_suffix_finalize_kernel`` and
    ``_suffix_ingest_kernel``), with the defaults of ``vllm/config/speculative.py``
    (``suffix_decoding_max_tree_depth`` 24, ``suffix_decoding_corpus_tokens`` 1 << 20):

    - local: the longest earlier occurrence (up to ``max_depth`` tokens) of the suffix of the
      request's own history (prompt and output); ties go to the latest; the draft is what followed
      it, up to K tokens and the end of the history;
    - corpus: finished requests' responses, each with the last 3 prompt tokens before it, placed
      one after another in a ring of ``corpus_tokens`` (a -1 after each; a response that does not
      fit before the end wraps to 0). Every position is indexed under the hash of the 2 and of the
      4 tokens before it, in the slot ``document number % 8`` of its bucket, the newest position
      in that document kept. A lookup takes the 8 slots of the request's 4-token bucket and the 8
      of its 2-token bucket, extends each to its longest suffix match (at least the key's length),
      and for each distinct match length L the candidates matching >= L vote token by token on a
      continuation (most votes, ties to the newest); the chain with the highest sum of votes over
      candidates alive at the start wins (ties: longer L);
    - the corpus draft replaces the local one only if its match is strictly longer.

    ``draft`` returns the real draft (vLLM pads it to K with the last sampled token; the replay's
    ``fixed_width`` does that). A plain re-implementation of the rule, not vLLM's code: hash
    collisions and overwritten documents are verified away as on the GPU, so the drafts are the
    same; finished requests are ingested one at a time as the replay ends them (vLLM ingests a
    step's finished requests in request-id order)."""

    HASH_MUL = _wrap64(0x9E3779B97F4A7C15)
    SLOTS = 8           # _BUCKET_SLOTS
    PROMPT_CONTEXT = 3  # _PROMPT_CONTEXT

    def __init__(self, name: str = "vllm034-suffix", max_depth: int = 24,
                 corpus_tokens: int = 1 << 20):
        self.name, self.max_depth = name, max_depth
        self.cap = corpus_tokens if max_depth >= 2 else 0  # the corpus needs the 2-token key
        self.num_buckets = 16  # the next power of two >= max(16, capacity / 4)
        while self.num_buckets < self.cap // 4:
            self.num_buckets <<= 1
        self.corpus = [-1] * self.cap
        self.table: dict = {}  # (key length, bucket) -> [SLOTS packed (document << 32 | position)]
        self.head = self.docs = 0
        self._req: dict = {}   # key -> [history, prompt length, {token: positions after it}]

    def _bucket(self, hv: int) -> int:
        return ((hv >> 29) ^ hv) & (self.num_buckets - 1)

    def _hashes(self, tokens: list[int], end: int, lo: int = 0) -> tuple[int, int]:
        """Buckets of the 2 and 4 tokens before ``end`` (newest first; a token before ``lo`` is 0)."""
        hv = 0
        for d in range(4):
            i = end - 1 - d
            hv = _wrap64((hv ^ (tokens[i] if i >= lo else 0)) * self.HASH_MUL)
            if d == 1:
                b2 = self._bucket(hv)
        return b2, self._bucket(hv)

    def start(self, key, prompt, scope=None):
        self._req[key] = [[], len(prompt), {}]
        self._append(key, prompt)

    def _append(self, key, tokens):
        hist, _, after = self._req[key]
        for t in tokens:
            if hist:  # position len(hist) follows token hist[-1]
                after.setdefault(hist[-1], []).append(len(hist))
            hist.append(t)

    def extend(self, key, tokens, num_accepted):
        self._append(key, tokens)

    def _local(self, hist: list[int], after: dict, k: int) -> tuple[int, list[int]]:
        """(match length, draft) from the request's own history: the latest of its longest
        earlier suffix matches (``after``: the positions that follow each token)."""
        n, best, best_pos = len(hist), 0, 0
        for pos in reversed(after.get(hist[-1], ())):
            m = 1
            while m < self.max_depth and pos - 1 - m >= 0 and hist[pos - 1 - m] == hist[n - 1 - m]:
                m += 1
            if m > best:
                best, best_pos = m, pos
                if m == self.max_depth:
                    break
        return best, hist[best_pos:best_pos + k] if best else []

    def _corpus_draft(self, hist: list[int], k: int) -> tuple[int, list[int]]:
        """(match length, draft) from the corpus of finished responses (0, [] without a hit)."""
        n, corpus, cap = len(hist), self.corpus, self.cap
        b2, b4 = self._hashes(hist, n)
        cands = ([(4, v) for v in self.table.get((4, b4), ())]
                 + [(2, v) for v in self.table.get((2, b2), ())])
        ok, seen = [], set()  # (match length, packed value, continuation)
        for key_len, v in cands:
            cpos = v & 0xFFFFFFFF
            if v < 0 or cpos in seen or n < key_len or cpos >= cap or corpus[cpos] < 0:
                continue
            m, top = 0, min(self.max_depth, n, cpos)
            while m < top and corpus[cpos - 1 - m] == hist[n - 1 - m]:
                m += 1
            if m < key_len:
                continue
            seen.add(cpos)
            cont = []
            for t in corpus[cpos:cpos + k]:
                if t < 0:
                    break
                cont.append(t)
            ok.append((m, v, cont))
        best = (-1, 1, 0, [])  # votes, candidates, match length, chain
        for L in dict.fromkeys(m for m, _, _ in ok):  # each distinct length, in candidate order
            alive = [c for c in ok if c[0] >= L]
            num, chain = 0, []  # votes for the chain's tokens, the chain
            for d in range(k):
                has = [c for c in alive if len(c[2]) > d]
                if not has:
                    break
                votes: dict = {}
                for c in has:
                    votes[c[2][d]] = votes.get(c[2][d], 0) + 1
                top = max(votes.values())
                tok = max((c for c in has if votes[c[2][d]] == top), key=lambda c: c[1])[2][d]
                num += top
                chain.append(tok)
                alive = [c for c in has if c[2][d] == tok]
            den = sum(c[0] >= L for c in ok)
            lhs, rhs = num * best[1], best[0] * den  # num / den against the best's, exactly
            if lhs > rhs or (lhs == rhs and best[2] < L):
                best = (num, den, L, chain)
        return best[2], best[3]

    def draft(self, key, budget):
        hist, _, after = self._req[key]
        l_len, toks = self._local(hist, after, budget)
        if self.cap and budget > 0:
            g_len, g = self._corpus_draft(hist, budget)
            if g_len > l_len:
                toks = g
        return toks, list(range(-1, len(toks) - 1))

    def finish(self, key):
        hist, n_prompt, _ = self._req.pop(key)
        if not self.cap:
            return
        doc = hist[max(n_prompt - self.PROMPT_CONTEXT, 0):][-(self.cap - 1):]
        n = len(doc)
        if self.head + n + 1 > self.cap:
            self.head = 0
        base, val0 = self.head, self.docs << 32
        self.corpus[base:base + n] = doc
        self.corpus[base + n] = -1
        slot = self.docs % self.SLOTS
        for j in range(2, n):
            b2, b4 = self._hashes(doc, j)
            for kl, b, need in ((2, b2, 2), (4, b4, 4)):
                if j >= need:
                    row = self.table.setdefault((kl, b), [-1] * self.SLOTS)
                    row[slot] = max(row[slot], val0 | (base + j))
        self.head = base + n + 1
        self.docs += 1


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

    def draft(self, key, budget):
        if budget <= 0:
            return [], []
        tokens = self._tokens[key]
        gen = self._cls(num_output_tokens=budget, max_matching_ngram_size=self.ngram,
                        max_length=len(tokens) + budget + 1)
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
    "vllm034-suffix": lambda cost_model=None: Vllm034SuffixMethod("vllm034-suffix"),
    "hf-prompt-lookup": lambda cost_model=None: HFPromptLookupMethod("hf-prompt-lookup"),
    "no-drafts": lambda cost_model=None: NoDraftMethod(),
}
DEFAULT_METHODS = ["specdraft-suffix", "specdraft-suffix-fixed", "specdraft-tree",
                   "specdraft-tree-path", "specdraft-lookup", "vllm-ngram", "arctic-suffix", "hf-prompt-lookup"]
