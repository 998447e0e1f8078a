"""The book's PDF tools without a browser: tools/book_pdf.py's page list and its rewriting of a
built page, and tests/check_pdf.py's checks, each shown to fail on the fault it is there for
(`make pdf` runs both on the real book, after `make book`).
"""
import copy, re, sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))
import book_pdf  # noqa: E402
import check_pdf  # noqa: E402


def test_pages_follow_the_toc():
    "Each page of _toc.yml once, in order; every notebook of nbs/ among them; numbered parts known"
    root, parts = book_pdf.book_pages()
    files = [root.file] + [p.file for part in parts for p in part.pages]
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [str(Path(c["file"]).with_suffix("")) for p in toc["parts"] for c in p["chapters"]]
    assert files == [str(Path(toc["root"]).with_suffix(""))] + listed
    assert len(set(files)) == len(files)
    assert {f"nbs/{nb.stem}" for nb in (ROOT / "nbs").glob("*.ipynb")} <= set(files)
    numbered = [p.file for part in parts for p in part.pages if p.numbered]
    assert numbered and all(re.match(r"nbs/\d\d_", f) for f in numbered)
    assert [part.caption for part in parts] == [p["caption"] for p in toc["parts"]]


def test_links():
    keys = {"/nbs/01_attention.html": "nbs-01_attention", "/book/intro.html": "book-intro"}
    base = "https://example.org/txbook/"
    here = "/nbs/02_mhsa.html"
    link = lambda href: book_pdf._link(href, here, {**keys, here: "nbs-02"}, base)
    assert link("#masks") == "#nbs-02--masks"
    assert link("01_attention.html#masks") == "#nbs-01_attention--masks"
    assert link("../book/intro.html") == "#book-intro"
    assert link("../genindex.html") == "https://example.org/txbook/genindex.html"
    assert link("https://pytorch.org/docs") == "https://pytorch.org/docs"
    assert link("../_images/x.png") == "https://example.org/txbook/_images/x.png"


PAGE = """<html><head><link rel="stylesheet" href="../_static/styles/theme.css">
<script>window.MathJax = {"options": {}}</script>
<script defer src="../_static/mathjax/tex-mml-chtml.js"></script>
<script src="../_static/other.js"></script></head><body><nav>sidebar</nav>
<article class="bd-article"><section id="setup">
<h1>Setup: devices<a class="headerlink" href="#setup">#</a></h1>
<p>See <a href="#seeds">seeds</a> and <a href="01_attention.html#masks">masks</a>, \\(x\\).</p>
<div class="cell"><details class="admonition hide above-input"><summary>Show code</summary>
<pre>folded()</pre></details><div class="cell_output"><img src="../_images/fig.svg"></div></div>
<section id="seeds">
<h2>Seeds <span class="math notranslate">\\(s\\)</span>
<a class="headerlink" href="#seeds">#</a></h2>
<details class="solution dropdown"><summary>Solution</summary>answer</details></section></section>
</article></body></html>"""


def test_read_article(tmp_path):
    "An appendix page: its letter, ids under its key, links inside the document, folded code out"
    (tmp_path / "nbs").mkdir()
    (tmp_path / "nbs" / "a_core.html").write_text(PAGE)
    page = book_pdf.Page("nbs/a_core", "Appendix: the toolbox", False)
    keys = {"/nbs/a_core.html": page.key, "/nbs/01_attention.html": "nbs-01_attention"}
    sections = book_pdf.read_article(tmp_path, page, keys, "https://example.org/")
    assert (page.label, page.title) == ("A", "Setup: devices")
    assert page.heading == "Appendix A. Setup: devices"
    h = page.html
    assert h.startswith('<section class="pdf-page" id="nbs-a_core">') and "sidebar" not in h
    assert 'id="nbs-a_core--setup"' in h and 'id="nbs-a_core--seeds"' in h and 'id="setup"' not in h
    assert 'href="#nbs-a_core--seeds"' in h and 'href="#nbs-01_attention--masks"' in h
    assert "folded()" not in h and "Show code" not in h
    figure = '<a class="pdf-figure" href="https://example.org/_images/fig.svg">'
    assert figure + '<img src="/_images/fig.svg"' in h
    assert re.search(r"<details[^>]*open", h) and "headerlink" not in h
    assert "Appendix A. Setup: devices" in re.sub(r"<[^>]+>", "", h)
    assert sections == [(2, "nbs-a_core--seeds", "Seeds \\(s\\)")]
    assert '<a href="#nbs-a_core--seeds" class="pdf-self">Seeds' in h
    head = book_pdf.page_head(tmp_path, [page])
    assert "/_static/mathjax/tex-mml-chtml.js" in head and "/_static/styles/theme.css" in head
    assert "window.MathJax" in head and "other.js" not in head


# ---------------------------------------------------------------------------------------- check_pdf
def fig(name: str, size: float = 200.0) -> tuple[str, float, float]:
    "A figure's link as the PDF holds it: (URI, width, height) in points"
    return f"https://example.org/_images/{name}", size, size * 0.6


