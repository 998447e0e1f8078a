"""The book's PDF against the built site (run by `make pdf`, after tools/book_pdf.py).

What the PDF must hold is read from `_toc.yml` and the built site, not from the tool that printed
it; the PDF is read with pypdf. Checks:

- it opens, and its page count is plausible: at least a title page, the contents and one page per
  page of the book, and no more than 60 pages per page of the book;
- its outline opens with the contents, then lists the pages of `_toc.yml` in that order, each with
  its title as the site shows it and its number (chapters 1, 2, ... as the site numbers them;
  appendix pages their letter); the text of each page's first page shows that title, and the
  contents give that page's number;
- no TeX source is left: `$$`, `\\(`, `\\[`, `\\begin{`, `\\end{` occur in a page's text no more
  often than in the code and outputs of that page on the site (where they are Python, not MathJax's
  input), and nowhere in the title page, the contents or the outline;
- equations are typeset: every page whose site page has equations uses MathJax's fonts in the PDF;
- figures are present: every image of a site's page is on that page's pages of the PDF, at least
  half an inch wide and high (tools/book_pdf.py makes each figure a link to its file on the site:
  the link's rectangle is the printed figure; that every image loaded before printing, the tool
  checks itself);
- the site offers it: its first page links to the PDF's copy in the site's root folder, which is
  this PDF.

usage: python tests/check_pdf.py [_build/pdf/txbook.pdf] [--site _build/html]
(prints each failure, then 'N passed, N failed')
"""
from __future__ import annotations

import argparse, posixpath, re, sys, time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from book_pdf import book_pages  # noqa: E402  (_toc.yml's pages; what they show is read here)

TEX = ["$$", "\\(", "\\[", "\\begin{", "\\end{"]
MAX_PER_PAGE = 60
MIN_FIGURE = 36   # points (half an inch): a figure printed smaller than this is not there


@dataclass
class Expected:
    "What the site shows of one page of the book"
    key: str                  # nbs-01_attention
    part: str | None
    heading: str              # `1. Attention`, `Appendix A. Setup: devices, seeds and sizes`
    figures: list = field(default_factory=list)   # file names of the images in its article
    math: int = 0             # typeset equations
    tex_in_code: dict = field(default_factory=dict)   # each TEX pattern's count in code, outputs


@dataclass
class Printed:
    "What the PDF holds"
    texts: list[str]                      # each page's text
    links: list[list[tuple[str, float, float]]]   # each page's links out: (URI, width, height)
    math_fonts: list[bool]                # whether each page uses a MathJax font
    outline: list[tuple[int, str, int]]   # (depth, title, page index) in order


def expected_pages(site: Path, root: Path = ROOT) -> list[Expected]:
    "The pages of `_toc.yml` in order, each with what its built page shows"
    import lxml.html
    first, parts = book_pages(root)
    out = []
    for p in [first] + [q for part in parts for q in part.pages]:
        tree = lxml.html.fromstring((site / f"{p.file}.html").read_bytes())
        art = (tree.xpath("//article[contains(@class, 'bd-article')]")
               or tree.xpath("//article"))[0]
        for el in art.xpath(".//a[contains(@class, 'headerlink')]"
                            " | .//details[contains(@class, 'above-input')]"
                            " | .//details[contains(@class, 'below-input')]"):
            el.drop_tree()                 # folded code is left out of the PDF
        h1 = art.xpath(".//h1")[0]
        num = h1.xpath(".//span[contains(@class, 'section-number')]")
        label = num[0].text_content().strip().rstrip(".") if num else ""
        if num:
            num[0].drop_tree()
        elif p.part and p.part.lower().startswith("appendix"):
            m = re.match(r"([a-z])_", Path(p.file).name)
            label = m.group(1).upper() if m else ""
        title = re.sub(r"\s+", " ", h1.text_content()).strip()
        heading = f"{'Appendix ' if label.isalpha() else ''}{label}. {title}" if label else title
        code = " ".join(e.text_content() for e in art.xpath(".//pre | .//code"))
        figures = [Path(urlsplit(i.get("src", "")).path).name for i in art.xpath(".//img")]
        math = art.xpath(".//*[contains(concat(' ', @class, ' '), ' math ')]")
        out.append(Expected(p.file.replace("/", "-"), p.part, heading, figures, len(math),
                            tex_in_code={t: code.count(t) for t in TEX}))
    return out


def read_pdf(path: Path) -> Printed:
    "Each page's text (PDFium, fast), images and fonts, and the outline (pypdf)"
    import pypdfium2 as pdfium
    from pypdf import PdfReader
    doc = pdfium.PdfDocument(str(path))
    texts = [doc[i].get_textpage().get_text_range() for i in range(len(doc))]
    doc.close()
    r = PdfReader(path)
    links, fonts = [], []
    for page in r.pages:
        res = page.get("/Resources") or {}
        here = []
        for a in page.get("/Annots") or []:
            a = a.get_object()
            uri = (a.get("/A") or {}).get("/URI")
            if a.get("/Subtype") == "/Link" and uri:
                x0, y0, x1, y1 = (float(v) for v in a["/Rect"])
                here.append((str(uri), abs(x1 - x0), abs(y1 - y0)))
        links.append(here)
        names = []
        for f in (res.get("/Font") or {}).values():
            f = f.get_object()
            fd = f.get("/FontDescriptor")
            names += [str(f.get("/BaseFont", "")),
                      str(fd.get_object().get("/FontName", "")) if fd else ""]
        fonts.append(any("MathJax" in n for n in names))
    out = []

    def walk(items, depth):
        for it in items:
            if isinstance(it, list):
                walk(it, depth + 1)
            else:
                out.append((depth, str(it.title), r.get_destination_page_number(it)))
    walk(r.outline, 0)
    return Printed(texts, links, fonts, out)


