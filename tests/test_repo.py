"""The repository's invariants: clean notebooks, package in sync with nbs/, chapters set up for
Colab and the book."""
import json, os, shutil, subprocess, sys
from pathlib import Path

import pytest
import txbook
from helpers import NBS, ROOT
from fastcore.nbio import nb2str, read_nb
from nbdev.clean import _nbdev_clean

BIN = Path(sys.executable).parent


def test_there_are_notebooks():
    assert len(NBS) >= 2


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_notebook_is_clean(path):
    "nbdev-clean would change nothing: no outputs, no execution counts, only allow-listed metadata"
    nb = read_nb(path)
    _nbdev_clean(nb, path=None)
    assert nb2str(nb) == path.read_text(
        encoding="utf-8"), f"{path.name} is not clean: run nbdev-clean"
    for c in nb.cells:
        assert not c.get("outputs") and c.get("execution_count") is None


def test_clean_keeps_colab_gpu_metadata_and_tags():
    "The allow-lists in pyproject.toml keep Colab's GPU request and cell tags through nbdev-clean"
    nb = json.loads(NBS[0].read_text())
    nb["metadata"].update(accelerator="GPU", colab={"gpuType": "T4"}, stray="drop me")
    nb["cells"][0]["metadata"] = {"tags": ["remove-input"], "stray": 1}
    from fastcore.nbio import dict2nb
    nb = dict2nb(nb)
    _nbdev_clean(nb, path=None)
    assert nb.metadata["accelerator"] == "GPU" and nb.metadata["colab"] == {"gpuType": "T4"}
    assert "stray" not in nb.metadata
    assert dict(nb.cells[0].metadata) == {"tags": ["remove-input"]}


