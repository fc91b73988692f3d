"""The SPECDRAFT algorithm at SGLang start-up: entry point, server arguments, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specdraft.adapters import UnsupportedEngineVersion, sglang_adapter_name
from specdraft.adapters import sglang_v0_5 as adapter


def test_entry_point_registers_the_algorithm_in_a_fresh_interpreter():
    # What each SGLang process does at start: load the sglang.srt.plugins entry points.
    code = (
        "from sglang.srt.plugins import load_plugins\n"
        "load_plugins()\n"
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n"
        "from sglang.srt.speculative.spec_registry import CustomSpecAlgo\n"
        "a = SpeculativeAlgorithm.from_string('specdraft')\n"
        "assert isinstance(a, CustomSpecAlgo), a\n"
        "print(a.name, a.supports_overlap, a.is_ngram(), a.has_draft_kv(), a.need_topk(),"
        " a.carries_draft_hidden_states(), type(a).__module__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["SPECDRAFT", "True", "True", "False", "False", "False",
                                  "specdraft.adapters.sglang_v0_5.register"]


def test_the_algorithm_answers_every_scheduler_question_as_ngram(sglang_cpu):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string("SPECDRAFT")
    ngram = SpeculativeAlgorithm.NGRAM
    # what CustomSpecAlgo 0.5.23 lacks, filled by the adapter
    assert adapter.missing_methods() == ["carries_draft_hidden_states", "create_future_map",
                                         "get_platform_worker_cls", "need_topk"]
    names = [n for n in vars(SpeculativeAlgorithm)
             if n.startswith(("is_", "supports_", "has_", "need_", "carries_"))]
    assert len(names) > 15
    for name in names:
        assert getattr(algo, name)() == getattr(ngram, name)(), name
    assert algo.get_platform_worker_cls() is None
    assert algo.resolve_max_speculative_num_draft_tokens(
        type("Args", (), {"speculative_num_draft_tokens": 9})()) == 9


SPEC_FIELDS = ("speculative_num_draft_tokens", "speculative_eagle_topk", "speculative_num_steps",
               "enable_mixed_chunk", "max_running_requests", "disable_overlap_schedule")


def resolve(model_dir, *argv, env=None):
    """SGLang's own server-argument parsing and resolution pipeline, as launch_server runs it."""
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.server_args import prepare_server_args

    old = os.environ.get(adapter.OPTIONS_ENV)
    if env is None:
        os.environ.pop(adapter.OPTIONS_ENV, None)
    else:
        os.environ[adapter.OPTIONS_ENV] = env
    try:
        args = prepare_server_args(["--model-path", model_dir, "--device", "cpu", *argv])
        args.resolve_once()
    finally:
        if old is None:
            os.environ.pop(adapter.OPTIONS_ENV, None)
        else:
            os.environ[adapter.OPTIONS_ENV] = old
    view = resolving_view(args)
    return {f: getattr(view, f) for f in ("speculative_algorithm",) + SPEC_FIELDS}


def test_server_args_resolve_like_ngram(sglang_cpu, model_dir):
    ours = resolve(model_dir, "--speculative-algorithm", "specdraft",
                   "--speculative-num-draft-tokens", "8", "--speculative-ngram-max-bfs-breadth", "1")
    ngram = resolve(model_dir, "--speculative-algorithm", "NGRAM",
                    "--speculative-num-draft-tokens", "8", "--speculative-ngram-max-bfs-breadth", "1")
    assert ours.pop("speculative_algorithm") == "SPECDRAFT"
    assert ngram.pop("speculative_algorithm") == "NGRAM"
    assert ours == ngram
    # suffix drafts are chains: topk 1; tree drafts branch up to max_children
    assert ours["speculative_eagle_topk"] == 1 and ours["enable_mixed_chunk"] is False
    tree = resolve(model_dir, "--speculative-algorithm", "SPECDRAFT",
                   env='{"strategy": "tree", "max_children": 3}')
    assert tree["speculative_num_draft_tokens"] == adapter.DEFAULT_NUM_DRAFT_TOKENS
    assert tree["speculative_eagle_topk"] == 3


def test_options_file(sglang_cpu, model_dir, tmp_path):
    path = tmp_path / "specdraft.json"
    path.write_text(json.dumps({"strategy": "tree", "max_children": 2}))
    assert resolve(model_dir, "--speculative-algorithm", "SPECDRAFT",
                   env=str(path))["speculative_eagle_topk"] == 2


@pytest.mark.parametrize("argv, env, message", [
    ((), '{"stratgy": "tree"}', "unknown specdraft option(s) 'stratgy'; accepted options:"),
    ((), '{"strategy": "beam"}', "invalid specdraft option strategy='beam': accepted 'suffix' | 'tree'"),
    ((), '{"strategy": ', "SPECDRAFT_SGLANG_OPTIONS: not valid JSON"),
    ((), "[1, 2]", "SPECDRAFT_SGLANG_OPTIONS=" + repr("[1, 2]") + ": not a file and not a JSON object"),
    ((), "/nonexistent/specdraft.json", "not a file and not a JSON object"),
    (("--speculative-num-draft-tokens", "1"), None,
     "--speculative-num-draft-tokens=1 with --speculative-algorithm SPECDRAFT: accepted an integer >= 2"),
    (("--speculative-ngram-external-corpus-path", "/tmp/c.jsonl"), None,
     "give specdraft corpora as the option corpus_files"),
])
def test_bad_arguments_fail_at_start_up_with_the_option_named(sglang_cpu, model_dir, argv, env,
                                                               message):
    with pytest.raises(Exception) as info:
        resolve(model_dir, "--speculative-algorithm", "SPECDRAFT", *argv, env=env)
    assert message in str(info.value)


def test_unsupported_sglang_versions_are_refused_with_the_range(sglang_cpu):
    assert sglang_adapter_name("0.5.23") == "specdraft.adapters.sglang_v0_5"
    with pytest.raises(UnsupportedEngineVersion, match=r"supports SGLang >=0.5.23,<0.5.24; the "
                                                       r"installed SGLang is 0.6.0"):
        sglang_adapter_name("0.6.0")
    # the registered algorithm refuses to start when the plugin found another version
    validate = adapter.validate_server_args_fn("specdraft supports SGLang >=0.5.23,<0.5.24")
    with pytest.raises(RuntimeError, match="supports SGLang"):
        validate(object())
    algo = adapter.spec_class("specdraft supports SGLang >=0.5.23,<0.5.24")("X", lambda a: None)
    with pytest.raises(RuntimeError, match="supports SGLang"):
        algo.create_worker(object())


def test_reqs_carry_the_cache_salt_specdraft_scopes_by(sglang_cpu):
    """adapters/sglang_v0_5/ reads ``Req.cache_salt`` as a request's tenant scope."""
    import inspect

    from sglang.srt.managers.schedule_batch import Req

    assert "cache_salt" in inspect.signature(Req.__init__).parameters
    assert "self.cache_salt" in inspect.getsource(Req.__init__)
