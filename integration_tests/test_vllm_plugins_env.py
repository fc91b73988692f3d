"""VLLM_PLUGINS set to a list without specdraft: vLLM never runs specdraft's plugin, so the
"specdraft" key of the speculative config is unknown to vLLM's config check, and a specdraft
proposer has no options from process 0. Both stop start-up; the proposer's message names
VLLM_PLUGINS (README, vLLM section)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import spec_config

pytest.importorskip("vllm")

OTHER = "lora_filesystem_resolver"  # a plugin name that is not specdraft's


def start_server(model_path: str, config: dict, plugins: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
           "--speculative-config", json.dumps(config)]
    env = {**os.environ, "VLLM_PLUGINS": plugins, "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def test_specdraft_proposer_without_the_plugin_names_vllm_plugins(model_path):
    proc = start_server(model_path, spec_config(), OTHER)  # no "specdraft" key
    assert proc.returncode != 0
    output = proc.stderr + proc.stdout
    assert (f"specdraft's vLLM plugin did not run: VLLM_PLUGINS='{OTHER}' leaves it out; add it "
            f"(VLLM_PLUGINS={OTHER},specdraft) or unset VLLM_PLUGINS") in output


def test_specdraft_key_without_the_plugin_fails_vllms_config_check(model_path):
    proc = start_server(model_path, spec_config(strategy="tree"), OTHER)
    assert proc.returncode != 0
    output = proc.stderr + proc.stdout
    # vLLM's own message (what the README tells users to look for), before any engine starts
    assert "validation error for SpeculativeConfig\nspecdraft\n  Unexpected keyword argument" in output
    assert "EngineCore" not in output
