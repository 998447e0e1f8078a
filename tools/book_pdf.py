"""The whole book as one PDF, printed offline from the executed site (`make pdf`, after make book).

    python tools/book_pdf.py [_build/html] [-o _build/pdf/txbook.pdf]

The pages come from `_toc.yml`, in its order: the introduction, then each part (its caption on a
page of its own when it holds more than one page) with its pages. Each page's article (the executed
chapter exactly as the site shows it) is taken from the built HTML and put into one document after a
title page and a table of contents, with the site's own style sheets and its shipped MathJax.
Headless Chromium (Debian's, driven by Playwright, no host but 127.0.0.1 reachable:
`tools/chromium.py`) loads that document from the site's server, typesets the equations, and prints
it. One document, so page numbers run on, links between chapters stay inside the PDF, and MathJax
starts once. The first print tells on which page each chapter starts (the contents' links become the
PDF's named destinations); the title page and the contents are then printed again with those numbers
and replace the first ones. pypdf writes the outline: the parts, their pages, and each page's
sections. Chapters keep the site's numbers (1-19); the appendix pages get their file name's letter
(A, B, ...).

What a screen shows and a page cannot hold is changed for print (`PRINT_CSS`): code and outputs wrap
instead of scrolling sideways, folded code stays out (its output stays), folds are opened, and the
page's header, sidebars and buttons are not part of the article. Before printing, the document is
laid out for print in a window as wide as the printed column, and any code block, table, image or
equation still wider than the column fails the build, naming its page. tests/check_pdf.py checks the
result against the site.
"""
from __future__ import annotations

import argparse, html, io, json, posixpath, re, sys, time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from chromium import offline_chromium  # noqa: E402

# Where the document is served, at a page's depth (it is never written into the site)
DOC = "nbs/__txbook_book__.html"
PAGE_TIMEOUT = 300   # seconds to load and typeset the whole book (a busy 2-core machine is slow)
WIDTH_MM, MARGIN_MM = 210, (16, 14, 18, 14)   # A4's width; top, right, bottom, left margins
COLUMN_PX = round((WIDTH_MM - MARGIN_MM[1] - MARGIN_MM[3]) / 25.4 * 96)   # printed column, CSS px


@dataclass
class Page:
    "One page of the book, as `_toc.yml` lists it"
    file: str                 # `nbs/01_attention`
    part: str | None          # the caption of its part (None: the root page)
    numbered: bool            # in a numbered part
    title: str = ""           # the page's own title (its h1, without a number)
    label: str = ""           # `1`..`19`, `A`..: its number in the book; '' for unnumbered pages
    html: str = ""            # its article, ready for the document
    title_html: str = ""      # its heading as HTML (equations left to MathJax)
    sections: list = field(default_factory=list)   # (level, id, title) of its h2 and h3

    @property
    def key(self) -> str:
        return self.file.replace("/", "-")

    @property
    def heading(self) -> str:
        "The title as the book prints it: `3. The transformer block`, `Appendix A. Setup: ...`"
        if not self.label:
            return self.title
        return f"{'Appendix ' if self.label.isalpha() else ''}{self.label}. {self.title}"


@dataclass
class Part:
    caption: str
    pages: list[Page] = field(default_factory=list)

    @property
    def key(self) -> str:
        return "part-" + re.sub(r"[^a-z0-9]+", "-", self.caption.lower()).strip("-")


def book_pages(root: Path = ROOT) -> tuple[Page, list[Part]]:
    "The root page and the parts of `_toc.yml` (a jb-book), in reading order"
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    if toc.get("format") != "jb-book":
        raise ValueError(f"_toc.yml: format {toc.get('format')!r}, expected jb-book")
    parts = []
    for p in toc.get("parts", []):
        part = Part(p["caption"])
        for c in p.get("chapters", []):
            if "file" not in c or "sections" in c:
                raise ValueError(f"_toc.yml: {c} is not a page (the PDF knows no sections)")
            file = str(Path(c["file"]).with_suffix(""))
            part.pages.append(Page(file, part.caption, bool(p.get("numbered"))))
        parts.append(part)
    return Page(str(Path(toc["root"]).with_suffix("")), None, False), parts


