"""SGLang CPU tests (integration_tests/sglang_cpu/), run in a pytest process of their own.

Importing SGLang patches transformers, and the stand-ins those tests need (no sgl_kernel or
torchvision build loads on these machines) are process-wide, so they do not share a process with
the vLLM engine tests. scripts/setup.sh installs the real ``sglang`` package (without its CUDA
dependencies); serving on a GPU is checked by integration_tests/gpu/sglang_check.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sglang_cpu_suite():
    import importlib.util

    assert importlib.util.find_spec("sglang") is not None, (
        "sglang is not installed: run bash scripts/setup.sh (stage sglang)")
    env = dict(os.environ, SPECDRAFT_SGLANG_CPU_TESTS="1")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(HERE, "sglang_cpu"), "-q", "-rA",
         "-p", "no:cacheprovider", "-W", "ignore", "--durations=0"],
        capture_output=True, text=True, env=env, cwd=os.path.dirname(HERE), timeout=900)
    print(out.stdout[-20000:])
    assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-4000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary), summary
    assert not re.search(r"skipped|xfail|deselected|error", summary), summary
