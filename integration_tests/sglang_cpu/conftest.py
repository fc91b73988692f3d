"""The real SGLang 0.5.23 package on a machine without a GPU, with two stand-ins.

These tests run in their own pytest process, started by ``integration_tests/test_sglang_cpu.py``
with ``SPECDRAFT_SGLANG_CPU_TESTS=1``: importing SGLang patches transformers and the stand-ins
below are process-wide, so they must not share a process with the vLLM engine tests. Without
that variable this folder collects nothing.

Stand-ins (only for what cannot run here; no SGLang code is replaced):

* ``sgl_kernel``: SGLang's compiled CUDA/CPU kernel package. No build of it installs on these
  machines, and SGLang imports it at module level (``ngram_worker`` -> ``reconstruct_tree``,
  quantization utils). A placeholder module lets those imports succeed; nothing here calls it.
  The tree kernels the tests run are SGLang's own Triton kernels
  (``reconstruct_indices_from_tree_mask_triton``, ``verify_tree_greedy_triton``: the XPU path,
  documented as the compiled op's exact contract), executed by Triton's CPU interpreter
  (``TRITON_INTERPRET=1``).
* ``torchvision``: imported by SGLang's multimodal configs on the ``ngram_info``/server-argument
  import path. The only torchvision builds on PyPI are CUDA builds, whose operators do not load
  against the CPU torch (``torchvision::nms does not exist``). Nothing speculative uses it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

import pytest

ENV = "SPECDRAFT_SGLANG_CPU_TESTS"

if os.environ.get(ENV) != "1":
    collect_ignore_glob = ["test_*.py"]
else:
    # Before SGLang's kernel modules are imported: @triton.jit then builds interpreted kernels.
    os.environ["TRITON_INTERPRET"] = "1"

STAND_INS = ("sgl_kernel", "torchvision")


class _Placeholder:
    """Any attribute, call, subscript or base class of a stood-in module."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __getitem__(self, item):
        return _Placeholder()

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STAND_INS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, "stand-in (see integration_tests/sglang_cpu)")
        module.__path__ = []

        def module_getattr(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Placeholder()

        module.__getattr__ = module_getattr
        return module

    def exec_module(self, module):
        pass


def install_stand_ins() -> None:
    import sglang  # noqa: F401  first: transformers must see no torchvision

    for name in STAND_INS:
        try:
            __import__(name)
            continue  # a working install needs no stand-in
        except Exception:  # noqa: BLE001 - absent, or a CUDA build that cannot load here
            for mod in [m for m in sys.modules if m.split(".")[0] == name]:
                del sys.modules[mod]
        if not any(isinstance(f, _StandInFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _StandInFinder())


@pytest.fixture(scope="session")
def sglang_cpu():
    install_stand_ins()
    from sglang.srt.plugins import load_plugins

    load_plugins()  # what every SGLang process does: runs specdraft's entry point
    return sys.modules["sglang"]


@pytest.fixture(scope="session")
def model_dir() -> str:
    path = os.environ.get("SPECDRAFT_TEST_MODEL")
    if path:
        return path
    from specdraft.models import model_path

    return model_path("smollm2-135m")
