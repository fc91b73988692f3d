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
    (spec_config(global_cache_tokens=-1), r"global_cache_tokens=-1.*integer in \[0, "),
    (spec_config(strategy="beam"), r"strategy='beam'.*'suffix' \| 'tree' \| 'lookup'"),
    (spec_config(global_cache_tokens=1000, scope_cache_tokens=2000),
     r"scope_cache_tokens=2000.*integer in \[0, global_cache_tokens=1000\]"),
    (spec_config(max_scopes=0), r"max_scopes=0.*integer in \[1, 65536\]"),
    (spec_config(corpus_files=[{"path": "/nonexistent/c.jsonl", "scopes": "tenant-a"}]),
     r"corpus_files entry .*'scopes' must be a list"),
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


def start_server(model_path: str, config: dict) -> subprocess.CompletedProcess:
    """vLLM's OpenAI server with this speculative config, run until it exits (these configs
    make it exit at start-up)."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
           "--speculative-config", json.dumps(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_server_exits_with_the_message(model_path):
    proc = start_server(model_path, spec_config(strategy="beam"))
    assert proc.returncode != 0
    output = proc.stderr + proc.stdout
    assert "SpecdraftConfigError: invalid specdraft option strategy='beam'" in output


def _corpus(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# (case id, speculative_config built from a tmp folder, message): each is checked in process 0,
# before any engine process starts, and names the option, the value and what is accepted.
FILE_AND_BOUND_CASES = [
    ("corpus-bad-json-line",
     lambda d: spec_config(corpus_files=[_corpus(d, "c.jsonl", b'{"token_ids": [1, 2]}\n{oops\n')]),
     r"corpus_files: .*c\.jsonl:2: not valid JSON.*accepted: a \.jsonl file"),
    ("corpus-binary-file",
     lambda d: spec_config(corpus_files=[_corpus(d, "c.bin", b"\x7fELF\x02\x01\x00\x00")]),
     r"corpus_files: .*c\.bin: a binary file \(NUL byte at offset 6\).*accepted"),
    ("corpus-token-over-vocab",
     lambda d: spec_config(corpus_files=[_corpus(d, "c.jsonl", b'{"token_ids": [1, 49152]}\n')]),
     r"corpus_files: .*c\.jsonl:1: field 'token_ids' .* within the vocabulary's 49152 ids: "
     r"item 1 is 49152"),
    ("corpus-files-not-a-list", lambda d: spec_config(corpus_files=5),
     r"invalid specdraft option corpus_files=5: accepted a list of file paths"),
    ("global-cache-1e20", lambda d: spec_config(global_cache_tokens=10**20),
     r"global_cache_tokens=100000000000000000000: accepted an integer in \[0, 536870912\]"),
    ("global-cache-2**63", lambda d: spec_config(global_cache_tokens=2**63),
     r"global_cache_tokens=9223372036854775808: accepted an integer in \[0, 536870912\]"),
    ("k-over-max-model-len", lambda d: spec_config(k=600),
     r"num_speculative_tokens'\] = 600 does not fit max_model_len = 512: accepted an integer "
     r"in \[1, 511\]"),
]


@pytest.mark.parametrize("make,message", [c[1:] for c in FILE_AND_BOUND_CASES],
                         ids=[c[0] for c in FILE_AND_BOUND_CASES])
def test_files_and_bounds_fail_startup(model_path, tmp_path, make, message):
    from specdraft.proposers import SpecdraftConfigError

    with pytest.raises(SpecdraftConfigError, match=message):
        build_config(model_path, make(tmp_path))


def test_server_exits_on_a_bad_corpus_line_before_any_engine_starts(model_path, tmp_path):
    corpus = _corpus(tmp_path, "corpus.jsonl", b'{"token_ids": [1, 2, 3]}\n\n{"text": 7}\n')
    proc = start_server(model_path, spec_config(corpus_files=[corpus]))
    assert proc.returncode != 0
    output = proc.stderr + proc.stdout
    assert (f"SpecdraftConfigError: invalid specdraft option corpus_files: {corpus}:3: expected "
            "an object with 'token_ids' or 'text'") in output
    assert "EngineCore" not in output  # failed in process 0: no engine process was started
