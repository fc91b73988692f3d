"""specdraft on vLLM 0.34, tested against vLLM 0.34's own Python code as far as it runs here.

vLLM 0.34 has no CPU build, and its CPU runner needs Triton with a CPU backend (not on PyPI), so
no 0.34 engine runs on these machines. What runs: 0.34's Python files (unpacked from its wheel by
scripts/setup.sh into ``.cache/vllm-0.34.0``) first on ``PYTHONPATH`` in this environment, in
subprocesses:

* its configuration path, from ``--speculative-config`` through its CLI parser to the built
  ``SpeculativeConfig`` (``vllm034_config_probe.py``);
* specdraft's speculator with vLLM 0.34's request state and batch (``vllm034_env_checks.py``,
  a pytest file run in that environment);
* steps recorded from a live vLLM 0.32 engine on the prompts of every committed bench trace
  (``record_steps.py``: real scheduling, chunked prefill, finishes, tenants, opt-outs), replayed
  through the 0.32 adapter and the 0.34 adapter: both must draft what the live engine's proposer
  drafted, step for step;
* every committed bench trace's steps, simulated with acceptance by the recorded outputs, with
  and without the adaptive controller, through both adapters (``adapter_replay.py``): identical
  drafts, step for step.

A missing 0.34 source is a failure, not a skip: the adapter would ship unchecked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VLLM034 = REPO / ".cache" / "vllm-0.34.0"
TRACES = sorted(str(p) for p in (REPO / "benchmarks" / "traces").glob("*.jsonl*"))
# steps a live vLLM 0.32 engine handed specdraft, with its drafts (record_steps.py)
RECORDED = sorted(str(p) for p in (HERE / "data").glob("recorded-steps-*.jsonl.gz"))
OPTIONS = ['{"cost_model": "gpu", "adaptive": true}',
           '{"cost_model": "gpu", "adaptive": false, "strategy": "tree"}']


def _env(vllm034: bool) -> dict:
    if vllm034 and not (VLLM034 / "vllm" / "version.py").is_file():
        pytest.fail(f"vLLM 0.34's Python files are needed: no {VLLM034}. Run scripts/setup.sh "
                    "(stage vllm-next unpacks them from the 0.34.0 wheel)")
    env = dict(os.environ)
    paths = ([str(VLLM034)] if vllm034 else []) + [str(HERE)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(args: list[str], vllm034: bool, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], env=_env(vllm034), cwd=HERE,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-4000:]}" \
                                 f"\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def probe(model_path):
    proc = _run(["vllm034_config_probe.py", model_path], vllm034=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"case"')]  # not vLLM's logs
    return {c["case"]: c for c in map(json.loads, lines)}


def test_speculative_config_builds_with_the_registered_method(probe):
    c = probe["valid"]
    # every config is built; vLLM stops only at the end, for want of Triton's CPU backend
    assert c["error"] == "RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu)."
    cfg = c["config"]
    assert cfg["custom_method"] == "specdraft" and cfg["num_speculative_tokens"] == 16
    assert cfg["speculator_class"] == "specdraft.adapters.vllm_v0_34.speculator.SpecdraftSpeculator"
    options = {"strategy": "suffix", "global_cache_tokens": 100000}
    assert cfg["speculator_options"] == options and cfg["specdraft_options"] == options
    assert probe["defaults"]["config"]["num_speculative_tokens"] == 8


@pytest.mark.parametrize("case,message", [
    ("bad-option", "invalid specdraft option max_depth=-3: accepted an integer in [1, 64]"),
    ("unknown-option", "unknown specdraft option(s) 'global_cache'; accepted options: adaptive,"),
    ("bad-strategy", "invalid specdraft option strategy='eagle': accepted 'suffix' | 'tree' | "
                     "'lookup'"),
    ("k-too-long", "speculative_config['num_speculative_tokens'] = 600 does not fit "
                   "max_model_len = 512: accepted an integer in [1, 511]"),
    # custom_class is gone in 0.34; vLLM's own error names the registered method
    ("custom_class", "registered custom methods: ['specdraft']"),
])
def test_a_bad_speculative_config_stops_with_one_line(probe, case, message):
    c = probe[case]
    assert c["config"] is None and c["error"].startswith("ValidationError")
    assert message in c["error"]


def test_the_speculator_against_vllm034s_request_state_and_batch():
    proc = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "vllm034_env_checks.py"],
                vllm034=True)
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_recorded_engine_steps_draft_the_same_through_both_adapters(tmp_path):
    assert len(RECORDED) == 2, RECORDED
    out = {}
    for version, vllm034 in (("0.32", False), ("0.34", True)):
        path = tmp_path / f"recorded-{version}.json"
        _run(["adapter_replay.py", version, str(path), *RECORDED, "--recorded"], vllm034=vllm034)
        out[version] = json.loads(path.read_text())["results"]
    steps = 0
    for trace in RECORDED:
        live = out["0.32"][trace].pop("recorded")
        (options, ours), = out["0.32"][trace].items()
        theirs = out["0.34"][trace][options]
        assert len(live) == len(ours) == len(theirs)
        for i, (a, b, c) in enumerate(zip(live, ours, theirs)):
            assert a == b == c, f"{Path(trace).name}: step {i}: live {a}, 0.32 {b}, 0.34 {c}"
        steps += len(live)
    assert steps > 300


@pytest.mark.slow
def test_034_and_032_adapters_draft_the_same_on_every_trace(tmp_path):
    assert len(TRACES) >= 10
    out = {}
    for version, vllm034 in (("0.32", False), ("0.34", True)):
        path = tmp_path / f"drafts-{version}.json"
        _run(["adapter_replay.py", version, str(path), *TRACES,
              *[a for o in OPTIONS for a in ("--options", o)]], vllm034=vllm034)
        out[version] = json.loads(path.read_text())["results"]
    steps = 0
    for trace in TRACES:
        for options in OPTIONS:
            a, b = out["0.32"][trace][options], out["0.34"][trace][options]
            assert len(a) == len(b), (trace, options)
            for i, (x, y) in enumerate(zip(a, b)):
                assert x == y, f"{Path(trace).name} {options}: step {i} differs:\n{x}\n{y}"
            steps += len(a)
    drafted = sum(len(d) for t in out["0.34"].values() for s in t.values() for r in s for d in r)
    assert steps > 10000 and drafted > 100000
