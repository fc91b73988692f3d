"""Every command in the ```bash blocks of README.md, docs/*.md and BENCHMARKS.md names something
that exists: a `make` target in the Makefile, a `specdraft` subcommand (specdraft/cli.py) and
options that subcommand's parser accepts, a script or file of this repository, a specdraft module for `python -m`, or one of the outside
programs listed below. A renamed target, subcommand or moved script fails here, before a reader
types it.

This checks what each command runs, not its run. Where a command does run in the suite:
`make test` is the suite; `make demo` is not run by a test (it is timed), but its engines, rounds
and table are `specdraft bench`'s (integration_tests/test_bench_rounds.py, test_bench_cli.py);
`vllm serve` and the Ray Serve examples: integration_tests/test_examples.py runs
examples/vllm_serve.sh, vllm_offline.py and ray_serve_llm.py as written; `curl ... vllm_xargs`:
test_vllm_serve.py; the SGLang plugin: test_sglang_cpu.py on CPU (not the launch: no CPU build);
`specdraft workloads`: tests/test_workloads.py; `specdraft report --check`: tests/test_report.py.
The rest are timed benchmarks and experiments, which no test repeats.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from specdraft.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]

# programs from outside this repository that the docs use (the engines' own commands, the shell's)
OUTSIDE = {"vllm", "serve", "curl", "pip", "cat", "cp", "taskset", "wait", "for", "do", "done",
           "cd", "export", "echo", "git"}
# `python -m` modules from outside this repository
OUTSIDE_MODULES = {"sglang", "vllm", "build", "pytest", "pip"}
PYTHONS = {"python", "python3", ".venv/bin/python"}
SEPARATORS = {";", "&&", "||", "|", "&"}

FENCE = re.compile(r"^( *)```bash\n(.*?)^\1```", re.S | re.M)


def bash_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each ```bash block, its indentation removed."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent = len(m.group(1))
        body = "\n".join(line[indent:] for line in m.group(2).splitlines())
        out.append((text[:m.start()].count("\n") + 1, body))
    return out


def commands(block: str) -> list[list[str]]:
    """The block's commands as word lists: lines joined across backslashes and open quotes,
    comments dropped, split at ; && || | &."""
    out, pending = [], ""
    for line in block.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            lex = shlex.shlex(pending, posix=True, punctuation_chars=";&|")
            lex.whitespace_split = True
            words = list(lex)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        cmd: list[str] = []
        for w in words + [";"]:
            if w in SEPARATORS or set(w) <= set(";&|"):
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    assert not pending, f"unterminated command: {pending!r}"
    return out


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w.-]+):", text, re.M))


def is_placeholder(word: str) -> bool:
    """A word the reader substitutes: a shell variable or an UPPERCASE name (TRACE, NAME)."""
    return "$" in word or "*" in word or "{" in word or bool(re.fullmatch(r"[A-Z][A-Z0-9_.]*", word))


def problem(cmd: list[str]) -> str | None:
    """Why ``cmd`` cannot run as written, or None."""
    words = list(cmd)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value prefixes
        words.pop(0)
    if not words:
        return None  # an assignment alone
    prog, args = words[0], words[1:]
    if prog in OUTSIDE:
        return None
    if prog == "make":
        missing = [a for a in args if not a.startswith("-") and a not in makefile_targets()]
        return f"make: no target {missing}" if missing else None
    if prog in ("specdraft", ".venv/bin/specdraft"):
        sub = args[0] if args else None
        if sub in SUBCOMMANDS or sub in ("--version", "-V", "--help", "-h"):
            return None
        return f"specdraft: no subcommand {sub!r} (specdraft/cli.py has {', '.join(SUBCOMMANDS)})"
    if prog in PYTHONS:
        if not args:
            return None
        if args[0] == "-m":
            module = args[1]
            top = module.split(".")[0]
            if top in OUTSIDE_MODULES:
                return None
            if top == "specdraft" and importlib.util.find_spec(module) is not None:
                return None
            return f"python -m {module}: no such module here"
        return None if (ROOT / args[0]).is_file() else f"python: no file {args[0]}"
    if prog == "bash":
        script = next((a for a in args if not a.startswith("-")), None)
        return None if script and (ROOT / script).is_file() else f"bash: no file {script}"
    if "/" in prog:  # a script of this repository run directly
        return None if (ROOT / prog).is_file() else f"no file {prog}"
    return f"unknown program {prog!r} (add it to OUTSIDE if it is meant)"


def input_paths(cmd: list[str]) -> list[str]:
    """Repository files a command reads: `--traces` arguments and example or script files."""
    out = []
    for i, w in enumerate(cmd):
        if is_placeholder(w):
            continue
        if i and cmd[i - 1] == "--traces":
            out.append(w)
        elif re.match(r"(examples|scripts|experiments)/", w):
            out.append(w)
    return out


def specdraft_options(sub: str, monkeypatch) -> set[str]:
    """Every option string of ``specdraft SUB``'s parser and its subcommands' parsers (the
    parser is caught as the subcommand's main hands it its arguments: nothing runs)."""
    class Parsed(Exception):
        pass

    def capture(self, args=None, namespace=None):
        raise Parsed(self)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", capture)
        m.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        try:
            importlib.import_module(SUBCOMMANDS[sub][0]).main([])
        except Parsed as e:
            todo = [e.args[0]]
        else:
            raise AssertionError(f"specdraft {sub}: no argument parser reached")
    found: set[str] = set()
    while todo:
        p = todo.pop()
        for action in p._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


def unknown_options(cmd: list[str], monkeypatch) -> list[str]:
    """The ``--options`` of a ``specdraft SUB`` command that SUB's parser does not know."""
    words = [w for w in cmd if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w)]
    if len(words) < 2 or words[0] not in ("specdraft", ".venv/bin/specdraft") \
            or words[1] not in SUBCOMMANDS:
        return []
    known = specdraft_options(words[1], monkeypatch)
    return [w for w in words[2:] if w.startswith("-") and not is_number(w)
            and w.split("=")[0] not in known]


