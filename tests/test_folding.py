"""Each idea shows one check on the rendered page; the others are folded.

A *check cell* is a code cell with a statement `test_…(` or `assert` (at the start of a line, or
after `:` or `;` as in `with torch.no_grad(): test_close(...)`). A check cell is *visible* unless a
directive hides or folds its code on the page: `#| code-fold: true` (myst-nb's `hide-input`: a "show
code" toggle), `#| echo: false`, `#| hide`, `#| include: false`. The rule: in every chapter, each
section (the cells under one markdown heading, of any level, up to the next heading) has at most one
visible check cell. A chapter that teaches a computation and then checks it against several
references keeps the first, most telling check visible and folds the rest, or gives each idea its
own heading. A failure lists `nbs/<notebook>: "<section>" has k visible check cells: cells n1, n2,
...` (cells counted from 1, as Jupyter orders them).
"""
import json, re

import pytest
from helpers import NBS, ROOT

_check = re.compile(r"(^\s*|[:;]\s*)(test_\w*\(|assert\b)", re.M)  # also after `with ...:` or `;`
_hidden = re.compile(
    r"^#\|\s*(code-fold:\s*(true|show)|echo:\s*false|hide\s*$|hide_input|include:\s*false)",
    re.M | re.I)
_heading = re.compile(r"^#{1,6} (.+)$", re.M)


def visible_checks(cells: list[dict]) -> dict[str, list[int]]:
    "Section title -> the numbers (from 1) of its visible check cells"
    section, found = "(before the first heading)", {}
    for n, cell in enumerate(cells, 1):
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            # no headings from code fences
            fences = re.sub(r"^(`{3,}|~{3,}).*?^\1", "", src, flags=re.M | re.S)
            heads = _heading.findall(fences)
            if heads:
                section = heads[-1].strip()
            continue
        if cell["cell_type"] == "code" and _check.search(src) and not _hidden.search(src):
            found.setdefault(section, []).append(n)
    return found


def crowded(path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    return [f'{rel}: "{s}" has {len(ns)} visible check cells: cells {", ".join(map(str, ns))}'
            for s, ns in visible_checks(cells).items() if len(ns) > 1]


def test_rule_itself(tmp_path):
    """The counter: folded, echo-less and hidden checks do not count; headings in code fences do not
    open sections"""
    md = lambda s: {"cell_type": "markdown", "source": s}
    code = lambda s: {"cell_type": "code", "source": s}
    nb = {
        "cells": [md("## A"), code("x = 1\ntest_eq(x, 1)"), code("  assert x"),
                  code("#| code-fold: true\nassert x"),
                  md("```python\n# not a heading\n```"), code("#| echo: false\ntest_close(1, 1)"),
                  code("y = 2  # no check"), md("## B\ntext"), code("with x: test_eq(1, 1)"),
                  code("#| hide\nassert True"), code("assert_x = 3")]}
    assert visible_checks(nb["cells"]) == {"A": [2, 3], "B": [9]}
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps(nb))
    assert crowded(p) == ['x.ipynb: "A" has 2 visible check cells: cells 2, 3']


@pytest.mark.parametrize("path", [p for p in NBS if p.name[0].isdigit()], ids=lambda p: p.stem)
def test_one_visible_check_per_section(path):
    if bad := crowded(path):
        pytest.fail("\n".join(bad), pytrace=False)
