"""Each vLLM adapter against the source of the release it supports.

Every function and method an adapter wraps or calls (``SOURCE_FUNCTIONS``), every field it reads
(``SOURCE_FIELDS``), the ``custom_class`` call site whose arguments ``propose_arguments`` reads
(``PROPOSE_CALL``), and the configuration the benchmarks' peers read in their constructors are
checked in that release's own source, parsed, not imported. vLLM 0.32 is the installed CPU build;
vLLM 0.33 and 0.34 (GPU only) are read from their wheels, which scripts/setup.sh downloads into
``.cache/downloads`` (stage vllm-next). From 0.34 specdraft is a speculator, not a custom_class
proposer: the V1 checks (the custom_class call site, the peers, the sampler copy) apply to 0.32 and
0.33, the speculator's call site and hooks to 0.34. A missing source is a failure, not a skip: the
adapter would ship unchecked.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import zipfile
from pathlib import Path

import pytest

from specdraft.adapters import VLLM_ADAPTERS

REPO = Path(__file__).resolve().parents[1]
DOWNLOADS = REPO / ".cache" / "downloads"


def _fmt(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


class Source:
    """The files of one vLLM release: the installed package, or a wheel (zip)."""

    def __init__(self, version: tuple[int, int, int]):
        self.version = version
        installed, root = _installed()
        if installed is not None and installed[:2] == version[:2]:
            self.root = root
            self.zip = None
            self.where = f"the installed vLLM {_fmt(installed)}"
            return
        wheels = sorted(DOWNLOADS.glob(f"vllm-{_fmt(version)}-*.whl"))
        if not wheels:
            pytest.fail(f"vLLM {_fmt(version)}'s source is needed to check its adapter: no "
                        f"{DOWNLOADS}/vllm-{_fmt(version)}-*.whl. Run scripts/setup.sh (stage "
                        f"vllm-next downloads it: pip download --no-deps vllm=={_fmt(version)})")
        self.zip = zipfile.ZipFile(wheels[-1])
        self.root = None
        self.where = wheels[-1].name

    def read(self, path: str) -> str:
        if self.zip is not None:
            try:
                return self.zip.read(path).decode("utf-8")
            except KeyError:
                pytest.fail(f"{path} is not in {self.where}")
        f = self.root / path
        if not f.is_file():
            pytest.fail(f"{path} is not in {self.where}")
        return f.read_text(encoding="utf-8")

    def tree(self, path: str) -> ast.Module:
        return ast.parse(self.read(path))


def _installed() -> tuple[tuple[int, int, int] | None, Path | None]:
    """The installed vLLM's version and site directory, read from its files (no import)."""
    from specdraft.adapters import parse_version

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    m = re.search(r"__version__ = version = '([^']+)'", (pkg / "_version.py").read_text())
    return (parse_version(m.group(1)) if m else None), pkg.parent


def _find(tree: ast.Module, qualname: str) -> ast.AST | None:
    node: ast.AST = tree
    for part in qualname.split("."):
        found = None
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and child.name == part:
                found = child  # the last definition wins, as at import time
        if found is None:
            return None
        node = found
    return node


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def _class_fields(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)  # properties
    for node in ast.walk(cls):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                    and t.value.id == "self":
                names.add(t.attr)
    return names


def _config_reads(init: ast.FunctionDef) -> set[tuple[str, ...]]:
    """Attribute paths read from ``vllm_config`` in a constructor (aliases followed)."""
    aliases: dict[str, tuple[str, ...]] = {"vllm_config": ()}

    def path(node: ast.AST) -> tuple[str, ...] | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in aliases:
            return aliases[node.id] + tuple(reversed(parts))
        return None

    reads: set[tuple[str, ...]] = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            p = path(node.value)
            if p is not None:
                aliases[node.targets[0].id] = p
    for node in ast.walk(init):
        if isinstance(node, ast.Attribute):
            p = path(node)
            if p:
                reads.add(p)
    # keep the longest paths only (a.b.c implies a.b)
    return {p for p in reads if not any(q != p and q[:len(p)] == p for q in reads)}


ADAPTERS = [pytest.param(lo, module, id=module.rsplit(".", 1)[1]) for lo, _, module in VLLM_ADAPTERS]
# Model Runner V1 releases (0.32, 0.33): specdraft is a custom_class proposer there, and the
# benchmarks' peers are V1's own ngram and suffix proposers. From 0.34 it is a speculator.
V1_ADAPTERS = [p for p in ADAPTERS if p.values[0] < (0, 34, 0)]
SPECULATOR_ADAPTERS = [p for p in ADAPTERS if p.values[0] >= (0, 34, 0)]


@pytest.fixture(scope="module")
def sources():
    cache: dict = {}

    def get(version):
        if version not in cache:
            cache[version] = Source(version)
        return cache[version]

    return get


@pytest.mark.parametrize("version,module", ADAPTERS)
def test_the_release_is_the_one_the_adapter_names(version, module, sources):
    src = sources(version)
    m = re.search(r"__version__ = version = '([^']+)'", src.read("vllm/_version.py"))
    assert m and m.group(1).startswith(_fmt(version)[:-1]), (src.where, m and m.group(1))
    adapter = importlib.import_module(module)
    lo, hi = adapter.SUPPORTED
    assert lo <= version < hi