def is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


CASES = [(p, line, block) for p in DOCS for line, block in bash_blocks(p)]


def test_the_docs_have_command_blocks():
    names = {p.name for p, _, _ in CASES}
    assert {"README.md", "vllm.md", "sglang.md", "ray-serve.md", "transformers.md"} <= names


@pytest.mark.parametrize("path,line,block", CASES,
                         ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _ in CASES])
def test_every_command_names_what_exists(path, line, block, monkeypatch):
    cmds = commands(block)
    assert cmds, f"{path.name}:{line}: an empty bash block"
    bad = []
    for cmd in cmds:
        why = problem(cmd)
        if why:
            bad.append(f"{' '.join(cmd)[:80]}: {why}")
        bad += [f"{' '.join(cmd)[:80]}: no file {f}" for f in input_paths(cmd)
                if not (ROOT / f).exists()]
        bad += [f"{' '.join(cmd)[:80]}: no option {o}" for o in unknown_options(cmd, monkeypatch)]
    assert not bad, f"{path.relative_to(ROOT)}:{line}:\n" + "\n".join(bad)


def test_the_check_catches_a_wrong_command(monkeypatch):
    mp = monkeypatch
    assert problem(["make", "demo"]) is None and problem(["make", "demos"])
    assert problem(["specdraft", "replay", "--traces", "t"]) is None
    assert problem(["specdraft", "replays"])
    assert problem(["python", "experiments/recycling/bound.py"]) is None
    assert problem(["python", "benchmarks/results/recycling/bound.py"])
    assert problem(["python", "-m", "specdraft.cli"]) is None and problem(["python", "-m", "specdraft.nope"])
    assert problem(["frobnicate"])
    assert unknown_options(["specdraft", "replay", "--traces", "t", "--cost-model", "gpu"], mp) == []
    assert unknown_options(["specdraft", "replay", "--trace", "t"], mp) == ["--trace"]
    assert commands("A=1 make demo  # a comment\nvllm serve m --c '{\n  \"a\": 1}'\nfor w in a b; do\n"
                    "  specdraft bench \\\n    --x 1\ndone") == [
        ["A=1", "make", "demo"], ["vllm", "serve", "m", "--c", '{\n  "a": 1}'], ["for", "w", "in", "a", "b"],
        ["do"], ["specdraft", "bench", "--x", "1"], ["done"]]


def _names_in(text: str) -> list[re.Pattern]:
    """Result-file names written in commands of ``text`` (its bash blocks, comments included, and
    its inline `specdraft ...` / `python ...` code), as patterns: `$w` stands for any word and
    `{a,b}` for either."""
    code = "\n".join(b for _, b in bash_blocks_of(text))
    code += "\n" + "\n".join(re.findall(r"`((?:specdraft|\.venv/bin/python|python|--)[^`]*)`", text))
    out = []
    for name in set(re.findall(r"[\w${},.-]+\.json\b", code)):
        pattern = re.escape(name)
        pattern = re.sub(r"\\\$\w+", r"[\\w.-]+", pattern)
        pattern = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace(",", "|") + ")", pattern)
        out.append(re.compile(pattern + r"\Z"))
    return out


def bash_blocks_of(text: str) -> list[tuple[int, str]]:
    return [(text[:m.start()].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text)]


def test_every_generated_table_names_its_command():
    """BENCHMARKS.md names the command behind every table it generates: the result file each
    generated block reads is written by a command shown in the file."""
    from specdraft import report

    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    names = _names_in(text)
    missing = [m.group(3) for m in report.BLOCK.finditer(text)
               if not any(p.search(m.group(3).split("/")[-1]) for p in names)]
    assert not missing, f"generated tables whose command BENCHMARKS.md does not show: {missing}"
