"""One numbering, one shape: file = page = module, in reading order (CONTRIBUTING.md).

- `ls nbs/` is the table of contents: chapters `NN_name` numbered 1, 2, ... without gaps, then the
  appendix `x_name` lettered a, b, ...; `_toc.yml` lists them in that order, the chapters in
  numbered parts and the appendix in one unnumbered part; a page's module is the name in its file
  name.
- The README's chapter table and `book/intro.md`'s give each page the label of its file name and its
  title.
- Each module is written by one notebook; no chapter imports a later chapter's module; an appendix
  module imports only appendix modules.
- CONTRIBUTING.md's table lists every module once, with its page and its kind (layers, model, task,
  kit, experiment); imports keep to the kinds: no model module imports another model module, a
  layers module imports only layers and kit, nothing but an experiment imports an experiment; the
  import graph has no cycle, and no layers, model or task module reaches the training loop.
- Every module is at most 400 lines (`_modidx.py`, nbdev's index, aside): a longer one is split into
  pages.

The package's imports are read by import-linter (`lint-imports`, contracts in pyproject.toml, which
a test here holds to the file names and CONTRIBUTING.md's kinds); the notebooks' imports by this
file.
"""
import ast, json, os, re, shutil, subprocess, sys, tomllib
from pathlib import Path

import pytest
import yaml
from helpers import NBS, ROOT, run_process

PKG = ROOT / "txbook"
STEM = re.compile(r"^(?:(?P<num>\d{2})|(?P<letter>[a-z]))_(?P<name>[a-z0-9]+)$")
LOOP = {"train", "optim", "amp", "checkpoint", "distributed"}


def parse(stem: str) -> re.Match:
    m = STEM.match(stem)
    assert m, (
        f"nbs/{stem}.ipynb: a page is NN_name (a chapter) or x_name (an appendix page, x a letter)"
    )
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


def written_by(name: str) -> set[str]:
    """The notebooks whose cells make up `txbook/<name>.py` (nbdev's `# %% ../nbs/<notebook>.ipynb`
    markers)"""
    return {m
            for m in re.findall(r"^# %% \.\./nbs/(\S+)\.ipynb", (PKG / f"{name}.py").read_text(),
                                re.M)}


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
            assert "sections" not in ch, (
                "one page per chapter: the file number is the site's chapter number"
            )
            if ch["file"].startswith("nbs/"):
                listed.append(ch["file"][4:])
                numbered[ch["file"][4:]] = part.get("numbered", False)
    assert listed == STEMS, "_toc.yml must list nbs/ in the order of the file names"
    for s in STEMS:
        assert numbered[s] == bool(
            parse(s)["num"]), f"{s}: chapters sit in numbered parts, the appendix not"
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
        assert not m \
            or m.group(1) == mod, f"{stem} exports into txbook.{m.group(1)}: one page, one module"


MAX_LINES = 400


