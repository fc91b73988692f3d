# The native suffix index is the only compiled piece; everything else is declared in pyproject.toml.
import glob

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

setup(
    ext_modules=[
        Pybind11Extension(
            "specdraft.proposers._suffix_native",
            ["proposers/native/suffix_index.cc"],
            depends=sorted(glob.glob("proposers/native/*.h")),  # every header: a change rebuilds
            cxx_std=17,
            extra_compile_args=["-O3", "-g0"],  # no debug info: a smaller, quicker build
        )
    ],
    cmdclass={"build_ext": build_ext},
)