# ------------------------------------------------------------------------------------- the document
def _has_class(cls: str) -> str:
    return f'contains(concat(" ", normalize-space(@class), " "), " {cls} ")'


def _drop(el):
    "Remove an element, keeping the text that follows it"
    parent = el.getparent()
    if el.tail:
        prev = el.getprevious()
        if prev is not None:
            prev.tail = (prev.tail or "") + el.tail
        else:
            parent.text = (parent.text or "") + el.tail
    parent.remove(el)


def _text(el) -> str:
    return re.sub(r"\s+", " ", el.text_content()).strip()


def parse(site: Path, page: Page):
    "The built page's tree and its article (lxml)"
    import lxml.html
    tree = lxml.html.fromstring((site / f"{page.file}.html").read_bytes())
    found = tree.xpath(f"//article[{_has_class('bd-article')}]") or tree.xpath("//article")
    if not found:
        raise ValueError(f"{page.file}.html: no <article> in the built page")
    return tree, found[0]


def page_label(page: Page, h1) -> str:
    "The page's number as the site's title shows it (chapters), or its file's letter (appendix)"
    num = h1.xpath(f".//span[{_has_class('section-number')}]")
    if num:
        return _text(num[0]).rstrip(".")
    if page.part and not page.numbered and page.part.lower().startswith("appendix") \
            and (m := re.match(r"([a-z])_", Path(page.file).name)):
        return m.group(1).upper()
    return ""


def read_article(site: Path, page: Page, keys: dict[str, str], baseurl: str) -> list:
    """Fill in `page.title`, `.label`, `.html` and `.title_html` from the built page: its article,
    every id prefixed by the page's key, links to pages of the book made links inside the document,
    links to other pages of the site links to the published site, resources paths from the site's
    root, each figure a link to its file on the site. Returns its sections: (level, id, title) of
    each h2 and h3, in order (each heading links to its section, so that the PDF has a named
    destination there for the outline)."""
    import lxml.html
    _, article = parse(site, page)
    # the site's furniture, what only the site needs (`pdf-skip`: the link to this PDF), and folded
    # code (the site hides it behind a click; the PDF leaves it out, its output stays)
    folded = f"{_has_class('above-input')} or {_has_class('below-input')}"
    furniture = f".//a[{_has_class('headerlink')}] | .//script | .//noscript | .//button"
    for el in article.xpath(f"{furniture} | .//*[{_has_class('pdf-skip')}] | .//details[{folded}]"):
        _drop(el)
    h1s = article.xpath(".//h1")
    if not h1s:
        raise ValueError(f"{page.file}.html: no title (h1)")
    h1 = h1s[0]
    page.label = page_label(page, h1)
    for num in h1.xpath(f".//span[{_has_class('section-number')}]"):
        _drop(num)
    page.title = _text(h1)
    if page.label:
        h1.text = page.heading.removesuffix(page.title) + (h1.text or "")
    for el in article.xpath(".//details"):
        el.set("open", "")             # other folds: a page cannot be clicked
    for el in article.xpath(".//*[@id]"):
        el.set("id", f"{page.key}--{el.get('id')}")
    here = "/" + page.file + ".html"
    for el in article.xpath(".//*[@href]"):
        el.set("href", _link(el.get("href"), here, keys, baseurl))
    for el in article.xpath(".//*[@src]"):
        if not urlsplit(el.get("src")).scheme:
            el.set("src", urljoin(here, el.get("src")))
    for el in article.xpath(".//img"):
        el.set("loading", "eager")
        if not el.xpath("ancestor::a"):   # a link to its file (how tests/check_pdf.py finds it)
            href = urljoin(baseurl, el.get("src").lstrip("/"))
            link = lxml.html.Element("a", {"class": "pdf-figure", "href": href})
            el.addprevious(link)
            link.append(el)               # moves the image, and its tail text, into the link
            link.tail, el.tail = el.tail, None
    _self_link(h1, page.key)
    page.title_html = _inner_html(h1.xpath("a")[0])
    sections = []
    for h in article.xpath(".//h2 | .//h3"):
        sec = h.getparent()
        if sec is None or sec.tag != "section" or not sec.get("id"):
            continue
        _self_link(h, sec.get("id"))
        sections.append((int(h.tag[1]), sec.get("id"), _text(h)))
    article.tag = "section"
    article.attrib.clear()
    article.set("class", "pdf-page")
    article.set("id", page.key)
    page.html = lxml.html.tostring(article, encoding="unicode")
    return sections


