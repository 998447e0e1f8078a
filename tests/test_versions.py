"""The versions readers have: the lowest versions `pyproject.toml` declares are versions the book
runs on.

The book's code runs under three sets of libraries (torch is this machine's CPU wheel in all of
them):

- the newest: the project's venv (`make install`), where tests/test_loaders.py and every chapter at
  quick size (tests/test_notebooks.py) run;
- Colab's (transformers 5.15, numpy 2.1.3, fastcore 2.2.12): tests/test_colab.py runs every chapter
  at smoke size, and tests/test_loaders.py, in a venv holding those versions;
- the floors (this file): a throw-away venv holds every `name>=X` of `dependencies` and of the `hf`
  extra installed as `name==X` (it shares this test run's torch-only venv through a .pth file, as
  tests/test_colab.py does). There every txbook module imports, tests/test_loaders.py passes,
  appendix L (`l_foreign`) runs whole, and so do the cells of the chapters that compare with Hugging
  Face's models: each cell that reads a name imported from `transformers` (or a function such a cell
  defines), with the cells it needs, found from the names they read (`plan`), except the demos that
  download pretrained weights.

torch is checked by reading, not by running: every torch but the local wheel needs gigabytes of CUDA
packages here. `TORCH_FEATURES` lists what the package and the chapters call without a guard and the
release that brought it; the declared floor must be the newest of those releases, and on Python 3.13
the release whose Dynamo runs there. The registry must be reachable for the floor venv: without it
those tests skip and say so.
"""
import ast, builtins, json, os, re, symtable, sys, time
from pathlib import Path

import pytest

from helpers import (COLAB, NO_COMPILE, PYPROJECT, ROOT, _version, floors, fresh_venv,
                     torch_floor)
from helpers import run_process as _run
# pages the floor venv runs whole (appendix L: the loaders' tools)
WHOLE = ["l_foreign"]

# What the book calls without a guard, the first torch release that has it, and where: the torch
# floor is the newest of these releases. (Guarded uses, such as chapter 18's flex_attention, need no
# floor.) The list is kept by hand: a call added later fails this test only once someone lists it
# here (R5 #8 found three unlisted).
TORCH_FEATURES = [
    (r"enable_gqa=True", "2.5", "F.scaled_dot_product_attention(..., enable_gqa=True), chapter 1"),
    (r"torch\.amp\.GradScaler", "2.3", "torch.amp.GradScaler (device-generic), txbook.amp"),
    (r"init_process_group\([^)]*device_id=", "2.3", "init_process_group(device_id=), "
                                                    "txbook.distributed"),
    (r"from torch\.nn\.attention import[^\n]*sdpa_kernel", "2.3",
     "torch.nn.attention.sdpa_kernel, chapter 18"),
    (r"from torch\.nn\.attention\.bias import causal_lower_right", "2.3",
     "torch.nn.attention.bias.causal_lower_right, chapter 18"),
    (r"maybe_mark_dynamic", "2.2", "torch._dynamo.maybe_mark_dynamic, txbook.train"),
    (r"grad_scaler\('cpu', 'fp16'\)", "2.3", "torch.amp.GradScaler on the CPU (pytorch#109281), "
                                             "appendix H"),
    (r"autocast\('cpu', 'fp16'\)", "2.5",   # pytorch#136082; the release is read from its 2.5 docs
     "float16 autocast on the CPU, appendix H"),
]
# Dynamo (torch.compile, torch._dynamo.explain) refuses Python 3.13 before torch 2.6 ("Dynamo is not
# supported on Python 3.13+"); chapter 8 counts graphs with torch._dynamo.explain, unguarded.
TORCH_FEATURES_PY313 = [(r"from torch\._dynamo import explain|torch\._dynamo\.explain\(", "2.6",
                         "torch._dynamo.explain on Python 3.13, chapter 8")]
NETWORK = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|"
    r"Max retries exceeded|Network is unreachable|ConnectionError|ReadTimeoutError"
)


# ------------------------------------------------------ slicing a chapter to its Hugging Face cells

