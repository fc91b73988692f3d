"""Memory planning for live runs: engines that do not fit together run one at a time, and a plan
larger than the machine stops with one line before any engine starts (a fake memory figure via
SPECDRAFT_MEMORY_AVAILABLE; no real out-of-memory)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from specdraft import live

GiB = 2**30


def write_safetensors(path, shapes: dict[str, list[int]]) -> None:
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


@pytest.fixture
def model_dir(tmp_path):
    # 1.25e8 parameters in two files: 0.5 GB of float32 weights
    write_safetensors(tmp_path / "a.safetensors", {"w": [1000, 100_000]})
    write_safetensors(tmp_path / "b.safetensors", {"x": [250, 100_000], "__metadata__": []})
    return tmp_path


def test_parameters_from_headers(model_dir):
    assert live.model_parameters(model_dir) == 125_000_000


def test_parameters_need_safetensors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        live.model_parameters(tmp_path)


def test_plan_modes(model_dir, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    per_engine = int(0.5e9 * (1 + live.WEIGHT_EXTRA)) + GiB + live.ENGINE_FIXED
    plenty = live.plan_engines(model_dir, 4, available=64 * GiB)
    assert plenty.mode == "together" and plenty.per_engine == per_engine
    assert plenty.needed_together == live.DRIVER_FIXED + 4 * per_engine
    tight = live.plan_engines(model_dir, 4, available=8 * GiB)
    assert tight.mode == "one-at-a-time"
    assert "one at a time" in tight.describe() and "8.0 GiB available" in tight.describe()
    with pytest.raises(live.MemoryPlanError) as e:
        live.plan_engines(model_dir, 4, available=2 * GiB)
    msg = str(e.value)
    assert "\n" not in msg and "not enough memory for one engine" in msg and "2.0 GiB available" in msg
    # bfloat16 halves the weights
    assert live.plan_engines(model_dir, 1, "bfloat16", available=64 * GiB).weights == 250_000_000


def test_fake_memory_figure(monkeypatch):
    monkeypatch.setenv(live.MEMORY_ENV, "1.5G")
    assert live.available_memory() == int(1.5 * GiB)
    monkeypatch.setenv(live.MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match=live.MEMORY_ENV):
        live.available_memory()


def test_real_memory_figure(monkeypatch):
    monkeypatch.delenv(live.MEMORY_ENV, raising=False)
    assert live.available_memory() > 0


TRACE = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "traces", "smollm2-135m.jsonl")


@pytest.mark.parametrize("command", [
    ["bench", "--traces", TRACE, "--limit", "2"],
    ["demo"],
    ["record", "--workload", "chat", "-n", "1"],
])
def test_plan_larger_than_machine_stops_before_any_engine(command, model_dir, tmp_path):
    """The command ends at once with the one-line message; no engine process is started (vLLM's
    engine start would print its banner, and the test would take minutes, not seconds)."""
    out = tmp_path / "out.json"
    args = command + ["--model", str(model_dir)]
    args += ["--out", str(tmp_path / "t.jsonl")] if command[0] == "record" else ["--json", str(out)]
    env = dict(os.environ, **{live.MEMORY_ENV: "1G"})
    proc = subprocess.run([sys.executable, "-m", "specdraft.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "not enough memory for one engine" in errors[0], proc.stderr
    assert "1.0 GiB available" in errors[0]
    assert "starting the vLLM engine" not in proc.stdout and "vLLM" not in proc.stderr.replace(
        "VLLM_CPU_KVCACHE_SPACE", "")
    assert not out.exists()
