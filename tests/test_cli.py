"""The ``specdraft`` command itself: version, help of every subcommand, one-line errors."""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import subprocess
import sys
import tomllib
from pathlib import Path

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
