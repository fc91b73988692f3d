"""Trace files for ``specdraft replay``: one JSON object per request (``specdraft record``'s
output), checked as it is read."""

from __future__ import annotations

import json

from specdraft.jsonl import located, read_jsonl, token_ids

TRACE_FIELDS = {"id": str, "prompt_token_ids": list, "output_token_ids": list}


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