def test_every_module_is_at_most_400_lines():
    long = {p.name: n for p in sorted(PKG.glob("*.py")) if p.name != "_modidx.py"
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, (
        f"modules over {MAX_LINES} lines (split them into pages, CONTRIBUTING.md): {long}"
    )


def test_each_module_is_written_by_one_page():
    bad = {m: sorted(written_by(m)) for m in MODULES if written_by(m) != {s for s in STEMS
                                                                         if parse(s)["name"] == m}}
    assert not bad, f"modules not written by exactly the page named after them: {bad}"


def _table_rows(text: str, pattern: str) -> dict[str, tuple[str, str]]:
    return {m["stem"]: (m["label"], m["title"]) for m in re.finditer(pattern, text, re.M)}


def test_readme_and_intro_tables_agree_with_the_files():
    readme = _table_rows((ROOT / "README.md").read_text(),
                         r"^\| (?P<label>\w+) \| "
                         r"\[(?P<title>[^\]]+)\]\(https://txbook\.github\.io/txbook/nbs/"
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
    later = sorted(m for m in _notebook_imports(stem)
                   if rank(page_of[m]) > rank(stem) and parse(page_of[m])["num"])
    assert not later, f"{stem} imports later chapters' modules: {later}"


KINDS = ("layers", "model", "task", "kit", "experiment")
ROWS = re.findall(r"^\| `txbook\.(\w+)` \| `(\w+)` \| (\w+) \| .+ \|$",
                  (ROOT / "CONTRIBUTING.md").read_text(), re.M)
KIND = {m: k for m, _, k in ROWS}


def test_contributing_table_lists_every_module():
    assert sorted(m for m, _, _ in ROWS) == MODULES and len(ROWS) == len(MODULES), \
        "CONTRIBUTING.md's table must list every module of txbook exactly once"
    wrong = [(m, p) for m, p, _ in ROWS if written_by(m) != {p}]
    assert not wrong, f"CONTRIBUTING.md names the wrong page for {wrong}"
    unknown = {m: k for m, k in KIND.items() if k not in KINDS}
    assert not unknown, (
        f"CONTRIBUTING.md gives modules a kind that is not one of {KINDS}: {unknown}"
    )
    page_of = {parse(s)["name"]: s for s in STEMS}
    wrong = {m: k for m, k in KIND.items()
             if (k == "kit") != (parse(page_of[m])["letter"] is not None
                                                              and m != "layers")}
    assert not wrong, (
        f"the kit is the appendix (but appendix M, which is layers), and nothing else: {wrong}"
    )


def contracts() -> dict[str, dict]:
    "pyproject.toml's import-linter contracts by id"
    found = tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return {c["id"]: c for c in found}


def _q(ms) -> list[str]:
    return [f"txbook.{m}" for m in ms]


def test_import_contracts_say_what_the_tables_say():
    """The layering is checked by import-linter (`lint-imports`), with the contracts in
    pyproject.toml; their module lists are those the file names (reading order) and
    CONTRIBUTING.md's kinds give"""
    c = contracts()
    page_of = {parse(s)["name"]: s for s in STEMS}
    chapters = sorted((m for m in MODULES if parse(page_of[m])["num"]),
                      key=lambda m: rank(page_of[m]))
    appendix = sorted((m for m in MODULES if parse(page_of[m])["letter"]),
                      key=lambda m: rank(page_of[m]))
    of = lambda *kinds: sorted(_q(m for m in MODULES if KIND[m] in kinds))
    assert c["reading-order"]["layers"] == _q(reversed(chapters)) + [" : ".join(_q(appendix))], \
        "reading-order: the chapters' modules, last chapter first, then the appendix as one layer"
    assert sorted(c["models-skip-the-loop"]["source_modules"]) == of("layers", "model", "task")
    assert sorted(c["models-skip-the-loop"]["forbidden_modules"]) == sorted(_q(LOOP))
    assert sorted(c["models-independent"]["modules"]) == of("model")
    assert sorted(c["layers-import-layers-and-kit"]["source_modules"]) == of("layers")
    assert sorted(c["layers-import-layers-and-kit"]["forbidden_modules"]) == of("model", "task",
                                                                                "experiment")
    assert sorted(c["experiments-last"]["source_modules"]) == of("layers", "model", "task", "kit")
    assert sorted(c["experiments-last"]["forbidden_modules"]) == of("experiment")
    assert c["no-cycle"]["type"] == "acyclic_siblings" and c["no-cycle"]["ancestors"] == ["txbook"]


def model_outputs(name: str) -> list[str]:
    """The classes of `txbook/<name>.py` whose forward returns a ModelOutput (its annotation or a
    return statement)"""
    found = []
    for cls in ast.walk(ast.parse((PKG / f"{name}.py").read_text())):
        if not isinstance(cls, ast.ClassDef): continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                said = fn.returns is not None and "ModelOutput" in ast.unparse(fn.returns)
                built = any(isinstance(r, ast.Return) and r.value is not None
                            and "ModelOutput(" in ast.unparse(r.value) for r in ast.walk(fn))
                if said or built: found.append(cls.name)
    return found


def test_models_are_classified_as_models():
    """A class whose forward returns a ModelOutput (logits and a loss of its own) is a model: its
    module is one"""
    wrong = {m: (KIND.get(m), model_outputs(m)) for m in MODULES
             if model_outputs(m) and KIND.get(m) != "model"}
    assert not wrong, (
        f"modules holding models (forward returns a ModelOutput) not classified as model: {wrong}"
    )
    # the rule sees them
    assert model_outputs("poslabels") == ["PositionLabelViT", "PositionLabelSwin"]


def lint_imports(cwd, pythonpath) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return run_process(exe if exe.exists() else "lint-imports", "--no-cache", cwd=cwd, env=env)


def test_imports_keep_the_contracts():
    r = lint_imports(ROOT, ROOT)
    assert r.returncode == 0, (
        f"lint-imports: broken import contracts (pyproject.toml):\n{r.stdout[-6000:]}"
    )


def test_the_contracts_catch_planted_imports(tmp_path):
    """A model that imports the loop, a chapter that imports a later one (and so a cycle): each
    contract says so"""
    shutil.copytree(PKG, tmp_path / "txbook")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for m, line in [("gpt", "from . import train, vit"), ("attention", "from . import gpt"),
                    ("windows", "from . import swin")]:
        with open(tmp_path / "txbook" / f"{m}.py", "a") as f: f.write(f"\n{line}\n")
    r = lint_imports(tmp_path, tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    out = " ".join(r.stdout.split())
    broken = {c["name"] for c in contracts().values() if f"{c['name']} BROKEN" in out}
    assert broken == {c["name"] for c in contracts().values()
                      if c["id"] != "experiments-last"}, out[-3000:]
