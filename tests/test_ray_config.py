"""specdraft.plugins.ray_serve.llm_config: replicas are placed where the installed vLLM runs
(CPU build: Ray's CPU path; otherwise Ray's GPU default), unless ``cpu`` says otherwise."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.serve.llm")

from specdraft.plugins.ray_serve import (app_builder, llm_config, metric_sums,  # noqa: E402
                                         vllm_runs_on_cpu)


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


def test_start_local_ray_retries_only_the_start_up_timeout(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    # Ray's start-up timeout cannot be caused on demand: ray.init stands in for a start that
    # misses Ray's 30 s window once (its message as Ray 2.60 raises it), then starts
    import ray

    import specdraft.plugins.ray_serve as rs

    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise Exception("The current node timed out during startup. This could happen "
                            "because some of the Ray processes failed to startup.")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(rs, "_stop_ray_children", lambda: None)
    ports = iter([6001, 6002])
    started = rs.start_local_ray(lambda: {"num_cpus": 2, "port": next(ports)})
    assert started == {"num_cpus": 2, "port": 6002}  # the kwargs drawn anew, the second start's
    assert len(calls) == 2
    assert "ray.init attempt 1 of 3" in capsys.readouterr().err

    calls.clear()
    monkeypatch.setattr(ray, "init", lambda **kw: (_ for _ in ()).throw(ValueError("bad option")))
    with pytest.raises(ValueError, match="bad option"):  # any other error: raised at once
        rs.start_local_ray(lambda: {})

    always = []
    monkeypatch.setattr(ray, "init", lambda **kw: always.append(1) or (_ for _ in ()).throw(
        Exception("The current node timed out during startup")))
    with pytest.raises(Exception, match="timed out during startup"):
        rs.start_local_ray(lambda: {}, attempts=2)
    assert len(always) == 2


def test_metric_sums_sums_labels_and_skips_comments() -> None:
    text = ("# HELP specdraft:accepted_tokens_total Accepted draft tokens\n"
            "# TYPE specdraft:accepted_tokens_total counter\n"
            'specdraft:accepted_tokens_total{engine="0",model_name="m"} 12.0\n'
            'specdraft:accepted_tokens_total{engine="1",model_name="m"} 3.0\n'
            "specdraft:global_cache_tokens 7.0\n"
            'ray_vllm_spec_decode_num_accepted_tokens_total{ReplicaId="r"} 15.0\n')
    assert metric_sums(text) == {"specdraft:accepted_tokens_total": 15.0,
                                 "specdraft:global_cache_tokens": 7.0}
    assert metric_sums(text, ("ray_vllm_",)) == {
        "ray_vllm_spec_decode_num_accepted_tokens_total": 15.0}
