"""Numbers in the prose come from the run, or are allowed for a stated reason.

A number a run produces (an accuracy, a loss, a time, a verdict's gap) goes stale the moment the run
changes, so a page prints it from the cell that computes it, and its prose states the finding
without the figure. The numbers a page may type are the ones no run of the page produces: a paper's
table, a constant, a hyper-parameter, the arithmetic of a worked example or an exercise, a figure
read from a results file by a cell. This test scans every markdown cell (prose, exercises and
solutions; not code, not inline code, not citations or links) for numbers that look like
measurements (decimals, percentages, mean ± spread) and fails on each one that
`tests/typed_numbers.yml` does not list for that page with a reason. A reason may not be empty or
"UNREVIEWED".
"""
import json, re
from pathlib import Path

import pytest
import yaml
from helpers import NBS, ROOT

ALLOWED = yaml.safe_load((ROOT / "tests" / "typed_numbers.yml").read_text()) or {}
NUMBER = re.compile(
    r"(?<![\w.\-/])(?:\d+(?:\.\d+)?\s?±\s?\d+(?:\.\d+)?|\d+(?:\.\d+)?\s?%|\d+\.\d+)(?![\w.])")


def prose(text: str) -> str:
    """A markdown cell without its code: fenced code blocks, inline code, roles ({cite}, {doc},
    {eq}) and URLs"""
    text = re.sub(r"```(?:python|\{code-cell\}|\{code-block\}|\{code\})?[^\n]*\n.*?```",
                  lambda m: m.group(0) if re.match(r"```\{(?:exercise|solution)", m.group(0))
                  else " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\{(?:cite:\w+|cite|doc|eq|ref|numref)\}`[^`]*`", " ", text)
    return re.sub(r"https?://\S+", " ", text)


def typed_numbers(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    found = []
    for c in cells:
        if c["cell_type"] == "markdown":
            src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            found += [re.sub(r"\s+", " ", n) for n in NUMBER.findall(prose(src))]
    return found


def test_the_scan_finds_what_it_should():
    text = ("An accuracy of 84.6 % and a loss of 2.06 ± 0.01, a rate of 3e-4, 12 seeds, chapter "
            "10, `x = 0.5` in code, {cite:p}`a2021`.\n```python\ny = 1.25\n```\n```{solution} "
            "ex\n0.75\n```")
    assert NUMBER.findall(prose(text)) == ["84.6 %", "2.06 ± 0.01", "0.75"]


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.stem)
def test_numbers_in_prose_are_allowed(path):
    allowed = {str(k): v for k, v in (ALLOWED.get(path.stem) or {}).items()}
    unlisted = sorted({n for n in typed_numbers(path) if n not in allowed})
    assert not unlisted, (f"{path.stem}: numbers typed in the prose with no reason in "
                          "tests/typed_numbers.yml "
                          "(print them from the cell that computes them, or list them with a "
                          f"reason): {unlisted}")
    unreviewed = sorted(k for k, v in allowed.items()
                        if not v or str(v).strip().upper() == "UNREVIEWED")
    assert not unreviewed, f"{path.stem}: typed numbers listed without a reason: {unreviewed}"
    stale = sorted(set(allowed) - set(typed_numbers(path)))
    assert not stale, (
        f"{path.stem}: tests/typed_numbers.yml lists numbers the page no longer has: {stale}"
    )
