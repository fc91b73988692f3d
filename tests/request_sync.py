"""Keeps a drafter's per-request state equal to an engine's token history, through the
per-request API (start / extend / finish / abort): the reference the engine step
(``SpecDrafter.step``) is checked against in tests/test_step_twin.py.

Engine-agnostic: each batch row is described as a ``Row`` (request id, the row's token buffer,
how many tokens are final) and this class turns the difference between what the drafter has seen
and what the engine holds into drafter events. Because the engine's history is the source of
truth, preemption and resumption need no special case (the history does not change while a
request waits), and a history that shrinks (tokens discarded by the engine) restarts the request
instead of corrupting it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

from specdraft.proposers.base import accepted_count


@dataclasses.dataclass
class Row:
    req_id: str
    tokens: Any              # the row's token buffer (numpy row or list); [:num_tokens] final
    num_prompt_tokens: int
    num_tokens: int
    num_drafted: int = 0     # draft tokens the engine verified for this request in this step
    num_emitted: int = 0     # tokens the engine emitted for this request in this step
    speculate: bool = True   # False: the request opted out of speculation
    ended: bool = False      # the request stopped in this step (the engine finishes it next)


def _ints(tokens: Any) -> list[int]:
    return tokens.tolist() if hasattr(tokens, "tolist") else [int(t) for t in tokens]


class RequestSync:
    def __init__(self, drafter: Any):
        self.drafter = drafter
        self.known: dict[str, int] = {}  # req_id -> tokens the drafter has seen

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.known

    def __len__(self) -> int:
        return len(self.known)

    def sync(self, row: Row) -> int | None:
        """Bring the drafter up to ``row``; returns the accepted count reported (None: unknown)."""
        n = row.num_tokens
        known = self.known.get(row.req_id)
        if known is not None and n < known:
            self.drop(row.req_id, aborted=True)  # the engine discarded tokens: start over
            known = None
        if known is None:
            if self.drafter.has(row.req_id):      # state left by an earlier request with this id
                self.drafter.abort(row.req_id)
            known = min(row.num_prompt_tokens, n)
            self.drafter.start(row.req_id, _ints(row.tokens[:known]))
            self.known[row.req_id] = known
        num_accepted = None
        if n > known:
            if row.num_emitted == n - known:
                num_accepted = accepted_count(row.num_emitted, row.num_drafted)
                if num_accepted < 0:
                    num_accepted = None
            self.drafter.extend(row.req_id, _ints(row.tokens[known:n]), num_accepted)
            self.known[row.req_id] = n
        return num_accepted

    def drop(self, req_id: str, aborted: bool) -> bool:
        """The request left the engine; False if the drafter never saw it."""
        if self.known.pop(req_id, None) is None:
            return False
        if aborted:
            self.drafter.abort(req_id)
        else:
            self.drafter.finish(req_id)
        return True

    def retain(self, live_req_ids: Iterable[str]) -> list[str]:
        """Abort requests the engine no longer holds (a safety net for missed finish events)."""
        live = set(live_req_ids)
        gone = [r for r in self.known if r not in live]
        for req_id in gone:
            self.drop(req_id, aborted=True)
        return gone

    def reset(self) -> None:
        """Forget every request (after a failure); the next step restarts them from the engine."""
        ids: Sequence[str] = list(self.known)
        self.known.clear()
        for req_id in ids:
            try:
                self.drafter.abort(req_id)
            except Exception:  # the drafter is already in trouble; its state is dropped either way
                pass