def cell_names(src: str) -> tuple[set[str], set[str]]:
    "(names a cell binds at top level, global names it reads that it does not bind)"
    top = symtable.symtable(src, "<cell>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    read = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    todo = list(top.get_children())
    while todo:                                   # functions, lambdas, classes, comprehensions
        t = todo.pop()
        todo.extend(t.get_children())
        read |= {s.get_name() for s in t.get_symbols() if s.is_global() and s.is_referenced()}
    return bound, read - bound - set(dir(builtins))


def hf_imports(src: str) -> set[str]:
    "The names a cell binds by importing from transformers"
    out = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            out |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names
                    if a.name.split(".")[0] == "transformers"}
    return out


SKIP = {"eval: false"} | set(PYPROJECT["tool"]["nbdev"].get("tst_flags", "").split())


def code_cells(path: Path) -> list[str]:
    "A notebook's code cells; those the quick pass skips (`#| eval: false`, `tst_flags`) left empty"
    cells = ["".join(c["source"]) for c in json.loads(Path(path).read_text())["cells"]
             if c["cell_type"] == "code"]
    flags = lambda s: {l[2:].strip() for l in s.splitlines() if l.startswith("#|")}
    return ["" if flags(s) & SKIP else s for s in cells]


def segment(src: str, node: ast.stmt) -> str:
    "A top-level statement's source, with its decorators"
    lines = src.splitlines(keepends=True)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    if first == node.lineno: return ast.get_source_segment(src, node)
    return "".join(lines[first - 1:node.end_lineno])


