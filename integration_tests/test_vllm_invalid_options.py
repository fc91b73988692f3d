"""Invalid specdraft options fail vLLM's startup, before any engine process starts, with a
message that names the option and what is accepted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import engine_kwargs, spec_config

pytest.importorskip("vllm")


def build_config(model_path, speculative_config):
    """What vllm.LLM and vllm serve do first (in process 0): build the engine config."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(**engine_kwargs(model_path, speculative_config=speculative_config)
                      ).create_engine_config()


CASES = [
    (spec_config(global_cache_token=5), r"unknown specdraft option\(s\) 'global_cache_token'.*"
                                        r"accepted options: .*global_cache_tokens"),
    (spec_config(adaptive="yes"),
     r"invalid specdraft option adaptive='yes': accepted true or false"),
    (spec_config(global_cache_tokens=-1), r"global_cache_tokens=-1.*integer >= 0"),
    (spec_config(strategy="beam"), r"strategy='beam'.*'suffix' \| 'tree' \| 'lookup'"),
    (spec_config("specdraft.plugins.vllm.LookupProposer", strategy="suffix"),
     r"LookupProposer drafts with strategy 'lookup'.*SuffixProposer"),
    (spec_config(corpus_files=["/nonexistent/corpus.jsonl"]),
     r"corpus_files: '/nonexistent/corpus.jsonl' is not a file"),
    (spec_config("specdraft.plugins.vllm.SufixProposer"),
     r"'specdraft.plugins.vllm.SufixProposer' is not a specdraft proposer; choose one of .*"
     r"SuffixProposer"),
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
      "specdraft": {"strategy": "suffix"}},
     r"specdraft options .* but does not use a specdraft proposer"),
    ({**spec_config(), "specdraft": 42}, r"must be an object of specdraft options or the path"),
    ({**spec_config(), "specdraft": "/nonexistent/options.json"},
     r"cannot read options file '/nonexistent/options.json'"),
]


@pytest.mark.parametrize("speculative_config,message", CASES)
def test_invalid_options_fail_startup(model_path, speculative_config, message):
    from specdraft.proposers import SpecdraftConfigError

    with pytest.raises(SpecdraftConfigError, match=message):
        build_config(model_path, speculative_config)


def test_llm_constructor_raises_the_same_error(model_path):
    from specdraft.proposers import SpecdraftConfigError
    from vllm import LLM

    with pytest.raises(SpecdraftConfigError, match="unknown specdraft option"):
        LLM(**engine_kwargs(model_path, speculative_config=spec_config(cache_size=1)))


def test_options_file_and_inline_options_reach_the_config(model_path, tmp_path):
    from specdraft.adapters import vllm_adapter

    adapter = vllm_adapter()
    path = tmp_path / "specdraft.json"
    path.write_text(json.dumps({"global_cache_tokens": 1234, "adaptive": False}))
    config = build_config(model_path, {**spec_config(), "specdraft": str(path)})
    options = getattr(config.speculative_config, adapter.OPTIONS_ATTR)
    assert options == {"global_cache_tokens": 1234, "adaptive": False, "strategy": "suffix"}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    from specdraft.proposers import SpecdraftConfigError

    with pytest.raises(SpecdraftConfigError, match="bad.json' is not JSON"):
        build_config(model_path, {**spec_config(), "specdraft": str(bad)})


def test_server_exits_with_the_message(model_path):
    config = spec_config(strategy="beam")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
           "--speculative-config", json.dumps(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    output = proc.stderr + proc.stdout
    assert "SpecdraftConfigError: invalid specdraft option strategy='beam'" in output
