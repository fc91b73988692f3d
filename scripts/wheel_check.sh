#!/usr/bin/env bash
# specdraft as a user installs it: from a built wheel into a fresh virtual environment, never from
# the checkout (CI runs this after `make test`, which has prepared the models).
#
#   1. python -m build: the sdist, then the wheel built from that sdist (so the sdist is known to
#      carry the native sources), into dist/; both are checked for the native index and LICENSE
#   2. a fresh virtual environment with vLLM's CPU build, made by scripts/setup.sh --engine (the
#      stages venv, engine, vllm-md, suffix; pip's cache and setup's cached wheels make it quick),
#      plus the wheel (not editable) and pytest
#   3. from a folder outside the checkout: `specdraft --version`, a check that specdraft imports from
#      the venv's site-packages, and a vLLM integration smoke test copied there
#      (integration_tests/test_vllm_greedy.py: greedy output identical to plain decoding)
#
# SPECDRAFT_WHEEL_VENV=DIR keeps the virtual environment in DIR (default: a temporary folder, removed).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/specdraft-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
VENV="${SPECDRAFT_WHEEL_VENV:-$WORK/venv}"
PY="$VENV/bin/python"
DIST="$REPO/dist"
log() { printf '[wheel] %s\n' "$*"; }
t0=$(date +%s)

# The model the smoke test loads: the checkout's prepared SmolLM2 (make test prepared it).
MODEL_DIR="$(SPECDRAFT_HOME="${SPECDRAFT_HOME:-$REPO/.cache/specdraft}" \
  "$REPO/.venv/bin/python" -m specdraft.models path smollm2-135m)"

log "fresh virtual environment with vLLM's CPU build: $VENV"
SPECDRAFT_VENV="$VENV" bash "$REPO/scripts/setup.sh" --engine

log "python -m build (sdist, then the wheel from it) into dist/"
"$PY" -m pip install -q "build>=1"
rm -rf "$DIST"
"$PY" -m build --outdir "$DIST" "$REPO" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
whl="$(ls "$DIST"/specdraft-*.whl)"
sdist="$(ls "$DIST"/specdraft-*.tar.gz)"
"$PY" -P - "$whl" "$sdist" <<'PY'
import sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1]).namelist()
assert any(n.startswith("specdraft/proposers/_suffix_native") and n.endswith(".so") for n in wheel), \
    "the wheel has no native index"
assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
           for n in wheel), "the wheel has no LICENSE"
sdist = tarfile.open(sys.argv[2]).getnames()
for want in ("proposers/native/suffix_index.cc", "proposers/native/suffix_index.h", "LICENSE", "setup.py"):
    assert any(m.endswith("/" + want) for m in sdist), f"the sdist lacks {want}"
print(f"[wheel] {sys.argv[1].rsplit('/', 1)[-1]}: native index and LICENSE present; sdist complete")
PY

log "pip install $(basename "$whl") (not editable) + pytest"
"$PY" -m pip install -q --no-deps --force-reinstall "$whl"
"$PY" -m pip install -q "$whl" "pytest>=8"

cd "$WORK"  # outside the checkout: nothing imports from the source tree
mkdir smoke
cp "$REPO"/integration_tests/{conftest.py,live_prompts.py,test_vllm_greedy.py} smoke/
version="$("$VENV/bin/specdraft" --version)"
log "specdraft --version: $version"
"$PY" -P - "$VENV" <<'PY'
import importlib.metadata as m, json, pathlib, sys
import specdraft, specdraft.proposers._suffix_native as native
venv = pathlib.Path(sys.argv[1]).resolve()
for mod in (specdraft, native):
    path = pathlib.Path(mod.__file__).resolve()
    assert venv in path.parents and "site-packages" in path.parts, f"{mod.__name__} from {path}"
url = json.loads(m.distribution("specdraft").read_text("direct_url.json") or "{}")
assert not url.get("dir_info", {}).get("editable"), url
print(f"[wheel] specdraft {specdraft.__version__} imports from {pathlib.Path(specdraft.__file__).parent}")
PY
log "vLLM smoke test from $WORK/smoke (model $MODEL_DIR)"
SPECDRAFT_TEST_MODEL="$MODEL_DIR" "$PY" -m pytest -q -p no:cacheprovider smoke/test_vllm_greedy.py
log "done in $(( $(date +%s) - t0 ))s"