def plan(path: Path) -> tuple[list[tuple[int, str]], list[int]]:
    """The code that runs a chapter's Hugging Face cells: ([(code cell index, source)], target
    cells).

    Targets: the cells that import from transformers or read a name so imported, or a function or
    class a target cell defines; not those that download pretrained weights (`from_pretrained`).
    They run whole, with the set-up cell and every `#| export` cell; of any other cell, only the
    top-level statements that bind a name these read (and, in turn, what those statements read)."""
    cells = code_cells(path)
    hf = set().union(*map(hf_imports, cells))
    targets, grew = set(), True
    while grew:
        grew = False
        for i, s in enumerate(cells):
            if i in targets or "from_pretrained" in s: continue
            if hf_imports(s) or cell_names(s)[1] & hf:
                targets.add(i)
                hf |= {n.name for n in ast.parse(s).body
                       if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
                grew = True
    whole = targets | {i for i, s in enumerate(cells)
                       if s.lstrip().startswith("#| export") or "book_setup()" in s}
    # (cell, source): whole cells, other cells by statement
    units = []
    for i, s in enumerate(cells):
        if i in whole: units.append((i, s))
        else: units += [(i, segment(s, node)) for node in ast.parse(s).body]
    names = [cell_names(s) for _, s in units]
    keep = {n for n, (i, _) in enumerate(units) if i in whole}
    todo = [n for n, (i, _) in enumerate(units) if i in targets]
    while todo:
        n = todo.pop()
        for name in names[n][1]:
            m = max((m for m in range(n) if name in names[m][0]), default=None)
            if m is not None and m not in keep:
                keep.add(m)
                todo.append(m)
    return [units[n] for n in sorted(keep)], sorted(targets)


def run_cells(path: Path, cells: list[tuple[int, str]]):
    """Execute cells in one namespace from the notebook's folder, as a kernel would (__future__
    imports carry)"""
    import codeop, linecache
    os.chdir(path.parent)
    compile_ = codeop.Compile()
    ns = {"__name__": "__main__"}
    for i, src in cells:
        name = f"{path.stem}, code cell {i}"
        # for inspect, as IPython
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        exec(compile_(src, name, "exec"), ns)


def main(out: str, *stems: str):
    """In the venv under test: import every txbook module, then run each page's cells; results to
    `out` (JSON)"""
    import importlib, traceback
    import matplotlib
    matplotlib.use("Agg")
    res = {}
    mods = sorted(p.stem for p in (ROOT / "txbook").glob("*.py") if not p.stem.startswith("_"))
    try:
        for m in mods: importlib.import_module(f"txbook.{m}")
        res["import"] = dict(ok=True, modules=len(mods))
    except Exception: res["import"] = dict(ok=False, error=traceback.format_exc()[-4000:])
    for stem in stems:
        path = ROOT / "nbs" / f"{stem}.ipynb"
        t0, c0 = time.time(), time.process_time()
        cells, targets = (list(enumerate(code_cells(path))), None) if stem in WHOLE else plan(path)
        try:
            run_cells(path, cells)
            res[stem] = dict(ok=True)
        except BaseException: res[stem] = dict(ok=False, error=traceback.format_exc()[-4000:])
        res[stem].update(cells=sorted({i for i, _ in cells}), targets=targets,
                         wall=round(time.time() - t0, 1), cpu=round(time.process_time() - c0, 1))
        print(f"{stem}: {'ok' if res[stem]['ok'] else 'FAILED'}, {res[stem]['cpu']}s CPU",
              flush=True)
    Path(out).write_text(json.dumps(res, indent=1))


# The chapters with cells that compare with transformers, found by reading them; appendix L runs
# whole
HF_PAGES = sorted({p.stem for p in (ROOT / "nbs").glob("*.ipynb")
                   if any(hf_imports(s) for s in code_cells(p))} | set(WHOLE))


# -------------------------------------------------------------------------------------------- tests

def _sources() -> str:
    "The package and every chapter's code cells, as one text"
    code = [p.read_text() for p in sorted((ROOT / "txbook").glob("*.py"))]
    return "\n".join(code
                     + ["\n".join(code_cells(p)) for p in sorted((ROOT / "nbs").glob("*.ipynb"))])


def test_torch_floor_is_the_newest_feature_used():
    text = _sources()
    for features, python in [(TORCH_FEATURES, "3.11"),
                             (TORCH_FEATURES + TORCH_FEATURES_PY313, "3.13")]:
        used = [(v, what) for pat, v, what in features if re.search(pat, text)]
        assert used, "none of TORCH_FEATURES is used any more: the table is stale"
        need = max((v for v, _ in used), key=_version)
        assert torch_floor(python) == need, (f"Python {python}: pyproject.toml asks for torch>="
                                              f"{torch_floor(python)}, the sources need {need}: "
                                              f"{used}")
    assert _version(torch_floor("3.10")) >= (2, 5)   # Python 3.10-3.12 share the general floor


def hf_torch_floor() -> str:
    """The torch floor an install of the hf extra declares: the extra's own, or the package's if
    higher"""
    from packaging.requirements import Requirement
    extra = [s.version
             for r in map(Requirement, PYPROJECT["project"]["optional-dependencies"]["hf"])
             if r.name == "torch" for s in r.specifier if s.operator == ">="]
    return max(extra + [torch_floor("3.11")], key=_version)


def transformers_torch_need(import_utils: str) -> str:
    """The torch release below which a transformers release switches PyTorch off, read from its
    import_utils.py"""
    m = re.search(r'def is_torch_available\(\).*?version\.parse\(torch_version\) >= '
                  r'version\.parse\("([\d.]+)"\)',
                  import_utils, re.S)
    assert m, (
        "is_torch_available() no longer compares torch_version with a constant: update this test"
    )
    return m.group(1)


def test_hf_extra_keeps_pytorch_on():
    """pip install txbook[hf] takes the newest transformers: the torch it declares must be one that
    keeps PyTorch on"""
    import transformers
    from packaging.version import Version
    source = (Path(transformers.__file__).parent / "utils" / "import_utils.py").read_text()
    need = transformers_torch_need(source)
    assert Version(hf_torch_floor()) >= Version(need), (
        f"transformers {transformers.__version__} switches PyTorch off below torch {need}, but the "
        f"hf extra lets pip pair it with torch>={hf_torch_floor()}")
    sample = ('def is_torch_available() -> bool:\n'
              '    return is_available and version.parse(torch_version) >= version.parse("2.4.0")')
    # the reading itself (transformers 5.9's text)
    assert transformers_torch_need(sample) == "2.4.0"


def test_floors_agree_and_the_readme_names_them():
    """The dev extra asks for the hf extra's transformers; the README states the floors and what is
    tested"""
    dev = [r for r in PYPROJECT["project"]["optional-dependencies"]["dev"]
           if r.startswith("transformers")]
    assert dev == [
        f"transformers>={floors()['transformers']}"], f"dev and hf extras disagree: {dev}"
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"Tested versions[^\n]*\n(?:[^\n]+\n)*", readme)
    assert said, "README.md has no 'Tested versions' paragraph"
    text = said.group(0)
    for name, v in [("torch", torch_floor("3.11")), ("torch", torch_floor("3.13")),
                    ("torch", hf_torch_floor()), ("transformers", floors()["transformers"])]:
        assert f"`{name}>={v}`" in text, f"the README does not state the floor {name}>={v}"
    for name, v in COLAB.items():
        assert f"{name} {v}" in text, f"the README does not name Colab's {name} {v}"


