"""The examples run as a user runs them: each is started as its own process (a real vLLM CPU
engine; the Ray Serve one a real local Ray cluster with HTTP on 127.0.0.1), must exit 0, and
must show drafts accepted. An example that no test runs goes stale unseen (the Ray Serve one's
counter reader once failed on the metrics' HELP lines).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import free_port

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(args: list[str], timeout: float = 900, **env: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env})
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def test_vllm_offline_example_drafts() -> None:
    out = run_example(["examples/vllm_offline.py"])
    m = re.search(r"specdraft: (\d+) drafts .* (\d+) of (\d+) verified draft tokens accepted", out)
    assert m, out[-2000:]
    drafts, accepted, verified = map(int, m.groups())
    assert drafts > 0 and 0 < accepted <= verified


def test_ray_serve_llm_example_drafts_more_in_the_repeat() -> None:
    pytest.importorskip("ray.serve.llm")
    out = run_example(["examples/ray_serve_llm.py", "--max-tokens", "32",
                       "--port", str(free_port())],
                      RAY_memory_monitor_refresh_ms="0")
    # per round: "replica drafted accepted pulled published", then one row per replica
    rows = re.findall(r"round (\d): .*\n.*replica.*\n\s+\d+\s+(\d+)\s+(\d+)", out)
    assert [r[0] for r in rows] == ["1", "2"], out[-2000:]
    accepted = [int(r[2]) for r in rows]
    # the second round repeats the first's prompts: its answers are in the global cache
    assert accepted[1] > accepted[0], out[-2000:]