def test_package_in_sync_with_notebooks(tmp_path):
    "nbdev-export of nbs/ reproduces txbook/ exactly (txbook/ is never edited by hand)"
    for p in ("nbs", "txbook", "pyproject.toml"):
        src = ROOT / p
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / p)
    subprocess.run([str(BIN / "nbdev-export")], cwd=tmp_path, check=True, capture_output=True)
    ours = {p.relative_to(ROOT / "txbook"): p.read_text() for p in (ROOT / "txbook").rglob("*.py")}
    theirs = {p.relative_to(tmp_path / "txbook"): p.read_text()
              for p in (tmp_path / "txbook").rglob("*.py")}
    assert sorted(ours) == sorted(
        theirs), "txbook/ has files nbdev-export does not make (or lacks some)"
    stale = [str(k) for k in ours if ours[k] != theirs[k]]
    assert not stale, f"out of sync with nbs/ (run nbdev-export): {stale}"


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_chapter_starts_with_hidden_colab_setup(path):
    """Each chapter's first code cells: default_exp, then a hidden cell that installs this version
    only in Colab"""
    code = [c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    setup = next(s for s in code if not s.startswith("#| default_exp"))
    assert setup.startswith("#| hide"), setup[:60]
    assert "'google.colab' in sys.modules" in setup
    assert f"'txbook=={txbook.__version__}'" in setup, (
        "Colab install not pinned to txbook.__version__"
    )
    assert "raise RuntimeError" in setup, "a failed install must stop the chapter"
    assert "nbdev" not in setup, "chapters must run without nbdev (Colab does not have it)"
    assert "book_setup()" in setup


def test_toc_lists_every_notebook():
    toc = (ROOT / "_toc.yml").read_text()
    missing = [p.stem for p in NBS if f"nbs/{p.stem}" not in toc]
    assert not missing, f"notebooks missing from _toc.yml: {missing}"


def test_repository_url_agrees():
    """The repository URL is set once per tool: pyproject.toml (nbdev, PyPI) and _config.yml (the
    book)"""
    import tomllib, yaml
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"] == url
    assert "settings.ini" not in [p.name for p in ROOT.iterdir()], (
        "nbdev 3 refuses to run with a settings.ini"
    )


def _workflow(name):
    import yaml
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    return wf, wf.get("on", wf.get(True))   # YAML 1.1 reads the key `on` as True


def test_ci_runs_the_readme_commands():
    "README's two commands are the ones CI runs: .ci/run and the test workflow call `make test`"
    readme = (ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    wf, on = _workflow("test.yml")
    assert "push" in on and "pull_request" in on
    runs = [s.get("run", "") for s in wf["jobs"]["test"]["steps"]]
    assert "make test" in runs, runs


def test_pages_workflow_deploys_the_built_book():
    wf, on = _workflow("pages.yml")
    assert on["push"]["branches"] == ["main"]
    steps = wf["jobs"]["build"]["steps"]
    assert "make book" in [s.get("run") for s in steps]
    upload = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    assert any(s.get("uses", "").startswith("actions/deploy-pages")
               for s in wf["jobs"]["deploy"]["steps"])
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"


def test_release_workflow_checks_versions_and_uses_trusted_publishing():
    wf, on = _workflow("release.yml")
    assert on["push"]["tags"] == ["v*"]
    runs = "\n".join(s.get("run", "") for s in wf["jobs"]["build"]["steps"])
    assert 'tools/check_version.py "$GITHUB_REF_NAME"' in runs and "python -m build" in runs
    assert "twine check --strict" in runs
    pub = wf["jobs"]["publish"]
    assert pub["permissions"] == {
        "id-token": "write"}, "trusted publishing needs id-token, nothing else"
    assert [s["uses"] for s in pub["steps"]][-1].startswith("pypa/gh-action-pypi-publish@")
    assert not any("password" in s.get("with", {})
                   for s in pub["steps"]), "no API token: trusted publishing"


def test_readme_lists_every_chapter():
    "The README's chapter table links each notebook's page and its Colab badge"
    readme = (ROOT / "README.md").read_text()
    url = "https://colab.research.google.com/github/txbook/txbook/blob/main/nbs/"
    missing = [p.name for p in NBS
               if f"{url}{p.name})" not in readme or f"nbs/{p.stem}.html)" not in readme]
    assert not missing, f"README.md's chapter table lacks {missing}"


def _code(path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code")


def _has_full_size(path) -> bool:
    """The page runs something else at full size than at quick size: a `sized(quick, full, ...)`
    call whose full value differs from its quick one (positional or keyword, `sized` or
    `core.sized`), or any call of `is_quick()` or of a bare `size()` with no argument (a branch on
    the size, or a print of it: either asks for a GPU). A page may size only its smoke budgets
    (appendix B's Monte Carlo draws): it needs no GPU."""
    import ast
    from IPython.core.inputtransformer2 import TransformerManager   # magics, as the kernel reads
    name = lambda f: getattr(f, "id", None) or getattr(f, "attr", None)
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code": continue
        src = TransformerManager().transform_cell("".join(cell["source"]))
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, ast.Call): continue
            if name(node.func) == "is_quick" or (getattr(node.func, "id", None) == "size"
                                                 and not node.args and not node.keywords):
                return True
            if name(node.func) == "sized":
                given = dict(zip(("quick", "full"), node.args))
                given.update({k.arg: k.value for k in node.keywords if k.arg in ("quick", "full")})
                if set(given) == {"quick", "full"} and ast.dump(given["quick"]) != ast.dump(
                        given["full"]):
                    return True
    return False


def test_full_size_is_read_from_the_code(tmp_path):
    "What `_has_full_size` counts: cases written by hand, and appendix B (smoke budgets only)"
    def page(*cells):
        p = tmp_path / "p.ipynb"
        p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells]}))
        return _has_full_size(p)
    assert page("n = sized(2, 8)") and page("n = core.sized(quick=2, full=8, smoke=1)")
    assert page("%time x = 1", "if is_quick(): pass") and page("big = size() == 'full'")
    assert not page("n = sized(4, 4, smoke=1)", "m = sized(quick=3, full=3)", "x.size()")
    assert not page("!ls", "n = 1  # sized(1, 2) in a comment", "size('images', 0)")
    assert not _has_full_size(ROOT / "nbs" / "b_stats.ipynb")


# pages with a full-size experiment
SIZED = [p for p in NBS if p.stem != "a_core" and _has_full_size(p)]


def test_some_chapters_have_full_sizes():
    "The test below is not empty: the experiment chapters size their runs with sized(quick, full)"
    assert {"08_gpt", "12_swin"} <= {p.stem for p in SIZED}, [p.stem for p in SIZED]


@pytest.mark.parametrize("path", SIZED, ids=lambda p: p.name)
def test_chapters_with_full_sizes_ask_colab_for_a_gpu(path):
    """A chapter that sizes experiments with sized(quick, full) has a full size for a GPU: Colab
    must offer one"""
    nb = json.loads(path.read_text())
    assert nb["metadata"].get(
        "accelerator") == "GPU", "set the notebook's metadata accelerator: GPU"
    assert nb["metadata"].get("colab", {}).get("gpuType"), "set metadata colab.gpuType (e.g. T4)"


