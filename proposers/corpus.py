"""Corpus files for the global cache (the ``corpus_files`` option): read and checked in one place.

A ``.jsonl`` file holds one JSON object a line with ``token_ids`` (a list of token ids) or ``text``
(a string, tokenized with the target's tokenizer); any other file is one UTF-8 text document.
Adapters call ``check_corpus_files`` before the engine starts, so a bad file fails start-up with
the file and line, not a worker later; the drafter reads the same files with ``read_corpus``.
"""

from __future__ import annotations

import os
from typing import Iterable

from specdraft.jsonl import JsonlError, read_jsonl, token_ids
from specdraft.proposers.base import SpecdraftConfigError

ACCEPTED = ("accepted: a .jsonl file with one object a line holding 'token_ids' (a list of token "
            "ids) or 'text' (a string), or a UTF-8 text file")


def _error(where: str, problem: str) -> SpecdraftConfigError:
    return SpecdraftConfigError(f"invalid specdraft option corpus_files: {where}: {problem}; "
                                f"{ACCEPTED}")


def _documents(path: str, vocab_size: int | None) -> Iterable[list[int] | str]:
    """Each document of ``path``: token ids, or text still to tokenize."""
    if not os.path.isfile(path):
        raise SpecdraftConfigError(f"invalid specdraft option corpus_files: {path!r} is not a "
                                   f"file; {ACCEPTED}")
    if path.endswith(".jsonl"):
        try:
            for lineno, obj in read_jsonl(path):
                where = f"{path}:{lineno}"
                if isinstance(obj, dict) and "token_ids" in obj:
                    try:
                        yield token_ids(obj["token_ids"], "token_ids", vocab_size)
                    except ValueError as e:
                        raise _error(where, str(e)) from None
                elif isinstance(obj, dict) and isinstance(obj.get("text"), str):
                    yield obj["text"]
                else:
                    raise _error(where, "expected an object with 'token_ids' or 'text'")
        except JsonlError as e:
            raise SpecdraftConfigError(f"invalid specdraft option corpus_files: {e}; {ACCEPTED}") from None
        except OSError as e:
            raise _error(path, f"cannot read it ({e.strerror})") from None
        return
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _error(path, f"cannot read it ({e.strerror})") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise _error(path, f"a binary file (NUL byte at offset {nul})")
    try:
        yield data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise _error(f"{path}:{line}", f"not UTF-8 ({e.reason} at byte {e.start})") from None


SCOPES_ACCEPTED = ("accepted: a path, or {\"path\": PATH, \"scopes\": [...]} where each scope is a "
                   "tenant's cache_salt (a string) or null (requests without one)")


def corpus_entry(entry):
    """One ``corpus_files`` entry as the config keeps it: a path (served to every scope), or
    (path, scopes) for a corpus served to those tenant scopes only (None: the unsalted pool)."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, tuple) and len(entry) == 2:
        entry = {"path": entry[0], "scopes": entry[1]}
    if not isinstance(entry, dict) or set(entry) - {"path", "scopes"} or "path" not in entry:
        raise SpecdraftConfigError(f"invalid specdraft option corpus_files entry {entry!r}; "
                                   f"{SCOPES_ACCEPTED}")
    path, scopes = entry["path"], entry.get("scopes")
    if not isinstance(path, str) or not path:
        raise SpecdraftConfigError(f"invalid specdraft option corpus_files entry {entry!r}: "
                                   f"'path' must be a file path; {SCOPES_ACCEPTED}")
    if scopes is None:
        return path
    if not isinstance(scopes, (list, tuple)) or not all(s is None or isinstance(s, str)
                                                        for s in scopes):
        raise SpecdraftConfigError(f"invalid specdraft option corpus_files entry {entry!r}: "
                                   f"'scopes' must be a list; {SCOPES_ACCEPTED}")
    return (path, tuple(scopes))


def corpus_entries(entries: Iterable) -> list[tuple[str, tuple | None]]:
    """(path, scopes or None for every scope) of each ``corpus_files`` entry."""
    out = []
    for e in entries:
        e = corpus_entry(e)
        out.append((e, None) if isinstance(e, str) else e)
    return out


def check_corpus_files(paths: Iterable, vocab_size: int | None = None) -> None:
    """Read and parse every corpus file (no tokenizing); raises SpecdraftConfigError."""
    for path, _ in corpus_entries(paths):
        for _ in _documents(path, vocab_size):
            pass


def read_corpus(path: str, tokenizer=None, vocab_size: int | None = None) -> list[list[int]]:
    """Token sequences from a corpus file."""
    out: list[list[int]] = []
    for doc in _documents(path, vocab_size):
        if isinstance(doc, str):
            if tokenizer is None:
                raise SpecdraftConfigError(
                    f"corpus file {path} holds text but no tokenizer is available here; "
                    "give token_ids in a .jsonl file instead")
            doc = list(tokenizer.encode(doc, add_special_tokens=False))
        out.append(doc)
    return out
