"""specdraft.plugins.ray_serve.llm_config: replicas are placed where the installed vLLM runs
(CPU build: Ray's CPU path; otherwise Ray's GPU default), unless ``cpu`` says otherwise."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.serve.llm")

from specdraft.plugins.ray_serve import app_builder, llm_config, vllm_runs_on_cpu  # noqa: E402


def test_default_follows_the_installed_vllm() -> None:
    # these machines run vLLM's CPU build: its platform says CPU
    assert vllm_runs_on_cpu() is True
    assert llm_config("/m").accelerator_config.kind == "cpu"


def test_explicit_cpu_setting_wins() -> None:
    assert llm_config("/m", cpu=True).accelerator_config.kind == "cpu"
    assert llm_config("/m", cpu=False).accelerator_config.kind == "gpu"


def test_app_builder_without_cpu_follows_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    import specdraft.plugins.ray_serve as rs

    monkeypatch.setattr(rs, "build_app", lambda config, **kw: seen.append(config))
    app_builder({"model": "/m"})
    app_builder({"model": "/m", "cpu": "false"})
    assert [c.accelerator_config.kind for c in seen] == ["cpu", "gpu"]