def _self_link(h, target: str):
    "Put the heading's content in a link to `target` (the PDF then has a named destination there)"
    import lxml.html
    link = lxml.html.Element("a", {"href": "#" + target, "class": "pdf-self"})
    link.text, h.text = h.text, None
    for c in list(h):
        link.append(c)
    h.append(link)


def _inner_html(el) -> str:
    import lxml.html
    return html.escape(el.text or "") + "".join(lxml.html.tostring(c, encoding="unicode")
                                                for c in el)


def _link(href: str, here: str, keys: dict[str, str], baseurl: str) -> str:
    "Where a link of the page at `here` (a path from the site's root) points in the document"
    parts = urlsplit(href)
    if parts.scheme or href.startswith("//"):
        return href
    if not parts.path:                                  # `#anchor` on the same page
        return f"#{keys[here]}--{parts.fragment}" if parts.fragment else href
    target = posixpath.normpath(urljoin(here, parts.path))
    if target in keys:                                  # another page of the book
        return f"#{keys[target]}--{parts.fragment}" if parts.fragment else f"#{keys[target]}"
    return urljoin(baseurl, target.lstrip("/")) + (f"#{parts.fragment}" if parts.fragment else "")


def page_head(site: Path, pages: list[Page]) -> str:
    "The style sheets and MathJax (configuration, shipped script) of the first page that loads it"
    import lxml.html
    for page in pages:
        tree, _ = parse(site, page)
        here = f"/{page.file}.html"
        out, mathjax = [], False
        for el in tree.xpath("//head/link[@rel='stylesheet'] | //head/script | //head/style"):
            if el.tag == "link":
                el.set("href", urljoin(here, el.get("href")))
            elif el.tag == "script":
                if "mathjax" in (el.get("src") or "").lower():
                    el.set("src", urljoin(here, el.get("src")))
                    mathjax = True
                elif "MathJax" not in (el.text or ""):
                    continue
            out.append(lxml.html.tostring(el, encoding="unicode"))
        if mathjax:
            return "\n".join(out)
    raise ValueError("no page of the book loads MathJax")


# Print rules: A4, wrapped code, no screen furniture; the site's colours in light mode.
PRINT_CSS = r"""
@page { size: A4; margin: %s; }
html { font-size: 10pt; }
body { margin: 0; background: white; }
.pdf-page, .pdf-part, .pdf-contents { break-before: page; }
.pdf-page h1 { font-size: 2rem; margin-top: 0; }
a.pdf-self { color: inherit; }
h1, h2, h3, h4 { break-after: avoid; }
/* the theme's print rules: no indent of the article; code and boxes may run on to the next page */
.bd-main .bd-content { margin-left: 0 !important; }
div.highlight, div.literal-block-wrapper, .admonition { break-inside: auto !important; }
img, svg, figure { max-width: 100% !important; height: auto; break-inside: avoid; }
pre, pre code, .highlight pre, div.cell_output pre, .output pre {
  white-space: pre-wrap !important; overflow-wrap: anywhere; word-break: normal;
  overflow: visible !important; max-width: 100%; }
div.highlight, div.cell_output, .output, div.cell, .table-wrapper, .pst-scrollable-table-container {
  overflow: visible !important; max-width: 100%; }
div.cell div.highlight pre { font-size: 0.78em; }
table { font-size: 0.85em; max-width: 100%; }
table td, table th { overflow-wrap: break-word; }
a { color: inherit; text-decoration: none; }
mjx-container[display="true"] { overflow: visible !important; }
.pdf-cover { height: 250mm; display: flex; flex-direction: column; justify-content: center; }
.pdf-cover h1 { font-size: 2.6rem; line-height: 1.2; }
.pdf-cover .sub { font-size: 1.2rem; margin-top: 1rem; }
.pdf-cover .meta { margin-top: 4rem; color: #555; }
.pdf-part { height: 250mm; display: flex; flex-direction: column; justify-content: center; }
.pdf-part h1 { font-size: 2.4rem; text-align: center; }
.pdf-contents h1 { font-size: 2rem; }
.pdf-contents ol { list-style: none; padding: 0; margin: 0; }
.pdf-contents li { display: flex; gap: 0.4rem; margin: 0.15rem 0; }
.pdf-contents li.part { font-weight: bold; margin-top: 0.7rem; }
.pdf-contents li .fill { flex: 1; border-bottom: 1px dotted #999; margin-bottom: 0.3rem; }
.pdf-contents li .no { min-width: 2.5rem; text-align: right; font-variant-numeric: tabular-nums; }
""".replace("%s", " ".join(f"{m}mm" for m in MARGIN_MM))


