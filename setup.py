# The native suffix index is the only compiled piece; everything else is declared in pyproject.toml.
from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

setup(
    ext_modules=[
        Pybind11Extension(
            "specdraft.proposers._suffix_native",
            ["proposers/native/suffix_index.cc"],
            depends=["proposers/native/suffix_index.h", "proposers/native/suffix_core.h",
                     "proposers/native/controller.h", "proposers/native/step.h"],
            cxx_std=17,
            extra_compile_args=["-O3"],
        )
    ],
    cmdclass={"build_ext": build_ext},
)
