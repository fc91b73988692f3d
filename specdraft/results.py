"""One writer for every benchmark command's results: the JSON file, and a chart beside it.

The chart is optional (matplotlib is a dev extra): without it the JSON is still written and the
command says there is no chart.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable


def write_results(path: str, data: Any, *, plot: Callable[[str], None] | None = None,
                  png: str | None = None, say: Callable[[str], None] = print,
                  tag: str = "specdraft") -> str | None:
    """Writes ``data`` as JSON to ``path`` (folders created), then ``plot(png)`` draws the chart
    at ``png`` (default: ``path`` with ``.png``). ``say`` reports each file, prefixed ``[tag]``.
    Returns the chart's path, or None when there is none."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    say(f"[{tag}] results: {path}")
    if plot is None:
        return None
    png = png or os.path.splitext(path)[0] + ".png"
    try:
        plot(png)
    except ImportError:
        say(f"[{tag}] matplotlib not installed: no chart")
        return None
    say(f"[{tag}] chart: {png}")
    return png
