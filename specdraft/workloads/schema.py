"""The request record: fields, validation, and the history a record refers to (schema:
docs/workloads.md)."""

from __future__ import annotations

from typing import Any

#: Top-level fields of a request record, in the order ``dump_jsonl`` writes them.
FIELDS = ("id", "workload", "session", "turn", "messages", "prompt", "history", "max_tokens",
          "temperature", "meta")
ROLES = ("system", "user", "assistant", "tool")
HISTORY_VALUES = (None, "previous")
DEFAULT_MAX_TOKENS = 256


def make_request(*, id: str, workload: str, messages: list[dict] | None = None,
                 prompt: str | None = None, session: str | None = None, turn: int = 1,
                 history: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float = 0.0, meta: dict | None = None) -> dict:
    """A request record with its fields in canonical order (exactly one of messages/prompt)."""
    rec: dict[str, Any] = {"id": id, "workload": workload, "session": session, "turn": turn}
    if messages is not None:
        rec["messages"] = messages
    if prompt is not None:
        rec["prompt"] = prompt
    rec.update(history=history, max_tokens=int(max_tokens), temperature=float(temperature),
               meta=dict(meta or {}))
    return rec


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_record(obj: object) -> dict:
    """Check one record against the schema; return it normalized (defaults filled, canonical order).

    Raises ``ValueError("field 'NAME': ...")`` on the first problem. Cross-record rules (unique ids,
    sessions) are checked by ``load_jsonl``/``dump_jsonl``.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = [k for k in obj if k not in FIELDS]
    if unknown:
        raise ValueError(f"field {unknown[0]!r}: unknown field (known: {', '.join(FIELDS)}; "
                         f"put extra information under 'meta')")
    rid = obj.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise ValueError("field 'id': required, a non-empty string"
                         + ("" if "id" not in obj else f", got {rid!r}"))
    workload = obj.get("workload")
    if not isinstance(workload, str) or not workload.strip():
        raise ValueError("field 'workload': required, a non-empty string"
                         + ("" if "workload" not in obj else f", got {workload!r}"))
    has_m, has_p = "messages" in obj, "prompt" in obj
    if has_m == has_p:
        raise ValueError("field 'messages'/'prompt': exactly one of them is required"
                         + (" (both given)" if has_m else " (neither given)"))
    if has_m:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise ValueError(f"field 'messages': expected a non-empty list, got {msgs!r:.60}")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise ValueError(f"field 'messages[{i}]': expected an object with role and content")
            extra = [k for k in m if k not in ("role", "content", "name")]
            if extra:
                raise ValueError(f"field 'messages[{i}].{extra[0]}': unknown key "
                                 f"(allowed: role, content, name)")
            if m.get("role") not in ROLES:
                raise ValueError(f"field 'messages[{i}].role': expected one of {', '.join(ROLES)}, "
                                 f"got {m.get('role')!r}")
            if not isinstance(m.get("content"), str):
                raise ValueError(f"field 'messages[{i}].content': expected a string, "
                                 f"got {m.get('content')!r:.60}")
    else:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise ValueError(f"field 'prompt': expected a non-empty string, got {obj['prompt']!r:.60}")
    session = obj.get("session")
    if session is not None and (not isinstance(session, str) or not session.strip()):
        raise ValueError(f"field 'session': expected a non-empty string or null, got {session!r}")
    turn = obj.get("turn", 1)
    if not is_int(turn) or turn < 1:
        raise ValueError(f"field 'turn': expected an integer >= 1, got {turn!r}")
    history = obj.get("history")
    if history not in HISTORY_VALUES:
        raise ValueError(f"field 'history': expected null or \"previous\", got {history!r}")
    if history == "previous" and (session is None or turn < 2):
        raise ValueError("field 'history': \"previous\" needs a 'session' and a 'turn' >= 2")
    max_tokens = obj.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not is_int(max_tokens) or max_tokens < 1:
        raise ValueError(f"field 'max_tokens': expected a positive integer, got {max_tokens!r}")
    temperature = obj.get("temperature", 0.0)
    if (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)
            or not temperature >= 0 or temperature == float("inf")):
        raise ValueError(f"field 'temperature': expected a number >= 0, got {temperature!r}")
    meta = obj.get("meta", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ValueError(f"field 'meta': expected an object, got {meta!r:.60}")
    return make_request(id=rid, workload=workload, session=session, turn=turn,
                        messages=obj.get("messages"), prompt=obj.get("prompt"), history=history,
                        max_tokens=max_tokens, temperature=temperature, meta=meta)


class SessionCheck:
    """Cross-record rules: unique ids; unique (session, turn); 'previous' needs turn-1 earlier."""

    def __init__(self) -> None:
        self.ids: dict[str, object] = {}
        self.turns: dict[tuple[str, int], object] = {}

    def check(self, rec: dict, where: object) -> None:
        if rec["id"] in self.ids:
            raise ValueError(f"field 'id': duplicate id {rec['id']!r} (first at {self.ids[rec['id']]})")
        self.ids[rec["id"]] = where
        if rec["session"] is None:
            return
        key = (rec["session"], rec["turn"])
        if key in self.turns:
            raise ValueError(f"field 'turn': session {rec['session']!r} has turn {rec['turn']} "
                             f"twice (first at {self.turns[key]})")
        if rec["history"] == "previous" and (rec["session"], rec["turn"] - 1) not in self.turns:
            raise ValueError(f"field 'history': \"previous\" needs turn {rec['turn'] - 1} of session "
                             f"{rec['session']!r} earlier in the file")
        self.turns[key] = where


def expand_history(record: dict, previous: list[dict] | str | None = None,
                   previous_output: str | None = None) -> list[dict] | str:
    """What to send for ``record``: its messages (or prompt), after the history it refers to.

    ``history: null``: the record's own ``messages``/``prompt``. ``history: "previous"``: ``previous``
    is what this function returned for the session's previous turn and ``previous_output`` the text
    generated for it; the result is ``previous + [assistant: previous_output] + messages`` (chat), or
    ``previous + previous_output + prompt`` (plain prompts).
    """
    own = record["messages"] if "messages" in record else record["prompt"]
    if record.get("history") is None:
        return [dict(m) for m in own] if isinstance(own, list) else own
    if previous is None or previous_output is None:
        raise ValueError(f"{record['id']}: history 'previous' needs the previous turn's "
                         "conversation and output")
    if isinstance(own, list):
        if not isinstance(previous, list):
            raise ValueError(f"{record['id']}: previous turn was a prompt, this one has messages")
        return [dict(m) for m in previous] + [{"role": "assistant", "content": previous_output}] + \
            [dict(m) for m in own]
    if not isinstance(previous, str):
        raise ValueError(f"{record['id']}: previous turn had messages, this one is a prompt")
    return previous + previous_output + own
