"The myst-nb reader that turns nbdev directives into cell tags (book/_ext/txbook_book.py)."
import json

import nbformat
import pytest
from conftest import NBS
from txbook_book import directive_tags, parse_directives, read_nbdev


def _nb(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nbformat.writes(nb)


def test_parse_directives_forms():
    dirs, body = parse_directives("#| export\n#|echo: false\n#| default_exp  attention\n\nx = 1\n#| not a directive\n")
    assert dirs == {"export": "", "echo": "false", "default_exp": "attention"}
    assert body == "x = 1\n#| not a directive"


def test_no_directives():
    assert parse_directives("x = 1\n") == ({}, "x = 1")


@pytest.mark.parametrize("src,expected", [
    ("#| hide\nimport torch", {"remove-cell"}),
    ("#| include: false\nx", {"remove-cell"}),
    ("#| default_exp core", {"remove-cell"}),
    ("#| export\ndef f(): pass", set()),
    ("#| echo: false\nplot()", {"remove-input"}),
    ("#| output: false\nfit()", {"remove-output"}),
    ("#| code-fold: true\nx", {"hide-input"}),
    ("#| eval: false\ndownload()", {"skip-execution"}),
    ("show_doc(attention)", {"remove-input"}),
    ("#| hide\n#| echo: false\nx", {"remove-cell"}),
])
def test_directive_tags(src, expected):
    dirs, body = parse_directives(src)
    assert directive_tags(dirs, body) == expected


def test_read_nbdev_strips_directives_and_keeps_tags():
    text = _nb("#| export\ndef f(): return 1", "#| hide\nsecret = 1", "show_doc(f)", "x = 2")
    raw = json.loads(text)
    raw["cells"][3]["metadata"]["tags"] = ["mine"]
    nb = read_nbdev(json.dumps(raw))
    srcs = [c.source for c in nb.cells]
    assert srcs == ["def f(): return 1", "secret = 1", "show_doc(f)", "x = 2"]
    assert nb.cells[0].metadata.get("tags") == []
    assert nb.cells[1].metadata["tags"] == ["remove-cell"]
    assert nb.cells[2].metadata["tags"] == ["remove-input"]
    assert nb.cells[3].metadata["tags"] == ["mine"]  # cells without directives are left alone


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_book_shows_no_directive_lines(path):
    nb = read_nbdev(path.read_text())
    for c in nb.cells:
        if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", []):
            assert not any(l.lstrip().startswith("#|") for l in c.source.splitlines()), c.source[:80]