def document(site: Path, root: Page, parts: list[Part]) -> tuple[str, str]:
    "The head (style sheets, MathJax) and the body of the book as one document; fills in the pages"
    pages = [root] + [p for part in parts for p in part.pages]
    keys = {f"/{p.file}.html": p.key for p in pages}
    baseurl = book_info()["baseurl"]
    for p in pages:
        if not (site / f"{p.file}.html").is_file():
            raise FileNotFoundError(f"{p.file}.html is not in {site}: build the book first")
        p.sections = read_article(site, p, keys, baseurl)
    body = [root.html]
    for part in parts:
        if len(part.pages) > 1:
            body.append(f'<section class="pdf-part" id="{part.key}"><h1><a class="pdf-self" '
                        f'href="#{part.key}">{html.escape(part.caption)}</a></h1></section>')
        body += [p.html for p in part.pages]
    return page_head(site, pages[1:] + pages[:1]), "".join(body)


def front_matter(root: Page, parts: list[Part], info: dict, numbers: dict | None = None) -> str:
    "The title page and the contents, with each entry's page from `numbers` (`?` while unknown)"
    def entry(key: str, text: str, cls: str = "") -> str:
        no = numbers.get(key, "?") if numbers else "?"
        return (f'<li class="{cls}"><a href="#{key}">{text}</a><span class="fill"></span>'
                f'<span class="no">{no}</span></li>')

    toc = [entry(root.key, root.title_html)]
    for part in parts:
        first = part.key if len(part.pages) > 1 else part.pages[0].key
        toc.append(entry(first, html.escape(part.caption), "part"))
        toc += [entry(p.key, p.title_html) for p in part.pages]
    baseurl = html.escape(info["baseurl"])
    return (f'<section class="pdf-cover" id="cover"><h1>{html.escape(info["title"])}</h1>'
            f'<div class="sub">{html.escape(info["subtitle"])}</div>'
            f'<div class="meta">{html.escape(info["author"])}<br>{html.escape(info["edition"])}<br>'
            f'<a href="{baseurl}">{baseurl}</a></div></section>'
            f'<section class="pdf-contents" id="contents"><h1><a class="pdf-self" href="#contents">'
            f'Contents</a></h1><ol>{"".join(toc)}</ol></section>')


def wrap(head: str, body: str, title: str) -> str:
    "A whole HTML document: the site's head, the print rules, the body in the theme's containers"
    return (f'<!DOCTYPE html>\n<html lang="en" data-theme="light" data-mode="light"><head>'
            f'<meta charset="utf-8"><title>{html.escape(title)}</title>\n{head}\n'
            f'<style>{PRINT_CSS}</style></head>\n<body><main class="bd-main">'
            f'<div class="bd-content"><div class="bd-article-container">{body}</div></div></main>'
            f'</body></html>')


def book_info(root: Path = ROOT) -> dict:
    "Title, subtitle, author, edition (version and commit) and the published site's address"
    import subprocess
    cfg = yaml.safe_load((root / "_config.yml").read_text())
    title, _, sub = cfg["title"].partition(":")
    init = (root / "txbook" / "__init__.py").read_text()
    version = re.search(r'__version__\s*=\s*"([^"]+)"', init).group(1)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"title": title.strip(), "subtitle": sub.strip().capitalize() if sub else "",
            "author": cfg.get("author", ""), "edition": f"txbook {version}, commit {commit}",
            "full_title": cfg["title"], "baseurl": cfg.get("html", {}).get("baseurl", "/")}


