"""Checks on the built site (run after `jupyter-book build`): every chapter rendered as the reader should see it.

usage: python tests/check_site.py [_build/html]   — prints one line per failed check and 'N passed, N failed'.
"""
import re, sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"
repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].removeprefix("https://github.com/")
passed, failed = 0, []


def check(ok, what):
    global passed
    if ok: passed += 1
    else: failed.append(what)


def code_text(html):
    "The text of the code blocks on a page (inputs and outputs), tags stripped"
    blocks = re.findall(r'<div class="highlight"><pre>(.*?)</pre>', html, flags=re.S)
    return "\n".join(re.sub(r"<[^>]+>", "", b) for b in blocks)


check((site / "index.html").exists(), "index.html exists")
for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
    page = site / "nbs" / f"{nb.stem}.html"
    if not page.exists():
        failed.append(f"{page} missing"); continue
    html = page.read_text()
    code = code_text(html)
    check(f"colab.research.google.com/github/{repo}/blob/main/nbs/{nb.name}" in html, f"{nb.stem}: Colab launch button")
    check("#|" not in code and "#| " not in html, f"{nb.stem}: no nbdev directive shown")
    check("pip install -q txbook" not in code, f"{nb.stem}: hidden setup cell removed")
    check(not re.search(r"^show_doc\(", code, flags=re.M), f"{nb.stem}: show_doc cells show only their output")
    check("Traceback (most recent call last)" not in code, f"{nb.stem}: no traceback")
    figures = re.findall(r'<img[^>]+src="[^"]*_images/[^"]+\.(?:svg|png)"', html)
    if nb.stem != "00_core":
        check(len(figures) > 0, f"{nb.stem}: figures rendered ({len(figures)} found)")
    if nb.stem[:2].isdigit() and int(nb.stem[:2]) >= 1:
        check('class="math' in html, f"{nb.stem}: typeset equations")
        check("Exercises" in html and "solution" in html.lower(), f"{nb.stem}: exercises with solutions")
check((site / "book" / "references.html").exists() and "Turner" in (site / "book" / "references.html").read_text(),
      "references page lists the bibliography")

for f in failed: print("FAILED:", f)
print(f"{passed} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
