"""The examples run as a user runs them: each is started as its own process (a real vLLM CPU
engine; the Ray Serve one a real local Ray cluster with HTTP on 127.0.0.1), must exit 0, and
must show drafts accepted. An example that no test runs goes stale unseen (the Ray Serve one's
counter reader once failed on the metrics' HELP lines). ``examples/vllm_serve.sh`` starts a real
vLLM OpenAI server on 127.0.0.1 and queries it with curl.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import free_port

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(args: list[str], timeout: float = 900, **env: str) -> str:
    """Run ``python ARGS`` (``bash ARGS`` for a shell script; its ``python`` is this one)."""
    cmd = ["bash", *args] if args[0].endswith(".sh") else [sys.executable, *args]
    env = {**env, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
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


def test_vllm_serve_example_answers_and_drafts() -> None:
    from specdraft.plugins.ray_serve import metric_sums

    out = run_example(["examples/vllm_serve.sh"], PORT=str(free_port()))
    answer = json.loads(next(line for line in out.splitlines() if '"text_completion"' in line))
    assert answer["usage"]["completion_tokens"] == 64, answer
    assert sum(line.startswith("data: {") for line in out.splitlines()) > 1, out[-2000:]  # streamed
    counts = metric_sums(out, ("specdraft:", "vllm:spec_decode_num_accepted_tokens_total"))
    assert counts["specdraft:accepted_tokens_total"] > 0, counts
    assert counts["vllm:spec_decode_num_accepted_tokens_total"] > 0, counts


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