@pytest.mark.parametrize("version,module", ADAPTERS)
def test_every_function_the_adapter_wraps_or_calls_has_the_expected_signature(
        version, module, sources):
    src = sources(version)
    adapter = importlib.import_module(module)
    problems = []
    for path, qualname, expected in adapter.SOURCE_FUNCTIONS:
        fn = _find(src.tree(path), qualname)
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            problems.append(f"{path}: {qualname} is missing")
            continue
        got = _params(fn)[:len(expected)]
        if got != list(expected):
            problems.append(f"{path}: {qualname}{tuple(_params(fn))} does not start with "
                            f"{expected}")
    assert not problems, f"vLLM {_fmt(version)} ({src.where}):\n" + "\n".join(problems)


@pytest.mark.parametrize("version,module", ADAPTERS)
def test_every_field_the_adapter_reads_exists(version, module, sources):
    src = sources(version)
    adapter = importlib.import_module(module)
    problems = []
    for path, cls_name, fields in adapter.SOURCE_FIELDS:
        cls = _find(src.tree(path), cls_name)
        if not isinstance(cls, ast.ClassDef):
            problems.append(f"{path}: class {cls_name} is missing")
            continue
        missing = sorted(set(fields) - _class_fields(cls))
        if missing:
            problems.append(f"{path}: {cls_name} has no {', '.join(missing)}")
    assert not problems, f"vLLM {_fmt(version)} ({src.where}):\n" + "\n".join(problems)


@pytest.mark.parametrize("version,module", V1_ADAPTERS)
def test_custom_class_call_site_passes_what_propose_arguments_reads(version, module, sources):
    src = sources(version)
    adapter = importlib.import_module(module)
    fn = _find(src.tree("vllm/v1/worker/gpu_model_runner.py"),
               "GPUModelRunner.propose_draft_token_ids")
    calls = []
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and "custom_class" in ast.unparse(node.test):
            for sub in node.body:
                for c in ast.walk(sub):
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) \
                            and c.func.attr == "propose" and "drafter" in ast.unparse(c.func):
                        calls.append(c)
    assert len(calls) == 1, f"vLLM {_fmt(version)}: custom_class propose call sites: {len(calls)}"
    call = calls[0]
    got = ([ast.unparse(a) for a in call.args]
           + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords])
    assert tuple(got) == adapter.PROPOSE_CALL
    # propose_arguments maps that call onto the adapter's parameter names
    positional = len(call.args)
    assert adapter.PROPOSE_PARAMS[:3] == ("sampled_token_ids", "num_tokens_no_spec",
                                          "token_ids_cpu")
    assert positional >= 3 and all(k.arg in adapter.PROPOSE_PARAMS for k in call.keywords)
    sampled, num, toks = adapter.propose_arguments(("s", "n", "t"), {"slot_mappings": None})
    assert (sampled, num, toks) == ("s", "n", "t")


@pytest.mark.parametrize("version,module", V1_ADAPTERS)
def test_peer_proposers_read_only_what_the_adapters_stand_in_config_holds(
        version, module, sources):
    src = sources(version)
    adapter = importlib.import_module(module)
    peers = [
        ("vllm/v1/spec_decode/ngram_proposer.py", "NgramProposer",
         adapter.ngram_config(16, 2, 5, 4096, 8)),
        ("vllm/v1/spec_decode/suffix_decoding.py", "SuffixDecodingProposer",
         adapter.suffix_config(16, 4096)),
    ]
    problems = []
    for path, cls, config in peers:
        init = _find(src.tree(path), f"{cls}.__init__")
        assert isinstance(init, ast.FunctionDef), f"{path}: {cls}.__init__ is missing"
        for p in sorted(_config_reads(init)):
            obj = config
            for name in p:
                if not hasattr(obj, name):
                    problems.append(f"{cls}.__init__ reads vllm_config.{'.'.join(p)}")
                    break
                obj = getattr(obj, name)
    assert not problems, f"vLLM {_fmt(version)} ({src.where}):\n" + "\n".join(problems)


def source_digest(fn: ast.FunctionDef) -> str:
    """A function's AST without its docstring, hashed: what SOURCE_COPIES records."""
    import copy
    import hashlib

    fn = copy.deepcopy(fn)
    if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant):
        fn.body = fn.body[1:]
    return hashlib.sha256(ast.dump(fn).encode()).hexdigest()[:16]


