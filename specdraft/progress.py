"""Progress of long jobs: a line per event always, and on a terminal a tqdm bar with counts and
an ETA (tqdm comes with vLLM; without it, or when output goes to a file or a CI log, only the
lines)."""

from __future__ import annotations

import os
import sys


def _columns(stream) -> int:
    """The width of the terminal ``stream`` writes to (0: unknown, or not a terminal)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


class Progress:
    """``say(msg)`` prints a line (above the bar while one is shown); ``advance()`` counts one
    unit of ``total`` done. Lines and bar go to ``stream`` (default: lines to stdout, the bar to
    stderr). A context manager: the bar goes away on exit."""

    def __init__(self, total: int, desc: str, unit: str = "run", stream=None):
        self.stream = stream or sys.stdout
        self.bar = None
        try:
            from tqdm import tqdm
        except ImportError:
            return
        file = stream or sys.stderr
        # A terminal that reports no width (a pseudo terminal nobody sized: `script` off a
        # terminal, some CI consoles) would get a bar cut to nothing: draw it 80 columns wide.
        sized = _columns(file) > 0
        # disable=None: tqdm shows the bar only on a terminal
        self.bar = tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False,
                        dynamic_ncols=sized, ncols=None if sized else 80, file=file)
        if self.bar.disable:
            self.bar = None

    def say(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
