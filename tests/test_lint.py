"""ruff over the support code and the notebooks: pyflakes (unused and undefined names, ...),
syntax errors and lines of at most 100 characters in tests/, tools/, bench/, book/_ext and the code
cells of nbs/ (the rules: pyproject.toml's [tool.ruff]; a notebook may import a name again, or below
code). txbook/ is written by nbdev from the notebooks; tests/test_lines.py holds the code fences of
their markdown cells to the same 100.
"""
import json, shutil, sys
from pathlib import Path

from helpers import ROOT, run_process

SUPPORT = ["tests", "tools", "bench", "book/_ext"]
NOTEBOOKS = ["nbs"]


def ruff() -> str:
    "The ruff beside this Python (the dev extra installs it), else the one on PATH"
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[dev]' (or pip install ruff)"
    return found


def test_support_code_and_notebooks_pass_ruff():
    paths = SUPPORT + NOTEBOOKS
    r = run_process(ruff(), "check", "--no-cache", "--output-format", "concise", *paths, cwd=ROOT)
    assert r.returncode == 0, (f"ruff check {' '.join(paths)} (fix with --fix where it offers):\n"
                               f"{r.stdout[-6000:]}")


def test_the_package_imports_nothing_it_does_not_use():
    """F401 over txbook/: an import an exported cell makes for a later, unexported one belongs in
    that cell (the notebooks alone cannot show it: the later cell uses the name)"""
    r = run_process(ruff(), "check", "--no-cache", "--select", "F401", "--output-format", "concise",
                    "txbook", cwd=ROOT)
    assert r.returncode == 0, f"unused imports in the package:\n{r.stdout[-3000:]}"


def test_ruff_catches_what_it_is_there_for(tmp_path):
    "The configuration is read and enforced: an unused import and a line of 101 characters fail"
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = '" + "a" * 95 + "'\n")
    r = run_process(ruff(), "check", "--no-cache", "--config", ROOT / "pyproject.toml",
                    "--output-format", "concise", bad)
    assert r.returncode == 1 and "F401" in r.stdout and "E501" in r.stdout, r.stdout + r.stderr


def _cell(kind: str, source: list[str]) -> dict:
    cell = {"cell_type": kind, "id": f"c{abs(hash(tuple(source))) % 10**6}", "metadata": {},
            "source": source}
    return cell | ({"execution_count": None, "outputs": []} if kind == "code" else {})


def test_ruff_reads_the_notebooks(tmp_path):
    """A notebook's code cells are checked with the notebooks' rules: an unused import, an undefined
    name and a long code line fail; a name imported again (F811), an import below code (E402) and a
    long markdown line do not"""
    cells = [_cell("code", ["import os\n", "x = 1\n"]),
             _cell("markdown", ["y" * 130]),
             _cell("code", ["import math\n", "import math\n", "print(math.pi, undefined_name)\n",
                            "z = '" + "a" * 95 + "'\n"])]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                      "display_name": "Python 3"},
                       "language_info": {"name": "python"}}}
    (tmp_path / "nbs").mkdir()
    (tmp_path / "nbs" / "bad.ipynb").write_text(json.dumps(nb))
    r = run_process(ruff(), "check", "--no-cache", "--config", ROOT / "pyproject.toml",
                    "--output-format", "concise", "nbs", cwd=tmp_path)
    codes = sorted(line.split(": ")[1].split()[0] for line in r.stdout.splitlines()
                   if ".ipynb:" in line)
    assert r.returncode == 1 and codes == ["E501", "F401", "F821"], r.stdout + r.stderr