# ---------------------------------------------------------------------------------------- printing
# Waits for MathJax's typesetting, every image and the fonts; counts the equations (and MathJax's
# errors: TeX it could not typeset) and the images, and names those that did not load.
READY = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const imgs = [...document.images];
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(ok => {
    i.addEventListener('load', ok); i.addEventListener('error', ok); setTimeout(ok, 60000); })));
  await document.fonts.ready;
  return {
    math: document.querySelectorAll('.math').length,
    mjx: document.querySelectorAll('mjx-container').length,
    texErrors: [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 80)),
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
  };
})()
"""
# Laid out for print: what is still wider than the column (code, outputs, tables, images, equations)
WIDE = r"""
(() => {
  const out = [];
  const wide = ['pre', 'table', 'img', 'mjx-container[display="true"]'].map(s => '.pdf-page ' + s);
  for (const el of document.querySelectorAll(wide.join(', '))) {
    const sec = el.closest('.pdf-page');
    const col = sec.getBoundingClientRect();
    const r = el.getBoundingClientRect();
    if (r.right > col.right + 2 || el.scrollWidth > el.clientWidth + 2)
      out.push(`${sec.id}: ${el.tagName.toLowerCase()} ${Math.round(r.width)} px in a `
               + `${Math.round(col.width)} px column: ${el.textContent.trim().slice(0, 60)}`);
  }
  return out;
})()
"""

# The text of each heading that links to itself (the outline's entries), equations as MathML's text
TITLES = r"""
(() => Object.fromEntries([...document.querySelectorAll('a.pdf-self')].map(a => {
  const c = a.cloneNode(true);
  c.querySelectorAll('mjx-container').forEach(m => {
    const mml = m.querySelector('mjx-assistive-mml');
    m.replaceWith(document.createTextNode(mml ? mml.textContent : m.textContent));
  });
  return [a.getAttribute('href').slice(1), c.textContent.replace(/\s+/g, ' ').trim()];
})))()
"""

FOOTER = ('<div style="font-size:8px; width:100%; text-align:center; color:#666;">'
          '<span class="pageNumber"></span></div>')


def print_pdf(tab) -> bytes:
    "The loaded document printed on A4 (PRINT_CSS's size), the page number at the foot of each page"
    return tab.pdf(format="A4", print_background=True, display_header_footer=True,
                   header_template="<span></span>", footer_template=FOOTER,
                   prefer_css_page_size=True)


def destinations(reader) -> dict[str, int]:
    "Named destination (an id a link of the document targets) -> its page index (from 0)"
    return {str(name).lstrip("/"): reader.get_destination_page_number(d)
            for name, d in reader.named_destinations.items()}


def assemble(pdf: bytes, front: bytes, titles: dict, root: Page, parts: list, info: dict) -> bytes:
    """The book: `pdf` with its first pages (title page, contents with `?`) replaced by `front` (the
    same pages with the page numbers; the links of the contents kept), an outline (the parts, their
    pages, each page's sections, named by `titles`: id -> text) and the book's metadata"""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject
    reader = PdfReader(io.BytesIO(pdf))
    dests = destinations(reader)
    numbered = PdfReader(io.BytesIO(front))
    n = dests[root.key]
    if len(numbered.pages) != n:
        raise RuntimeError(f"the numbered contents take {len(numbered.pages)} pages, not {n}")
    writer = PdfWriter(clone_from=reader)
    for i in range(n):
        links = writer.pages[i].get("/Annots")
        writer.insert_page(numbered.pages[i], index=i)
        if links is not None:
            writer.pages[i][NameObject("/Annots")] = links
        writer.remove_page(i + 1)

    def add(title: str, key: str, parent=None):
        "An outline entry, named as the document shows `title` (equations as text), at `key`'s page"
        if key not in dests:
            return parent
        return writer.add_outline_item(title=titles.get(key, title), page_number=dests[key],
                                       parent=parent)

    def add_page(p: Page, parent=None):
        item = add(p.heading, p.key, parent)
        under = {2: item}
        for level, key, title in p.sections:
            under[level + 1] = add(title, key, under.get(level, item))
        return item

    add("Contents", "contents")
    add_page(root)
    for part in parts:
        first = dests.get(part.key, dests[part.pages[0].key])
        item = writer.add_outline_item(title=part.caption, page_number=first)
        for p in part.pages:
            add_page(p, item)
    writer.add_metadata({"/Title": info["full_title"], "/Author": info["author"],
                         "/Subject": info["edition"], "/Creator": "txbook: tools/book_pdf.py"})
    writer.page_mode = "/UseOutlines"
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def build(site: Path, out: Path) -> dict:
    "Print the book from `site` into `out`; returns what it did (pages, timings), saved beside it"
    laps, t = {}, time.monotonic()

    def lap(what: str):
        nonlocal t
        laps[what] = round(time.monotonic() - t, 1)
        t = time.monotonic()

    root, parts = book_pages()
    info = book_info()
    head, body = document(site, root, parts)
    doc = wrap(head, front_matter(root, parts, info) + body, info["full_title"])
    lap("document")
    # a window as wide as the printed column: what print cannot fit is found before printing
    with offline_chromium(site, width=COLUMN_PX, height=1000) as (context, base):
        served = {base + DOC: doc}
        context.route(base + DOC, lambda route: route.fulfill(
            status=200, body=served[route.request.url], content_type="text/html; charset=utf-8"))
        tab = context.new_page()
        tab.set_default_timeout(PAGE_TIMEOUT * 1000)
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(f"exception: {e.message}"))
        tab.on("console", lambda m: m.type == "error" and errors.append(f"console.error: {m.text}"))
        tab.goto(base + DOC, wait_until="load")
        ready = tab.evaluate(READY)
        if ready["broken"] or ready["mjx"] < ready["math"] or ready["texErrors"] or errors:
            raise RuntimeError(f"the book did not render: {ready['mjx']} of {ready['math']} "
                               f"equations typeset, TeX errors {ready['texErrors'][:5]}, broken "
                               f"images {ready['broken'][:5]}, errors {errors[:5]}")
        tab.emulate_media(media="print")
        wide = tab.evaluate(WIDE)
        if wide:
            raise RuntimeError(f"{len(wide)} blocks wider than the printed column:\n  "
                               + "\n  ".join(wide[:20]))
        titles = tab.evaluate(TITLES)
        lap("load and typeset")
        pdf = print_pdf(tab)
        lap("print")
        from pypdf import PdfReader
        reader = PdfReader(io.BytesIO(pdf))
        dests = destinations(reader)
        numbers = {k: v + 1 for k, v in dests.items()}
        front = front_matter(root, parts, info, numbers)
        served[base + DOC] = wrap(head, front, info["full_title"])
        tab.goto(base + DOC, wait_until="load")
        tab.evaluate(READY)
        if errors:
            raise RuntimeError(f"the contents did not render: {errors[:5]}")
        front = print_pdf(tab)
        lap("contents")
    book = assemble(pdf, front, titles, root, parts, info)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(book)
    lap("outline")
    pages = [root] + [q for part in parts for q in part.pages]
    stats = {"pages": len(reader.pages), "bytes": len(book), "equations": ready["mjx"],
             "images": ready["images"], "starts": {p.key: numbers.get(p.key) for p in pages},
             "seconds": laps}
    stats["seconds"]["total"] = round(sum(laps.values()), 1)
    out.with_suffix(".json").write_text(json.dumps(stats, indent=1) + "\n")
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    ap.add_argument("-o", "--out", default=str(ROOT / "_build" / "pdf" / "txbook.pdf"))
    a = ap.parse_args(argv)
    stats = build(Path(a.site), Path(a.out))
    print(f"book_pdf: {a.out}: {stats['pages']} pages, {stats['bytes'] / 1e6:.1f} MB, "
          f"{stats['equations']} equations, {stats['images']} images; "
          + ", ".join(f"{k} {v} s" for k, v in stats["seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
