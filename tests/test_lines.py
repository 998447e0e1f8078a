"""Code lines in the notebooks are at most 100 characters, so the site never scrolls code sideways.

Counted: every line of every code cell, and every line inside a fenced code block (```python, ```,
```{code-cell}) of a markdown cell; the prose inside MyST directives such as ```{exercise} is not
code. A failure lists each long line as `nbs/<notebook>:cell <n>:line <m>` (n counts all cells from
1, as `nbdev` and Jupyter order them; m counts the cell's lines from 1) with its length.
"""
import json, re

import pytest
from helpers import NBS, ROOT

MAX = 100


CODE_DIRECTIVES = {"code-cell", "code-block", "code", "sourcecode"}


def code_lines(cell: dict):
    "(line number, text) of the code a reader sees in a markdown cell's code fences"
    src = cell["source"]
    lines = (src if isinstance(src, str) else "".join(src)).splitlines()
    if cell["cell_type"] != "markdown":   # code cells: ruff's E501 (tests/test_lint.py)
        return
    # open fences: (backticks or tildes, holds code?); MyST directives ({exercise}, ...) hold prose
    stack = []
    for i, line in enumerate(lines, 1):
        m = re.match(r"\s*(`{3,}|~{3,})\s*(.*)$", line)
        if m and stack and m.group(1)[0] == stack[-1][0][0] \
                and len(m.group(1)) >= len(stack[-1][0]) \
                and not m.group(2):
            stack.pop()  # closes the innermost fence
        elif m and not (stack and stack[-1][1]):
            # a fence opens (nothing opens inside a code fence)
            info = m.group(2)
            directive = re.match(r"\{([\w-]+)\}", info)
            stack.append((m.group(1), directive is None or directive.group(1) in CODE_DIRECTIVES))
        elif stack and stack[-1][1]:
            yield i, line


def long_lines(path, limit: int = MAX) -> list[str]:
    nb = json.loads(path.read_text())
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    return [f"{rel}:cell {c}:line {i}: {len(line)} characters: {line.strip()[:70]}"
            for c, cell in enumerate(nb["cells"], 1)
            for i, line in code_lines(cell) if len(line) > limit]


def test_code_lines_counted(tmp_path):
    "The counter itself: markdown fences count; code cells (ruff's), prose and short lines do not"
    nb = {"cells": [{"cell_type": "code", "source": ["x = 1\n", "y = '" + "a" * 100 + "'\n"]},
                    {"cell_type": "markdown",
                     "source": "b" * 150 + "\n```python\n" + "c" * 101 + "\n```\n"},
                    {"cell_type": "code", "source": "z" * 100},
                    {"cell_type": "markdown",
                     "source": "````{solution} ex\n" + "p" * 120 + "\n```\n" + "q" * 120
                               + "\n```\n" + "r" * 120 + "\n````\n"}]}
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps(nb))
    assert [l.split(": ")[0] for l in long_lines(p)] == ["x.ipynb:cell 2:line 3",
                                                          "x.ipynb:cell 4:line 4"]


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_code_lines_at_most_100(path):
    bad = long_lines(path)
    assert not bad, (f"{len(bad)} code lines of markdown cells longer than {MAX} characters:\n"
                     + "\n".join(bad))