def good() -> tuple[list, check_pdf.Printed]:
    "Three pages of a book and a PDF that prints them right (title, contents, then 2 pages each)"
    want = [check_pdf.Expected("book-intro", None, "Intro"),
            check_pdf.Expected("nbs-01_attention", "Foundations", "1. Attention",
                               figures=["a.svg", "b.png"], math=5, tex_in_code={"\\(": 1}),
            check_pdf.Expected("nbs-a_core", "Appendix", "Appendix A. Setup")]
    texts = ["Title", "Contents\nIntro 3\nFoundations 5\n1. Attention 5\nAppendix 7\n"
             "Appendix A. Setup  7", "Intro\ntext", "more",
             "1. Attention\nwords", "re.compile(r'\\(')", "Appendix A. Setup\n", "end"]
    links = [[], [], [], [], [fig("a.svg")], [fig("b.png"), ("https://x.org", 50, 9)], [], []]
    got = check_pdf.Printed(texts, links=links,
                            math_fonts=[False, False, False, False, True, False, False, False],
                            outline=[(0, "Contents", 1), (0, "Intro", 2), (0, "Foundations", 4),
                                     (1, "1. Attention", 4), (2, "1.1. Scores", 5),
                                     (0, "Appendix", 6), (1, "Appendix A. Setup", 6)])
    return want, got


def failures(want, got) -> list[str]:
    return [w for ok, w in check_pdf.checks(want, got) if not ok]


def test_check_pdf_passes_a_good_pdf():
    assert failures(*good()) == []


@pytest.mark.parametrize("fault, expect", [
    ("missing", "nbs-01_attention: '1. Attention' in the outline"),
    ("swapped", "in the outline after the pages before it"),
    ("raw_tex", "nbs-01_attention: no TeX source left"),
    ("tex_in_contents", "no TeX source in the title page and contents"),
    ("tex_in_outline", "the outline shows no TeX source"),
    ("untypeset", "nbs-01_attention: its 5 equations are typeset"),
    ("no_figures", "nbs-01_attention: its 2 figures are in the PDF"),
    ("tiny_figure", "nbs-01_attention: its 2 figures are in the PDF"),
    ("figure_elsewhere", "nbs-01_attention: its 2 figures are in the PDF"),
    ("short", "page count plausible"),
    ("wrong_title", "nbs-a_core: its first page (7) shows its title"),
    ("wrong_number", "the contents give each page's first page (1 do not: ['1. Attention 5']"),
    ("no_contents", "the outline opens with the contents"),
])
def test_check_pdf_catches(fault, expect):
    want, got = good()
    got = copy.deepcopy(got)
    if fault == "missing":
        got.outline = [o for o in got.outline if o[1] != "1. Attention"]
    elif fault == "swapped":
        got.outline[1], got.outline[6] = got.outline[6], got.outline[1]
    elif fault == "raw_tex":
        got.texts[4] += " \\(x^2\\)"
    elif fault == "tex_in_contents":
        got.texts[1] += " $$"
    elif fault == "tex_in_outline":
        got.outline[4] = (2, "1.1. Scores \\(QK^T\\)", 5)
    elif fault == "untypeset":
        got.math_fonts = [False] * len(got.texts)
    elif fault == "no_figures":
        got.links[4] = []
    elif fault == "tiny_figure":
        got.links[4] = [fig("a.svg", 20.0)]
    elif fault == "figure_elsewhere":
        got.links[4], got.links[7] = [], got.links[4]
    elif fault == "short":
        got.texts, got.links, got.math_fonts = got.texts[:4], got.links[:4], got.math_fonts[:4]
        got.outline = [o for o in got.outline if o[2] < 4]
    elif fault == "wrong_number":
        got.texts[1] = got.texts[1].replace("1. Attention 5", "1. Attention 6")
    elif fault == "no_contents":
        got.outline = got.outline[1:]
    elif fault == "wrong_title":
        got.texts[6] = "Appendix B. Something else"
    found = failures(want, got)
    assert any(expect in f for f in found), found


def test_site_offers_the_pdf(tmp_path):
    "The site's first page must link to the PDF's copy in the site, and the copy must be that PDF"
    root, _ = book_pdf.book_pages()
    page = tmp_path / f"{root.file}.html"
    page.parent.mkdir(parents=True)
    pdf = tmp_path / "out" / "txbook.pdf"
    pdf.parent.mkdir()
    pdf.write_bytes(b"%PDF-1.7 the book")
    link = '<html><body><article><a href="../txbook.pdf">PDF</a></article></body></html>'
    page.write_text(link)
    (tmp_path / "txbook.pdf").write_bytes(pdf.read_bytes())
    assert all(ok for ok, _ in check_pdf.site_offers(tmp_path, pdf))
    (tmp_path / "txbook.pdf").write_bytes(b"%PDF-1.7 an older book")
    assert [ok for ok, _ in check_pdf.site_offers(tmp_path, pdf)] == [True, False]
    page.write_text(link.replace("../txbook.pdf", "txbook.pdf"))   # points at book/txbook.pdf
    assert not check_pdf.site_offers(tmp_path, pdf)[0][0]


def test_ci_and_pages_build_the_pdf():
    "`make pdf` exists, CI and the pages workflow run it after `make book`, the README names it"
    assert re.search(r"^pdf:", (ROOT / "Makefile").read_text(), flags=re.M)
    ci = [c for c in (ROOT / ".ci" / "run").read_text().splitlines() if not c.startswith("#")]
    first = lambda what: min(i for i, c in enumerate(ci) if what in c)
    assert first("make book") < first("make pdf")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    steps = wf["jobs"]["build"]["steps"]
    runs = [s.get("run") for s in steps]
    upload = [i for i, s in enumerate(steps) if "upload-pages" in s.get("uses", "")]
    assert runs.index("make book") < runs.index("make pdf") < upload[0]
    assert "make pdf" in (ROOT / "README.md").read_text()