def _norm(s: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", s.lower())


def checks(want: list[Expected], got: Printed) -> list[tuple[bool, str]]:
    "(passed, what) for every check of the PDF `got` against the site's pages `want`"
    out = []
    n = len(got.texts)
    out.append((len(want) + 2 <= n <= MAX_PER_PAGE * len(want),
                f"page count plausible: {n} pages for {len(want)} pages of the book "
                f"(at least {len(want) + 2}, at most {MAX_PER_PAGE * len(want)})"))
    # the outline: parts at depth 0 hold their pages at depth 1 (the introduction at depth 0)
    top = [(d, t, pg) for d, t, pg in got.outline if d <= 1]
    titles = [t for _, t, _ in top]
    starts, at = {}, 0
    for w in want:
        try:
            at = titles.index(w.heading, at)
        except ValueError:
            out.append((False, f"{w.key}: '{w.heading}' in the outline after the pages before it "
                               f"(outline: {titles[:40]})"))
            continue
        starts[w.key] = top[at][2]
        at += 1
        out.append((True, f"{w.key}: in the outline, in order"))
    tex = [t for _, t, _ in got.outline if any(p in t for p in TEX)]
    out.append((not tex, f"the outline shows no TeX source ({len(tex)} titles do: {tex[:3]})"))
    order = [starts[w.key] for w in want if w.key in starts]
    if order:   # the title page and the contents, before the first page of the book
        front = "\n".join(got.texts[:min(order)])
        left = {t: front.count(t) for t in TEX if t in front}
        out.append((not left, f"no TeX source in the title page and contents "
                              f"(pages 1-{min(order)}: {left})"))
        lines = {re.sub(r"\s+", " ", line).strip() for line in front.splitlines()}
        wrong = [f"{w.heading} {starts[w.key] + 1}" for w in want if w.key in starts
                 and f"{w.heading} {starts[w.key] + 1}" not in lines]
        out.append((not wrong, f"the contents give each page's first page ({len(wrong)} do not: "
                               f"{wrong[:3]})"))
        out.append((bool(got.outline) and got.outline[0][1] == "Contents"
                    and got.outline[0][2] < min(order), "the outline opens with the contents"))
    out.append((order == sorted(order) and len(set(order)) == len(order),
                f"the pages start on increasing pages of the PDF ({order})"))
    # each page's span of the PDF: from its first page to the next page's first page
    spans = {}
    keys = [w.key for w in want if w.key in starts]
    for i, k in enumerate(keys):
        end = starts[keys[i + 1]] if i + 1 < len(keys) else n
        spans[k] = range(starts[k], max(end, starts[k] + 1))
    for w in want:
        if w.key not in spans:
            continue
        pages = spans[w.key]
        first = got.texts[pages.start]
        out.append((_norm(w.heading)[:60] in _norm(first),
                    f"{w.key}: its first page ({pages.start + 1}) shows its title '{w.heading}' "
                    f"(text: {first[:80]!r})"))
        text = "\n".join(got.texts[i] for i in pages)
        left = {t: text.count(t) for t in TEX if text.count(t) > w.tex_in_code.get(t, 0)}
        out.append((not left, f"{w.key}: no TeX source left in the text (pages "
                              f"{pages.start + 1}-{pages.stop}; more than its code shows: {left})"))
        if w.math:
            out.append((any(got.math_fonts[i] for i in pages),
                        f"{w.key}: its {w.math} equations are typeset (MathJax's fonts used)"))
        placed = {Path(urlsplit(u).path).name for i in pages for u, wd, ht in got.links[i]
                  if wd >= MIN_FIGURE and ht >= MIN_FIGURE}
        missing = [f for f in w.figures if f not in placed]
        out.append((not missing, f"{w.key}: its {len(w.figures)} figures are in the PDF, each on "
                                 f"its pages {pages.start + 1}-{pages.stop} at least {MIN_FIGURE} "
                                 f"pt wide and high ({len(missing)} are not: {missing[:3]})"))
    return out


def site_offers(site: Path, pdf: Path, root: Path = ROOT) -> list[tuple[bool, str]]:
    "The site's first page links to the PDF in the site's root folder, which is the PDF checked"
    import lxml.html
    first, _ = book_pages(root)
    page = f"/{first.file}.html"
    tree = lxml.html.fromstring((site / f"{first.file}.html").read_bytes())
    hrefs = [posixpath.normpath(urljoin(page, a.get("href")))
             for a in tree.xpath("//article//a[@href]") if not urlsplit(a.get("href")).scheme]
    copy = site / pdf.name
    return [(f"/{pdf.name}" in hrefs, f"{first.file}.html links to /{pdf.name} (the site's PDF)"),
            (copy.is_file() and copy.read_bytes() == pdf.read_bytes(),
             f"{copy} is the PDF checked here ({pdf})")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pdf", nargs="?", default=str(ROOT / "_build" / "pdf" / "txbook.pdf"))
    ap.add_argument("--site", default=str(ROOT / "_build" / "html"))
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    site, pdf = Path(a.site), Path(a.pdf)
    results = checks(expected_pages(site), read_pdf(pdf)) + site_offers(site, pdf)
    failed = [w for ok, w in results if not ok]
    for f in failed:
        print("FAILED:", f)
    print(f"PDF check of {a.pdf} in {time.monotonic() - t0:.1f} s")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
