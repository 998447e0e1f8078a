"""One numbering, one shape: file = page = module, in reading order (CONTRIBUTING.md).

- `ls nbs/` is the table of contents: chapters `NN_name` numbered 1, 2, ... without gaps, then the appendix
  `x_name` lettered a, b, ...; `_toc.yml` lists them in that order, the chapters in numbered parts and the
  appendix in one unnumbered part; a page's module is the name in its file name.
- The README's chapter table and `book/intro.md`'s give each page the label of its file name and its title.
- Each module is written by one notebook; no chapter imports a later chapter's module; an appendix module imports
  only appendix modules.
- CONTRIBUTING.md's table lists every module once, with its page and its kind (layers, model, task, kit,
  experiment); imports keep to the kinds: no model module imports another model module, a layers module imports
  only layers and kit, nothing but an experiment imports an experiment; the import graph has no cycle, and no
  layers, model or task module reaches the training loop.
- Every module is at most 400 lines (`_modidx.py`, nbdev's index, aside): a longer one is split into pages.
"""
import ast, json, re

import pytest
import yaml
from conftest import NBS, ROOT

PKG = ROOT / "txbook"
STEM = re.compile(r"^(?:(?P<num>\d{2})|(?P<letter>[a-z]))_(?P<name>[a-z0-9]+)$")
LOOP = {"train", "optim", "amp", "checkpoint", "distributed"}


def parse(stem: str) -> re.Match:
    m = STEM.match(stem)
    assert m, f"nbs/{stem}.ipynb: a page is NN_name (a chapter) or x_name (an appendix page, x a letter)"
    return m


def label(stem: str) -> str:
    "The page's label as the README and the site print it: '7' for 07_translate, 'C' for c_perf"
    m = parse(stem)
    return str(int(m["num"])) if m["num"] else m["letter"].upper()


def rank(stem: str) -> tuple[int, int]:
    "Place in the reading order: chapters by number, then the appendix by letter"
    m = parse(stem)
    return (0, int(m["num"])) if m["num"] else (1, ord(m["letter"]))


