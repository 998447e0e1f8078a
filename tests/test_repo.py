"The repository's invariants: clean notebooks, package in sync with nbs/, chapters set up for Colab and the book."
import json, shutil, subprocess, sys
from pathlib import Path

import pytest
import txbook
from conftest import NBS, ROOT
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
    assert nb2str(nb) == path.read_text(encoding="utf-8"), f"{path.name} is not clean: run nbdev-clean"
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
    theirs = {p.relative_to(tmp_path / "txbook"): p.read_text() for p in (tmp_path / "txbook").rglob("*.py")}
    assert sorted(ours) == sorted(theirs), "txbook/ has files nbdev-export does not make (or lacks some)"
    stale = [str(k) for k in ours if ours[k] != theirs[k]]
    assert not stale, f"out of sync with nbs/ (run nbdev-export): {stale}"


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_chapter_starts_with_hidden_colab_setup(path):
    "Each chapter's first code cells: default_exp, then a hidden cell that installs this version only in Colab"
    code = [c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    setup = next(s for s in code if not s.startswith("#| default_exp"))
    assert setup.startswith("#| hide"), setup[:60]
    assert "'google.colab' in sys.modules" in setup
    assert f"'txbook=={txbook.__version__}'" in setup, "Colab install not pinned to txbook.__version__"
    assert "raise RuntimeError" in setup, "a failed install must stop the chapter"
    assert "nbdev" not in setup, "chapters must run without nbdev (Colab does not have it)"
    assert "book_setup()" in setup


def test_toc_lists_every_notebook():
    toc = (ROOT / "_toc.yml").read_text()
    missing = [p.stem for p in NBS if f"nbs/{p.stem}" not in toc]
    assert not missing, f"notebooks missing from _toc.yml: {missing}"


def test_repository_url_agrees():
    "The repository URL is set once per tool: pyproject.toml (nbdev, PyPI) and _config.yml (the book)"
    import tomllib, yaml
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"] == url
    assert "settings.ini" not in [p.name for p in ROOT.iterdir()], "nbdev 3 refuses to run with a settings.ini"