@pytest.fixture(scope="module")
def floor_venv(tmp_path_factory):
    "A venv with every declared floor installed exactly, beside this test run's torch-only venv"
    t0 = time.time()
    pins = {n: v for n, v in floors().items() if n != "torch"}
    py = fresh_venv(tmp_path_factory.mktemp("floor") / "venv", tmp_path_factory)
    r = _run(py, "-m", "pip", "install", "-q", *NO_COMPILE,
             *[f"{n}=={v}" for n, v in pins.items()], "pytest")
    if r.returncode and NETWORK.search(r.stdout + r.stderr):
        pytest.skip(f"the package registry is unreachable: {(r.stdout + r.stderr).strip()[-300:]}")
    assert r.returncode == 0, (
        f"the declared floors do not install together:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    )
    print(f"floor venv ready in {time.time() - t0:.0f}s: {pins}")
    return py, pins


@pytest.mark.slow   # a fresh venv with the floors
def test_the_floors_are_what_the_venv_holds(floor_venv):
    py, pins = floor_venv
    code = ("import json, importlib.metadata as m, sys\n"
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    got = json.loads(_run(py, "-c", code, *pins).stdout)
    from packaging.version import Version
    assert {n: Version(v) for n, v in got.items()} == {n: Version(v) for n, v in pins.items()}, got


@pytest.mark.slow   # a fresh venv with the floors
def test_floor_transformers_keeps_pytorch_on(floor_venv):
    "The floor transformers, beside the hf extra's torch floor, keeps PyTorch on"
    py, pins = floor_venv
    from packaging.version import Version
    where = _run(py, "-c",
                 "import transformers.utils.import_utils as m; print(m.__file__)").stdout.strip()
    need = transformers_torch_need(Path(where).read_text())
    assert Version(hf_torch_floor()) >= Version(need), (pins, need)


def _env(tmp):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("VIRTUAL_ENV",)}
    env.update(PYTHONPATH=str(ROOT), MPLBACKEND="Agg", HF_HUB_OFFLINE="1", HF_HOME=str(tmp / "hf"))
    return env


@pytest.mark.slow   # a fresh venv with the floors
def test_loaders_under_the_floors(floor_venv, tmp_path):
    py, pins = floor_venv
    r = _run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", ROOT / "tests" / "test_loaders.py",
             cwd=ROOT, env=_env(tmp_path))
    assert r.returncode == 0, (
        f"tests/test_loaders.py under {pins}:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"
    )


@pytest.fixture(scope="module")
def floor_pages(floor_venv, tmp_path_factory):
    "Every txbook module imported and the Hugging Face pages run, in the floor venv (one process)"
    py, pins = floor_venv
    tmp = tmp_path_factory.mktemp("floor-pages")
    r = _run(py, Path(__file__), tmp / "out.json", *HF_PAGES, cwd=ROOT, env=_env(tmp))
    assert (tmp / "out.json").exists(), f"the run stopped:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    print(r.stdout)
    return json.loads((tmp / "out.json").read_text())


@pytest.mark.slow   # a fresh venv with the floors
def test_every_module_imports_under_the_floors(floor_pages):
    assert floor_pages["import"]["ok"], floor_pages["import"]["error"]


def test_the_pages_are_found():
    """The slicing finds the cells it must: the pages that compare with transformers, and cells in
    each"""
    assert {"l_foreign", "08_gpt", "10_vit", "12_swin"} <= set(HF_PAGES), HF_PAGES
    for stem in set(HF_PAGES) - set(WHOLE):
        cells, targets = plan(ROOT / "nbs" / f"{stem}.ipynb")
        assert targets and set(targets) <= {i for i, _ in cells}, (stem, targets)


@pytest.mark.slow   # a fresh venv with the floors
@pytest.mark.parametrize("stem", HF_PAGES)
def test_page_under_the_floors(floor_pages, stem):
    res = floor_pages[stem]
    assert res["ok"], f"{stem} under the floors, code cells {res['cells']}:\n{res['error']}"
    assert res["targets"] is None or res["targets"], f"{stem}: no cell compares with transformers"


if __name__ == "__main__":
    main(*sys.argv[1:])