def test_landing_page_lists_every_chapter():
    "book/intro.md's chapter table links each notebook"
    intro = (ROOT / "book" / "intro.md").read_text()
    missing = [p.name for p in NBS if f"<../nbs/{p.stem}>`" not in intro]
    assert not missing, f"book/intro.md's chapter table lacks {missing}"


def test_the_long_files_go_out_first():
    """conftest's FIRST names test files that exist, once each, with the two passes first: a file
    renamed out of it would silently go back to the end of the run. The scheduler's unit of work is
    a file, but a page of the quick pass is a unit alone"""
    import conftest
    files = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    assert not set(conftest.FIRST) - files, set(conftest.FIRST) - files
    assert len(set(conftest.FIRST)) == len(conftest.FIRST), conftest.FIRST
    assert conftest.FIRST[:2] == ["test_colab", "test_notebooks"], conftest.FIRST
    make = (ROOT / "Makefile").read_text()
    assert "--dist loadfile --no-loadscope-reorder" in make, "xdist would reorder the units"
    # the hook sorts: fake items of four files, in pytest's (alphabetical) order
    from types import SimpleNamespace
    item = lambda name: SimpleNamespace(path=Path(f"tests/{name}.py"),
                                        get_closest_marker=lambda m: None)
    items = [item(n) for n in ("test_amp", "test_colab", "test_lint", "test_notebooks")]
    config = SimpleNamespace(getoption=lambda *a: "not slow",
                             hook=SimpleNamespace(pytest_deselected=lambda items: None))
    conftest.pytest_collection_modifyitems(config, items)
    assert [it.path.stem for it in items] == ["test_colab", "test_notebooks", "test_amp",
                                              "test_lint"], items
    # the units xdist is sent: a file, or a quick page
    page, colab = "tests/test_notebooks.py::test_notebook[08_gpt.ipynb]", \
        "tests/test_colab.py::test_chapter_runs_in_colab[08_gpt]"
    assert [conftest._unit(n) for n in (page, colab)] == [page, "tests/test_colab.py"]


def test_the_suite_collects_without_xdist(tmp_path):
    """tests/conftest.py's xdist hook is optional: pytest without pytest-xdist (the Colab and floor
    venvs run tests/test_loaders.py so) still collects"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}   # no -n from here
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider",
                        "--collect-only", "-q", str(ROOT / "tests" / "test_loaders.py")],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_the_appendix_letters_match_its_pages():
    """Where README, CONTRIBUTING, the introduction and _toc.yml name the appendix by its letters,
    they are A to the last letter of nbs/, which has them all from A on"""
    import re
    letters = sorted(p.stem[0].upper() for p in NBS if re.fullmatch(r"[a-z]_\w+", p.stem))
    assert letters == [chr(ord("A") + i) for i in range(len(letters))], letters   # no gap
    span = re.compile(r"appendix \(?([A-Z])\s*(?:–|-|\.\.| to )\s*([A-Z])\b")
    for doc in ("README.md", "CONTRIBUTING.md", "book/intro.md", "_toc.yml"):
        said = span.findall((ROOT / doc).read_text())
        assert said and set(said) == {("A", letters[-1])}, (doc, said, letters[-1])


def test_every_bench_script_runs_in_a_test():
    """Each bench script is a case of tests/test_bench.py (`CASES`) or of
    tests/test_bench_records.py (`test_the_scripts_write_records`, which also checks the record it
    writes): read from their code, not their comments"""
    import ast, re
    def scripts(path, where) -> set[str]:
        nodes = [n for n in ast.walk(ast.parse((ROOT / "tests" / path).read_text())) if where(n)]
        assert nodes, f"{path}: nothing found where the bench cases should be"
        return {re.sub(r"^bench/", "", c.value) for n in nodes for c in ast.walk(n)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
                and re.fullmatch(r"(bench/)?bench_\w+\.py", c.value)}
    cases = scripts("test_bench.py", lambda n: isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "CASES" for t in n.targets))
    records = scripts("test_bench_records.py", lambda n: isinstance(n, ast.FunctionDef)
                      and n.name == "test_the_scripts_write_records")   # its parametrize list
    missing = [p.name for p in sorted((ROOT / "bench").glob("bench_*.py"))
               if p.name not in cases | records]
    assert not missing, f"bench scripts no test runs: {missing}"