def cells(stem: str) -> list[dict]:
    return json.loads((ROOT / "nbs" / f"{stem}.ipynb").read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def default_exp(stem: str) -> str | None:
    for c in cells(stem):
        m = re.match(r"#\|\s*default_exp\s+(\S+)", source(c))
        if m:
            return m.group(1)
    return None


def title(stem: str) -> str:
    return next(source(c).split("\n")[0][2:] for c in cells(stem)
                if c["cell_type"] == "markdown" and source(c).startswith("# "))


STEMS = [p.stem for p in NBS]
MODULES = sorted(p.stem for p in PKG.glob("*.py") if not p.stem.startswith("_"))


def _runtime_nodes(tree: ast.AST):
    "Every node of `tree` but those under `if TYPE_CHECKING:` (imports a type checker reads and Python does not)"
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports_of(name: str) -> set[str]:
    "The txbook modules that `txbook/<name>.py` imports when Python runs it, read with `ast`"
    found = set()
    for node in _runtime_nodes(ast.parse((PKG / f"{name}.py").read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif node.module and node.module.split(".")[0] == "txbook":
                parts = node.module.split(".")
                found.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("txbook."))
    return found & set(MODULES)


EDGES = {(m, d) for m in MODULES for d in imports_of(m)}


def written_by(name: str) -> set[str]:
    "The notebooks whose cells make up `txbook/<name>.py` (nbdev's `# %% ../nbs/<notebook>.ipynb` markers)"
    return {m for m in re.findall(r"^# %% \.\./nbs/(\S+)\.ipynb", (PKG / f"{name}.py").read_text(), re.M)}


def test_file_names_are_the_reading_order():
    ranks = [rank(s) for s in STEMS]                       # NBS is sorted by name: ls order
    assert ranks == sorted(ranks), "sorting nbs/ by name must give the reading order"
    nums = [r[1] for r in ranks if r[0] == 0]
    letters = [r[1] for r in ranks if r[0] == 1]
    assert nums == list(range(1, len(nums) + 1)), f"chapter numbers with a gap or a repeat: {nums}"
    assert letters == list(range(ord("a"), ord("a") + len(letters))), "appendix letters with a gap"


def test_toc_follows_the_file_names():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed, numbered = [], {}
    for part in toc["parts"]:
        for ch in part["chapters"]:
            assert "sections" not in ch, "one page per chapter: the file number is the site's chapter number"
            if ch["file"].startswith("nbs/"):
                listed.append(ch["file"][4:])
                numbered[ch["file"][4:]] = part.get("numbered", False)
    assert listed == STEMS, "_toc.yml must list nbs/ in the order of the file names"
    for s in STEMS:
        assert numbered[s] == bool(parse(s)["num"]), f"{s}: chapters sit in numbered parts, the appendix not"
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["html"]["use_multitoc_numbering"] is True, \
        "chapter numbers must run on across the parts (sphinx-multitoc-numbering)"


@pytest.mark.parametrize("stem", STEMS)
def test_page_writes_the_module_its_name_names(stem):
    mod = default_exp(stem)
    if mod is not None:
        assert mod == parse(stem)["name"], f"{stem} writes txbook.{mod}"
    for c in cells(stem):
        m = re.match(r"#\|[ \t]*exports?[ \t]+(\S+)", source(c))
        assert not m or m.group(1) == mod, f"{stem} exports into txbook.{m.group(1)}: one page, one module"


MAX_LINES = 400


def test_every_module_is_at_most_400_lines():
    long = {p.name: n for p in sorted(PKG.glob("*.py")) if p.name != "_modidx.py"
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them into pages, CONTRIBUTING.md): {long}"


def test_each_module_is_written_by_one_page():
    bad = {m: sorted(written_by(m)) for m in MODULES if written_by(m) != {s for s in STEMS
                                                                         if parse(s)["name"] == m}}
    assert not bad, f"modules not written by exactly the page named after them: {bad}"


def _table_rows(text: str, pattern: str) -> dict[str, tuple[str, str]]:
    return {m["stem"]: (m["label"], m["title"]) for m in re.finditer(pattern, text, re.M)}


def test_readme_and_intro_tables_agree_with_the_files():
    readme = _table_rows((ROOT / "README.md").read_text(),
                         r"^\| (?P<label>\w+) \| \[(?P<title>[^\]]+)\]\(https://txbook\.github\.io/txbook/nbs/"
                         r"(?P<stem>\w+)\.html\)")
    intro = _table_rows((ROOT / "book" / "intro.md").read_text(),
                        r"^\| (?P<label>\w+) \| \{doc\}`(?P<title>[^<]+) <\.\./nbs/(?P<stem>\w+)>`")
    for name, rows in (("README.md", readme), ("book/intro.md", intro)):
        assert list(rows) == STEMS, f"{name}'s chapter table must list nbs/ in order"
        wrong = {s: r for s, r in rows.items() if r != (label(s), title(s))}
        assert not wrong, f"{name}: rows whose label or title disagree with the notebook: {wrong}"


def _notebook_imports(stem: str) -> set[str]:
    mods = set()
    for c in cells(stem):
        if c["cell_type"] == "code":
            mods |= set(re.findall(r"(?:from|import) txbook\.(\w+)", source(c)))
    return mods & set(MODULES)


@pytest.mark.parametrize("stem", [s for s in STEMS if parse(s)["num"]])
def test_no_chapter_imports_a_later_chapter(stem):
    page_of = {parse(s)["name"]: s for s in STEMS}
    later = sorted(m for m in _notebook_imports(stem) if rank(page_of[m]) > rank(stem) and parse(page_of[m])["num"])
    assert not later, f"{stem} imports later chapters' modules: {later}"


def test_appendix_modules_import_only_the_appendix():
    page_of = {parse(s)["name"]: s for s in STEMS}
    appendix = {m for m in MODULES if parse(page_of[m])["letter"]}
    bad = sorted((a, d) for a, d in EDGES if a in appendix and d not in appendix)
    assert not bad, f"appendix modules importing chapter modules: {bad}"


KINDS = ("layers", "model", "task", "kit", "experiment")
ROWS = re.findall(r"^\| `txbook\.(\w+)` \| `(\w+)` \| (\w+) \| .+ \|$", (ROOT / "CONTRIBUTING.md").read_text(), re.M)
KIND = {m: k for m, _, k in ROWS}


def test_contributing_table_lists_every_module():
    assert sorted(m for m, _, _ in ROWS) == MODULES and len(ROWS) == len(MODULES), \
        "CONTRIBUTING.md's table must list every module of txbook exactly once"
    wrong = [(m, p) for m, p, _ in ROWS if written_by(m) != {p}]
    assert not wrong, f"CONTRIBUTING.md names the wrong page for {wrong}"
    unknown = {m: k for m, k in KIND.items() if k not in KINDS}
    assert not unknown, f"CONTRIBUTING.md gives modules a kind that is not one of {KINDS}: {unknown}"
    page_of = {parse(s)["name"]: s for s in STEMS}
    wrong = {m: k for m, k in KIND.items() if (k == "kit") != (parse(page_of[m])["letter"] is not None
                                                              and m != "layers")}
    assert not wrong, f"the kit is the appendix (but appendix M, which is layers), and nothing else: {wrong}"


def _kind_edges(a: str, d: str) -> set[tuple[str, str]]:
    return {(m, n) for m, n in EDGES if KIND.get(m) == a and KIND.get(n) == d}


def test_no_model_module_imports_another_model_module():
    "timm's rule: a model file imports layers, never another model; a model built on another takes it as an argument"
    bad = sorted(_kind_edges("model", "model"))
    assert not bad, f"model modules importing model modules (take the other model as an argument, or make the " \
                    f"shared helper a layer in txbook.layers): {bad}"
    assert {("mae", "vit"), ("swin", "vit"), ("poslabels", "swin")}.isdisjoint(EDGES)   # the cases that were


def model_outputs(name: str) -> list[str]:
    "The classes of `txbook/<name>.py` whose forward returns a ModelOutput (its annotation or a return statement)"
    found = []
    for cls in ast.walk(ast.parse((PKG / f"{name}.py").read_text())):
        if not isinstance(cls, ast.ClassDef): continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                said = fn.returns is not None and "ModelOutput" in ast.unparse(fn.returns)
                built = any(isinstance(r, ast.Return) and r.value is not None and "ModelOutput(" in ast.unparse(r.value)
                            for r in ast.walk(fn))
                if said or built: found.append(cls.name)
    return found


def test_models_are_classified_as_models():
    "A class whose forward returns a ModelOutput (logits and a loss of its own) is a model: its module is one"
    wrong = {m: (KIND.get(m), model_outputs(m)) for m in MODULES if model_outputs(m) and KIND.get(m) != "model"}
    assert not wrong, f"modules holding models (forward returns a ModelOutput) not classified as model: {wrong}"
    assert model_outputs("poslabels") == ["PositionLabelViT", "PositionLabelSwin"]   # the rule sees them


def test_layers_import_only_layers_and_the_kit():
    bad = sorted((m, d) for m, d in EDGES if KIND.get(m) == "layers" and KIND.get(d) not in ("layers", "kit"))
    assert not bad, f"layers modules importing models, tasks or experiments: {bad}"


def test_only_experiments_import_experiments():
    bad = sorted((m, d) for m, d in EDGES if KIND.get(d) == "experiment" and KIND.get(m) != "experiment")
    assert not bad, f"library modules importing an experiment (not API): {bad}"


def _reach(m: str) -> set[str]:
    seen, todo = set(), [m]
    while todo:
        here = todo.pop()
        for d in [d for a, d in EDGES if a == here]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_import_graph_has_no_cycle_and_models_skip_the_loop():
    cyclic = sorted(m for m in MODULES if m in _reach(m))
    assert not cyclic, f"modules on an import cycle: {cyclic}"
    library = {m for m in MODULES if KIND.get(m) in ("layers", "model", "task")}   # an experiment runs fit
    leaks = {m: sorted(_reach(m) & LOOP) for m in library if _reach(m) & LOOP}
    assert not leaks, f"layers, model and task modules that pull in the training loop: {leaks}"


def test_imports_parse_sees_what_modules_hold():
    "A second reading of the graph: every txbook object a module holds came through an import the parse found"
    import importlib, inspect
    held = set()
    for m in MODULES:
        for name, obj in vars(importlib.import_module(f"txbook.{m}")).items():
            if name.startswith("__"): continue     # torch.compile leaves __compiled_fn_* in globals
            src = obj.__module__ if inspect.isclass(obj) or inspect.isfunction(obj) else \
                obj.__name__ if inspect.ismodule(obj) else None
            if src and src.startswith("txbook.") and src != f"txbook.{m}":
                held.add((m, src.split(".")[1]))
    assert not held - EDGES, f"imports the parse did not see: {sorted(held - EDGES)}"
