"""Workload files: JSONL, one validated record a line, byte-identical for equal records."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from specdraft.jsonl import located, read_jsonl
from specdraft.workloads.schema import SessionCheck, validate_record


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read and validate a workload file (one JSON record a line; blank lines are skipped).

    Returns normalized records (defaults filled in). Raises ``ValueError("PATH:LINE: field ...")``
    naming the line and the field of the first problem.
    """
    path = os.fspath(path)
    records: list[dict] = []
    check = SessionCheck()
    for lineno, obj in read_jsonl(path):
        try:
            rec = validate_record(obj)
            check.check(rec, f"line {lineno}")
        except ValueError as e:
            raise located(path, lineno, e) from None
        records.append(rec)
    if not records:
        raise ValueError(f"{path}: no records (an empty workload file)")
    return records


def dumps_jsonl(records: Iterable[dict]) -> str:
    """The JSONL text of validated records (canonical field order, UTF-8, one record a line)."""
    check = SessionCheck()
    lines = []
    for i, obj in enumerate(records):
        try:
            rec = validate_record(obj)
            check.check(rec, f"record {i}")
        except ValueError as e:
            raise ValueError(f"record {i}: {e}") from None
        lines.append(json.dumps(rec, ensure_ascii=False) + "\n")
    return "".join(lines)


def dump_jsonl(records: Iterable[dict], path: str | os.PathLike) -> Path:
    """Validate ``records`` and write them to ``path`` as JSONL (byte-identical for equal records)."""
    text = dumps_jsonl(records)
    out = Path(path)
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    return out
