"""Replaying a trace through one method: a request alone (``replay_request``), or up to B
requests in flight with each pass priced by a cost model (``replay_batched``, against the
same schedule without drafts, ``baseline_cost``)."""

from __future__ import annotations

from specdraft.replay.methods import Method


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


def check_budget(method: Method, toks: list[int], budget: int) -> None:
    """A replay refuses a method that drafts past the budget (vLLM would crash on it)."""
    if len(toks) > budget:
        raise RuntimeError(f"{method.name} drafted {len(toks)} > {budget} tokens")


def replay_request(method: Method, prompt: list[int], output: list[int], budget: int,
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
        toks, parents = method.draft(key, budget)
        check_budget(method, toks, budget)
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


def fixed_width_draft(toks: list[int], parents: list[int], budget: int,
                      last: int) -> tuple[list[int], list[int]]:
    """The draft a fixed-width engine verifies (vLLM 0.34 without adaptive verification): a
    chain padded to ``budget`` tokens with the last sampled token ``last`` (filler slots are
    ordinary drafts, accepted where the target repeats that token); a tree is left as it is
    (it is still priced ``budget`` wide)."""
    if len(toks) >= budget or parents != list(range(-1, len(toks) - 1)):
        return toks, parents
    n = budget - len(toks)
    return toks + [last] * n, parents + list(range(len(toks) - 1, budget - 1))


def replay_batched(method: Method, records: list[dict], budget: int, batch: int, cost,
                   baseline: float | None = None, fixed_width: bool = False) -> dict:
    """Replay ``records`` with up to ``batch`` requests in flight through one method instance.

    Requests start in arrival order as slots free; a later turn of a session waits until the
    session's earlier turns have ended (its prompt holds their output). Each step is one target
    pass over every request in flight: a new request's prefill emits its first token without a
    draft, the others verify the draft proposed for them this step (the method sees the whole
    batch: B requests and their contexts). ``cost`` (a ``CostModel``) prices each pass with its
    base prediction; the same schedule without drafts (one token per request per pass) gives
    the baseline (``baseline``, when the caller has it already: it does not depend on the
    method), and est. speedup = baseline cost / cost with drafts (equal tokens emitted).

    ``fixed_width``: verification as vLLM 0.34 does it without adaptive verification: every
    decoding row is scored ``budget`` + 1 wide whatever its draft's length, a chain padded with
    the request's last token (``fixed_width_draft``; a filler accepted counts in
    ``accepted_tokens`` and in ``filler_accepted``). ``drafted_tokens`` stays the method's own
    tokens, ``draft_slots`` counts the slots verified; the method hears of the acceptance of
    its own tokens only. Off (the default), a row is scored 1 + its draft's length.
    """
    queue = batch_queue(records, batch)
    num_requests = len(queue)
    output_tokens = sum(output_limit(r, len(o)) for _, o, r, _ in queue)
    waiting: list = []  # sessions with a turn in flight
    inflight: list[_InFlight] = []
    passes = drafted = accepted = drafts = decode_rows = cost_spec = slots = fillers = 0
    steps = 0
    while queue or inflight:
        for prompt, output, rec, session in _admit(queue, batch - len(inflight), waiting):
            st = _InFlight(method.new_key(), rec, prompt, output, session)
            _start(method, st.key, prompt, rec.get("scope"))
            inflight.append(st)
        contexts = [len(q.prompt) + q.pos for q in inflight]
        shape = (len(inflight), float(sum(contexts)), float(max(contexts)))
        decoding = [q for q in inflight if q.pos > 0]
        ds = method.draft_batch([q.key for q in decoding], budget, shape) if decoding else []
        tokens = len(inflight)
        for q, (toks, parents) in zip(decoding, ds):
            check_budget(method, toks, budget)
            own = len(toks)
            if fixed_width:
                toks, parents = fixed_width_draft(toks, parents, budget, q.output[q.pos - 1])
            acc = accepted_length(toks, parents, q.output[q.pos:]) if toks else 0
            acc = min(acc, len(q.output) - q.pos - 1)  # the last recorded token is the target's own
            emitted = q.output[q.pos:q.pos + acc + 1]
            _observe_topk(method, q, q.pos, emitted)
            drafted += own
            drafts += bool(toks)
            accepted += acc
            fillers += max(acc - own, 0)
            slots += len(toks)
            tokens += budget if fixed_width else len(toks)
            q.pos += len(emitted)
            method.extend(q.key, emitted, min(acc, own) if own else None)
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
           "drafts": drafts, "decode_passes": decode_rows, "output_tokens": output_tokens,
           "draft_slots": slots, "filler_accepted": fillers}
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
