"""ruff over the support code: pyflakes (unused and undefined names, ...), syntax errors and lines
of at most 120 characters in tests/, tools/, bench/ and book/_ext (the rules: pyproject.toml's
[tool.ruff]). The notebooks' code lines are held to 100 by tests/test_lines.py; txbook/ is written
by nbdev from them.
"""
import shutil, sys
from pathlib import Path

from helpers import ROOT, run_process

SUPPORT = ["tests", "tools", "bench", "book/_ext"]


def ruff() -> str:
    "The ruff beside this Python (the dev extra installs it), else the one on PATH"
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[dev]' (or pip install ruff)"
    return found


def test_support_code_passes_ruff():
    r = run_process(ruff(), "check", "--no-cache", "--output-format", "concise", *SUPPORT, cwd=ROOT)
    assert r.returncode == 0, (
        f"ruff check {' '.join(SUPPORT)} (fix with --fix where it offers):\n{r.stdout[-6000:]}"
    )


def test_ruff_catches_what_it_is_there_for(tmp_path):
    "The configuration is read and enforced: an unused import and a long line fail"
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = '" + "a" * 130 + "'\n")
    r = run_process(ruff(), "check", "--no-cache", "--config", ROOT / "pyproject.toml",
                    "--output-format", "concise", bad)
    assert r.returncode == 1 and "F401" in r.stdout and "E501" in r.stdout, r.stdout + r.stderr