@pytest.mark.parametrize("version,module", V1_ADAPTERS)
def test_every_function_the_adapter_copies_is_unchanged(version, module, sources):
    """An adapter that replaces a vLLM function with its own version of it (the lean rejection
    sampler) names the release's function by digest: a release that edits it fails here."""
    src = sources(version)
    adapter = importlib.import_module(module)
    lo, hi = adapter.LEAN_SAMPLER_VERSIONS
    if lo <= version < hi:  # the adapter applies its copy to this release: it must be checked
        assert any(q == "RejectionSampler.forward" for _, q, _ in adapter.SOURCE_COPIES)
    problems = []
    for path, qualname, digest in adapter.SOURCE_COPIES:
        fn = _find(src.tree(path), qualname)
        if not isinstance(fn, ast.FunctionDef):
            problems.append(f"{path}: {qualname} is missing")
        elif source_digest(fn) != digest:
            problems.append(f"{path}: {qualname} changed (digest {source_digest(fn)}, the "
                            f"adapter copied {digest})")
    assert not problems, f"vLLM {_fmt(version)} ({src.where}):\n" + "\n".join(problems)


@pytest.mark.parametrize("version,module", V1_ADAPTERS)
def test_suffix_defaults_and_cache_arguments_are_the_releases(version, module, sources):
    """``SUFFIX_DEFAULTS`` are SpeculativeConfig's defaults, and ``suffix_cache_arguments`` hands
    each option to the argument of arctic's cache that SuffixDecodingProposer hands it to (what
    the replay's arctic-suffix method is built from)."""
    src = sources(version)
    adapter = importlib.import_module(module)
    config = _find(src.tree("vllm/config/speculative.py"), "SpeculativeConfig")
    defaults = {n.target.id: ast.literal_eval(n.value) for n in config.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                and n.target.id.startswith("suffix_decoding_")}
    assert defaults == adapter.SUFFIX_DEFAULTS
    path = "vllm/v1/spec_decode/suffix_decoding.py"
    proposer = _find(src.tree(path), "SuffixDecodingProposer")
    option_of = {}  # self.<attribute> = config.<option> in __init__
    for node in ast.walk(_find(proposer, "__init__")):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) \
                and node.value.attr in defaults:
            option_of.update((t.attr, node.value.attr) for t in node.targets
                             if isinstance(t, ast.Attribute))

    def passed(callee: str) -> dict:
        """keyword -> the option the proposer passes it (keywords holding an option only)"""
        for node in ast.walk(proposer):
            if isinstance(node, ast.Call) and callee in (getattr(node.func, "id", None),
                                                         getattr(node.func, "attr", None)):
                return {k.arg: option_of.get(k.value.attr, k.value.attr) for k in node.keywords
                        if isinstance(k.value, ast.Attribute)}
        pytest.fail(f"{path}: SuffixDecodingProposer calls no {callee}")

    probe = {option: i for i, option in enumerate(defaults)}  # tells the options apart
    option_at = {i: option for option, i in probe.items()}
    cache_args, speculate_args = adapter.suffix_cache_arguments(**probe)
    assert {k: option_at[v] for k, v in cache_args.items()} == passed("SuffixDecodingCache")
    assert {k: option_at[v] for k, v in speculate_args.items()} == passed("speculate")


@pytest.mark.parametrize("version,module", SPECULATOR_ADAPTERS)
def test_speculator_call_site_and_hooks_match_the_speculator(version, module, sources):
    """The runner's one ``speculator.propose`` call passes what ``PROPOSE_CALL`` lists, the
    speculator takes ``BaseSpeculator.propose``'s parameters in the same order (the call is
    positional), ``init_speculator`` hands ``req_states`` to a constructor that names it, and the
    runner calls the lifecycle hooks and reads the confidences the speculator fills."""
    src = sources(version)
    adapter = importlib.import_module(module)
    runner = src.tree("vllm/v1/worker/gpu/model_runner.py")
    calls = [c for c in ast.walk(_find(runner, "GPUModelRunner.sample_tokens"))
             if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and ast.unparse(c.func) == "self.speculator.propose"]
    assert len(calls) == 1, f"vLLM {_fmt(version)}: speculator.propose call sites: {len(calls)}"
    got = ([ast.unparse(a) for a in calls[0].args]
           + [f"{k.arg}={ast.unparse(k.value)}" for k in calls[0].keywords])
    assert tuple(got) == adapter.PROPOSE_CALL
    base = _params(_find(src.tree("vllm/v1/worker/gpu/spec_decode/speculator.py"),
                         "BaseSpeculator.propose"))
    # specdraft's speculator, parsed (it imports only where vLLM 0.34 is installed)
    ours = ast.parse(Path(REPO, "adapters", module.rsplit(".", 1)[1], "speculator.py").read_text())
    assert _params(_find(ours, "SpecdraftSpeculator.propose")) == base
    assert "req_states" in _params(_find(ours, "SpecdraftSpeculator.__init__"))
    factory = ast.unparse(_find(src.tree("vllm/v1/worker/gpu/spec_decode/__init__.py"),
                                "init_speculator"))
    assert "'req_states' in inspect.signature(factory).parameters" in factory
    assert "self.speculator.draft_token_confidence_probs" in ast.unparse(
        _find(runner, "GPUModelRunner.sample_tokens"))
    assert "self.speculator.on_requests_finished(finished_req_ids)" in ast.unparse(
        _find(runner, "GPUModelRunner.finish_requests"))
    assert "self.speculator.add_request(req_index)" in ast.unparse(
        _find(runner, "GPUModelRunner.add_requests"))
