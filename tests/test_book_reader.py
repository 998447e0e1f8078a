"The myst-nb reader that turns nbdev directives into cell tags (book/_ext/txbook_book.py)."
import json

import nbformat
import pytest
from helpers import NBS, ROOT
from txbook_book import directive_tags, parse_directives, read_nbdev


def _nb(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nbformat.writes(nb)


def test_parse_directives_forms():
    dirs, body = parse_directives("#| export\n#|echo: false\n#| default_exp  attention\n\nx = "
                                  "1\n#| not a directive\n")
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
            assert not any(l.lstrip().startswith("#|")
                           for l in c.source.splitlines()), c.source[:80]


# ----------------------------------------------------------------- the rest of the book's extension
from txbook_book import nbdev_page, notebook_markdown, write_nbdev_pages  # noqa: E402


@pytest.mark.parametrize("name,page",
                         [("01_attention.ipynb", "attention.html"), ("d_viz.ipynb", "d_viz.html"),
                                       ("a_core.ipynb", "a_core.html"),
                                       ("17_mae.ipynb", "mae.html")])
def test_nbdev_page_matches_nbdev(name, page):
    from nbdev.config import nbpath2html  # the function nbdev names its pages with
    assert nbdev_page(name) == page == nbpath2html(name).name


def test_notebook_markdown_applies_directives_and_keeps_text_outputs():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nProse with $x$."),
                nbformat.v4.new_code_cell("#| hide\nsecret = 1"),
                nbformat.v4.new_code_cell("#| export\ndef f(): return 1"),
                nbformat.v4.new_code_cell("print(f())"),
                nbformat.v4.new_code_cell("#| echo: false\nplot()")]
    ex = nbformat.v4.new_notebook()
    ex.cells = [nbformat.from_dict(c) for c in nb.cells]
    ex.cells[3].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    ex.cells[4].outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": "AAA", "text/plain": "<Figure>"})]
    md = notebook_markdown(nbformat.writes(nb), nbformat.writes(ex))
    assert (
        md
        == "# Title\n\nProse with $x$.\n\n```python\ndef f(): return "
           "1\n```\n\n```python\nprint(f())\n```"
        "\n\n```\n1\n```\n\n```\n<Figure>\n```\n"
    )


def test_write_nbdev_pages(tmp_path):
    src, out = tmp_path / "src", tmp_path / "html"
    (src / "nbs").mkdir(parents=True)
    (out / "nbs").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Attention")]
    (src / "nbs" / "01_attention.ipynb").write_text(nbformat.writes(nb))
    (src / "nbs" / "02_missing.ipynb").write_text(nbformat.writes(nb))  # not built: no alias
    (out / "nbs" / "01_attention.html").write_text("<html></html>")
    written = {p.relative_to(out).as_posix() for p in write_nbdev_pages(out, src)}
    assert written == {"nbs/attention.html", "nbs/attention.html.md", "nbs/index.html"}
    html = (out / "nbs" / "attention.html").read_text()
    assert 'location.replace("01_attention.html" + location.hash)' in html \
        and 'url=01_attention.html' in html
    assert (out / "nbs" / "attention.html.md").read_text() == "# Attention\n"
    assert 'location.replace("../index.html"' in (out / "nbs" / "index.html").read_text()


# ------------------------------------------------------------------ the site checks' own criteria
def _svg(fig):
    import io
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


def test_empty_figure_criterion():
    """tests/check_site.py flags a figure with nothing drawn, and no figure that shows data or a
    diagram"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from check_site import svg_is_empty

    def made(draw):
        fig, ax = plt.subplots()
        draw(ax)
        try:
            return svg_is_empty(_svg(fig))
        finally:
            plt.close(fig)
    blank = plt.figure()
    assert svg_is_empty(_svg(blank))
    plt.close(blank)
    assert made(lambda ax: ax.set(title="t", xlabel="x"))  # axes, labels, no data
    assert made(lambda ax: ax.legend(["nothing"]))
    for draw in [lambda ax: ax.plot([1, 2, 3], "k-"), lambda ax: ax.bar([1, 2], [3, 4]),
                 lambda ax: ax.imshow(np.eye(3), cmap="gray"), lambda ax: ax.scatter([1], [2]),
                 lambda ax: ax.fill_between([1, 2], [1, 2]),
                 lambda ax: (ax.axis("off"), ax.text(.5, .5, "box"))]:
        assert not made(draw)
    assert svg_is_empty('<svg xmlns="http://www.w3.org/2000/svg"><defs><path d="M0 '
                        '0"/></defs></svg>')
    assert not svg_is_empty('<svg xmlns="http://www.w3.org/2000/svg"><circle r="3"/></svg>')


def test_machine_paths():
    from check_site import machine_paths
    assert machine_paths("data in /work/shared/data and /home/alice/x") == ["/home/alice",
                                                                            "/work/shared"]
    assert machine_paths("/usr/local/lib/python3.11/site-packages/torch") != []
    assert machine_paths("C:\\Users\\bob\\data") != []
    assert machine_paths("see https://example.com/tmp/x, a/b/c, 1/2, ../shared/data") == []
    assert machine_paths("cached in ~/.cache/txbook", extra=("/srv/ci/txbook",)) == []
    assert machine_paths("built in /srv/ci/txbook/nbs",
                         extra=("/srv/ci/txbook",)) == ["/srv/ci/txbook"]


def test_anchor_names_match_nbdev_symbol_index():
    """The ids the extension gives exported cells are the anchors of every symbol in
    txbook/_modidx.py"""
    from txbook_book import doc_anchor
    ns = {}
    exec((ROOT / "txbook" / "_modidx.py").read_text(), ns)
    # 'attention.html#attention'
    indexed = {loc for syms in ns["d"]["syms"].values() for loc, _ in syms.values()}
    ours = set()
    for path in NBS:
        page = nbdev_page(path.name)
        for c in read_nbdev(path.read_text()).cells:
            ours |= {f"{page}#{doc_anchor(n)}" for n in c.metadata.get("txbook_defines", [])}
    assert indexed and not indexed - ours, sorted(indexed - ours)[:10]
