"""The vLLM version guard: supported versions map to their adapter, others fail clearly.

No engine is started.
"""

from __future__ import annotations

import logging

import pytest

from specdraft import adapters
from specdraft.adapters import UnsupportedEngineVersion, supported_vllm_range, vllm_adapter_name


@pytest.mark.parametrize("version", ["0.32.0", "0.32.0+cpu", "0.32.3", "0.32.1rc1", "v0.32.2"])
def test_supported_versions_use_the_0_32_adapter(version):
    assert vllm_adapter_name(version) == "specdraft.adapters.vllm_v0_32"


@pytest.mark.parametrize("version", ["0.33.0", "0.33.2", "0.33.1rc1"])
def test_0_33_versions_use_the_0_33_adapter(version):
    assert vllm_adapter_name(version) == "specdraft.adapters.vllm_v0_33"


@pytest.mark.parametrize("version", ["0.34.0", "0.34.1", "0.34.2rc1"])
def test_0_34_versions_use_the_0_34_adapter(version):
    assert vllm_adapter_name(version) == "specdraft.adapters.vllm_v0_34"


@pytest.mark.parametrize("version", ["0.31.9", "0.35.0", "0.40.1", "1.0.0", "0.9.2"])
def test_unsupported_versions_name_the_supported_range(version):
    with pytest.raises(UnsupportedEngineVersion) as e:
        vllm_adapter_name(version)
    assert supported_vllm_range() in str(e.value)
    assert version in str(e.value)


def test_ranges_do_not_overlap_and_modules_import():
    import importlib

    spans = sorted((lo, hi) for lo, hi, _ in adapters.VLLM_ADAPTERS)
    for (lo, hi), (next_lo, _) in zip(spans, spans[1:]):
        assert hi <= next_lo
    for lo, hi, module in adapters.VLLM_ADAPTERS:
        assert lo < hi
        mod = importlib.import_module(module)
        assert mod.SUPPORTED == (lo, hi)


def test_installed_vllm_is_supported():
    assert adapters.vllm_adapter().__name__ == "specdraft.adapters.vllm_v0_32"


def test_proposer_refuses_to_start_on_an_unsupported_vllm(monkeypatch):
    from specdraft.plugins.vllm import SuffixProposer

    monkeypatch.setattr(adapters, "installed_vllm_version", lambda: "0.31.0")
    with pytest.raises(UnsupportedEngineVersion, match=r">=0\.32\.0,<0\.35\.0"):
        SuffixProposer(vllm_config=None)


def test_plugin_registers_quietly_on_an_unsupported_vllm(monkeypatch, caplog):
    # The general plugin runs for every vLLM user of the environment: it must never raise.
    from specdraft.plugins import vllm_plugin

    monkeypatch.setattr(adapters, "installed_vllm_version", lambda: "0.31.0")
    with caplog.at_level(logging.WARNING, logger="vllm.specdraft"):
        vllm_plugin.register()
    assert "0.31.0" in caplog.text and ">=0.32.0,<0.35.0" in caplog.text


def test_sampler_fix_only_for_affected_versions():
    from specdraft.adapters import vllm_v0_32

    assert vllm_v0_32.sampler_fix_needed((0, 32, 0))
    assert vllm_v0_32.sampler_fix_needed((0, 33, 0))
    assert not vllm_v0_32.sampler_fix_needed((0, 31, 0))
    assert not vllm_v0_32.sampler_fix_needed((0, 34, 0))
