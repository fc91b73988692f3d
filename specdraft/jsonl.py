"""The one reader of JSON Lines files (traces, corpora, workloads): every problem names path:line.

``read_jsonl`` yields ``(line number, value)`` for each non-blank line and raises ``JsonlError``
("PATH:LINE: ...")
from a plain or gzipped (``.gz``) file for bytes that are not UTF-8 and for text that is not JSON. Callers check
their own fields and prefix the same ``PATH:LINE`` (``located``), so every error points at a line.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any, Iterator

INT32_MAX = 2**31 - 1  # engines hold token ids as int32


class JsonlError(ValueError):
    """A JSON Lines file has a bad line; the message starts with ``PATH:LINE:``."""


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open  # committed traces are gzipped
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise JsonlError(f"{path}:{lineno}: not UTF-8 ({e.reason} at byte "
                                 f"{e.start}); is this a binary file?") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise JsonlError(f"{path}:{lineno}: not valid JSON ({e.msg}, column "
                                 f"{e.colno})") from None
            yield lineno, value


def located(path: str | os.PathLike, lineno: int, error: Exception) -> JsonlError:
    return JsonlError(f"{os.fspath(path)}:{lineno}: {error}")


def token_ids(value: Any, field: str, vocab_size: int | None = None) -> list[int]:
    """``value`` as token ids: a list of ints (not booleans) in [0, vocab_size) or int32."""
    if not isinstance(value, list):
        raise ValueError(f"field {field!r} must be a list of token ids, got "
                         f"{type(value).__name__}")
    limit = vocab_size if vocab_size is not None else INT32_MAX + 1
    what = (f"the vocabulary's {vocab_size} ids" if vocab_size is not None else "int32")
    for i, t in enumerate(value):
        if not isinstance(t, int) or isinstance(t, bool):
            raise ValueError(f"field {field!r} must hold token ids (ints >= 0): item {i} is "
                             f"{json.dumps(t)}")
        if not 0 <= t < limit:
            raise ValueError(f"field {field!r} must hold token ids (ints >= 0) within {what}: "
                             f"item {i} is {t}")
    return value
