"""The ``specdraft`` command itself: version, help of every subcommand, one-line errors."""

from __future__ import annotations

import argparse
import importlib.metadata as importlib_metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import specdraft
from specdraft import cli

ROOT = Path(__file__).resolve().parent.parent


def test_version_is_the_packages() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert specdraft.__version__ == declared == importlib_metadata.version("specdraft")
    out = subprocess.run([sys.executable, "-m", "specdraft.cli", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == declared


def test_unknown_command_is_one_line(capsys) -> None:
    assert cli.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "demo" in err


# The subcommands whose options are documented here (demo, bench and live have their own tests).
DOCUMENTED = ["record", "replay", "overhead", "report", "models", "hf-bench", "workloads"]


class _Parsed(Exception):
    pass


def _parsers(command: str, monkeypatch) -> list[argparse.ArgumentParser]:
    """The argument parser of ``specdraft COMMAND`` and of each of its subcommands."""
    import importlib

    def capture(self, args=None, namespace=None):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    module = importlib.import_module(cli.SUBCOMMANDS[command][0])
    try:
        module.main([])
    except _Parsed as e:
        top = e.args[0]
    found, todo = [], [top]
    while todo:
        p = todo.pop()
        found.append(p)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


@pytest.mark.parametrize("command", DOCUMENTED)
def test_every_option_has_help_and_shows_its_default(command: str, monkeypatch) -> None:
    for p in _parsers(command, monkeypatch):
        assert p.formatter_class is cli.HelpFormatter, p.prog
        text = p.format_help()
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{p.prog} {action.dest}: no help"
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                shown = (" ".join(map(str, action.default))
                         if isinstance(action.default, (list, tuple)) else str(action.default))
                assert "".join(f"(default: {shown})".split()) in "".join(text.split()), (p.prog,
                                                                                   action.dest)


def test_bad_choice_names_the_option_and_the_accepted_values(capsys) -> None:
    from specdraft import replay

    with pytest.raises(SystemExit) as e:
        replay.main(["--traces", "t.jsonl", "--json", "o.json", "--methods", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--methods" in err and "invalid choice: 'nope'" in err and "vllm-ngram" in err
