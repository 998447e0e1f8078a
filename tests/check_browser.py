"""The built site in a real browser (run after `jupyter-book build` and tests/check_site.py).

Headless Chromium (Debian's `chromium` package; installed with apt-get when missing and running as
root) loads the landing page, every page of `_toc.yml` and the search page from an HTTP server on
127.0.0.1, with every other host unreachable (so the check also proves the site works offline), and
checks on each page:

- equations are typeset: every `.math` element holds MathJax's output (`mjx-container`), and no raw
  `\\(`, `\\[` or `\\begin{` is left in the text outside code;
- every image loads (`naturalWidth > 0`);
- no code block scrolls sideways in a 1440 px wide window (lines of at most 100 characters fit);
- a chapter's "open in Colab" links point at that chapter's notebook in the repository (a tracked
  file);
- the console shows no error, no exception is thrown, no request fails, and nothing is requested
  from any host but 127.0.0.1;
- the search page finds "attention", the attention chapter among the results.

It saves screenshots of two chapters (first displayed equation in view) under `_build/browser/`.
Chromium is driven by Playwright (`tools/chromium.py`: the system binary, no browser download; every
request to a host other than 127.0.0.1 is aborted).

usage: python tests/check_browser.py [_build/html]   (one line per page, then 'N passed, N failed')
"""
from __future__ import annotations

import subprocess, sys, time
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from chromium import offline_chromium  # noqa: E402

SCREENSHOTS = ["nbs/01_attention.html", "nbs/02_mhsa.html"]  # two chapters with displayed equations
PAGE_TIMEOUT = 90  # seconds for one page to load and typeset (the 2-core CI machine may be busy)
# a laptop screen: both sidebars shown, code cells hold 100 characters (txbook.css)
WIDTH, HEIGHT = 1440, 900


# ---------------------------------------------------------------------------------- what is checked
# Waits for MathJax's first typeset and for every image, then reports what the page shows.
INSPECT = r"""
(async () => {
  const mathEls = [...document.querySelectorAll('.math')];
  let mathjax = 'absent';
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
    mathjax = 'typeset';
  }
  const imgs = [...document.images];
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(ok => {
    i.addEventListener('load', ok); i.addEventListener('error', ok); setTimeout(ok, 20000); })));
  // the text a reader sees, code blocks left out: no TeX may be left raw there
  const clone = document.body.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, mjx-assistive-mml')
       .forEach(e => e.remove());
  const text = clone.textContent;
  const raw = [];
  for (const pat of ['\\(', '\\[', '\\begin{']) {
    let at = text.indexOf(pat);
    if (at >= 0) raw.push(text.slice(Math.max(0, at - 30), at + 50).replace(/\s+/g, ' '));
  }
  // code (not outputs) that does not fit its column and scrolls sideways: its longest line
  const wide = [...document.querySelectorAll('article div.highlight pre')]
    .filter(p => !p.closest('.cell_output') && p.scrollWidth > p.clientWidth + 1)
    .map(p => p.textContent.split('\n').reduce((a, b) => b.length > a.length ? b : a, ''))
    .map(l => `${l.length} chars: ${l.trim().slice(0, 50)}`);
  return {
    wide: wide,
    mathjax: mathjax,
    math: mathEls.length,
    untypeset: mathEls.filter(e => !e.querySelector('mjx-container'))
                      .map(e => e.textContent.slice(0, 60)),
    mjx: document.querySelectorAll('mjx-container').length,
    raw: raw,
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    colab: [...document.querySelectorAll('a[href*="colab.research.google.com"]')].map(a => a.href),
    title: document.title,
  };
})()
"""

SEARCH = r"""
(async () => {
  for (let t = 0; t < 600; t++) {   // Sphinx's search fills the list from searchindex.js
    const hits = [...document.querySelectorAll('#search-results li a, ul.search li a')];
    const done = document.querySelector('#search-results p, .search-summary');
    if (hits.length && done && done.textContent.trim())
      return hits.map(a => a.getAttribute('href'));
    await new Promise(ok => setTimeout(ok, 100));
  }
  return [...document.querySelectorAll('#search-results li a, ul.search li a')]
    .map(a => a.getAttribute('href'));
})()
"""


class Events:
    "What a page reports while it loads (Playwright's events) as tuples; `clear()` between pages"

    def __init__(self, page):
        self.seen: list[tuple] = []
        page.on("request", lambda r: self.seen.append(("request", r.url)))
        page.on("requestfailed", lambda r: self.seen.append(("failed", r.url, r.failure or "")))
        page.on("response", lambda r: r.status >= 400
                and self.seen.append(("http", r.status, r.url)))
        page.on("pageerror", lambda e: self.seen.append(
            ("exception", e.stack or f"{e.name}: {e.message}")))
        page.on("console", lambda m: m.type in ("error", "assert") and self.seen.append(
            ("console", m.type, m.text, m.location.get("url", ""))))

    def clear(self):
        self.seen = []


def problems_in_events(events: list[tuple], base: str) -> list[str]:
    "Console errors, exceptions, failed requests and requests to other hosts among a page's events"
    out = []
    host = urlsplit(base).netloc
    for kind, *p in events:
        if kind == "request":
            url = p[0]
            parts = urlsplit(url)
            if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != host:
                out.append(f"requests another host: {url}")
        elif kind == "failed" and p[1] != "net::ERR_ABORTED":   # not one the page itself cancelled
            out.append(f"request failed ({p[1]}): {p[0]}")
        elif kind == "http":
            out.append(f"HTTP {p[0]}: {p[1]}")
        elif kind == "exception":
            out.append(f"exception: {p[0]}"[:300])
        elif kind == "console":
            out.append(f"console.{p[0]}: {p[1]} {p[2]}".rstrip()[:300])
    return list(dict.fromkeys(out))


def toc_pages(root: Path) -> list[str]:
    "The site's page paths (`book/intro.html`, `nbs/01_attention.html`, ...) in `_toc.yml` order"
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                pages.append(node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk({k: v for k, v in toc.items() if k != "root"})
    return [str(Path(p).with_suffix("")) + ".html" for p in dict.fromkeys(pages)]


def tracked_files(root: Path) -> set[str] | None:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                             check=True).stdout
        return set(out.splitlines())
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout: fall back to the file's existence


def goto(tab, url: str, timeout: float = PAGE_TIMEOUT) -> str:
    "Load `url`, follow a redirect page (meta refresh or script) to its end; returns the final URL"
    tab.goto(url, wait_until="load", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # a redirect page (the landing index.html) goes on elsewhere
        try:
            href, state, refresh = tab.evaluate(
                "[location.href, document.readyState,"
                " !!document.querySelector('meta[http-equiv=refresh i]')]")
            if state == "complete" and not refresh:
                return href
        except Exception:
            pass  # the page's context went away during the redirect
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not finish loading in {timeout} s")


def evaluate(tab, expression: str, timeout: float = PAGE_TIMEOUT):
    "The value of a JavaScript expression in the page (a promise awaited); an error after `timeout`"
    return tab.evaluate(f"Promise.race([{expression.strip()}, new Promise((_, no) => setTimeout("
                        f"() => no(new Error('no answer in {timeout} s')), {timeout * 1000}))])")


class Checks:
    "Passed checks counted, failed ones kept with what they say"

    def __init__(self):
        self.passed, self.failed = 0, []

    def __call__(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
        return ok


def colab_link(page: str) -> tuple[str, str]:
    "The notebook of a chapter's page (its path in the repository) and the Colab link that opens it"
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    repo = cfg["url"].rstrip("/").removeprefix("https://github.com/")
    book_path = (cfg.get("path_to_book") or "").strip("/")
    nb = f"{book_path + '/' if book_path else ''}{page.removesuffix('.html')}.ipynb"
    branch = cfg.get("branch", "main")
    return nb, f"https://colab.research.google.com/github/{repo}/blob/{branch}/{nb}"


def check_page(check: Checks, tab, events: Events, site: Path, base: str, page: str,
               tracked: set[str] | None, shots: Path):
    "Every check of one page of the site (see the module's docstring)"
    t = time.monotonic()
    if not check((site / page).exists(), f"{page}: exists in the built site"):
        return
    try:
        events.clear()
        landed = goto(tab, base + page)
        info = evaluate(tab, INSPECT)
    except Exception as e:  # a page that does not load or hangs fails that page, not the check
        check(False, f"{page}: loads ({type(e).__name__}: {e})")
        return
    errors = problems_in_events(events.seen, base)
    check(not errors, f"{page}: no console error or failed request: " + "; ".join(errors[:8]))
    if info["math"] or info["raw"]:
        check(info["mathjax"] == "typeset", f"{page}: MathJax loaded ({info['mathjax']})")
        check(not info["untypeset"] and info["mjx"] >= info["math"],
              f"{page}: all {info['math']} equations typeset ({info['mjx']} MathJax outputs; "
              f"not typeset: {info['untypeset'][:3]})")
        check(not info["raw"], f"{page}: no raw TeX in the text: {info['raw']}")
    check(not info["wide"], f"{page}: no code block scrolls sideways at {WIDTH} px "
                            f"({len(info['wide'])} do: {info['wide'][:3]})")
    check(not info["broken"], f"{page}: every image loads ({len(info['broken'])} of "
                              f"{info['images']} broken: {info['broken'][:5]})")
    if page.startswith("nbs/"):
        nb, want = colab_link(page)
        present = (nb in tracked) if tracked is not None else (ROOT / nb).exists()
        check(bool(info["colab"]) and all(h == want for h in info["colab"]) and present,
              f"{page}: Colab link points at {nb} in the repository (found {info['colab'][:2]}, "
              f"tracked: {present})")
    if page in SCREENSHOTS:
        tab.evaluate("(() => { const m = document.querySelector('mjx-container[display=\"true\"]')"
                     " || document.querySelector('mjx-container');"
                     " if (m) m.scrollIntoView({block: 'center'}); })()")
        time.sleep(0.5)
        out = shots / (Path(page).stem + ".png")
        png = tab.screenshot(path=out)
        check(len(png) > 10_000, f"{page}: screenshot {out.relative_to(ROOT)} ({len(png)} bytes)")
    if landed != base + page:
        check(landed.startswith(base) and Path(site / urlsplit(landed).path[1:]).is_file(),
              f"{page}: redirects to a page of the site ({landed})")
    moved = f" → {landed.removeprefix(base)}" if landed != base + page else ""
    print(f"  {page}{moved}: {info['mjx']} equations, {info['images']} images, "
          f"{len(info['colab'])} Colab links ({time.monotonic() - t:.1f} s)", flush=True)


def check_search(check: Checks, tab, events: Events, base: str):
    "The search page finds the attention chapter for 'attention', without an error"
    t = time.monotonic()
    try:
        events.clear()
        goto(tab, base + "search.html?q=attention")
        hits = evaluate(tab, SEARCH) or []
        errors = problems_in_events(events.seen, base)
    except Exception as e:
        hits, errors = [], [f"{type(e).__name__}: {e}"]
    check(not errors, "search.html: no console error or failed request: " + "; ".join(errors[:8]))
    check(any("01_attention" in h for h in hits),
          f"search.html: 'attention' finds the attention chapter ({len(hits)} results: {hits[:5]})")
    print(f"  search.html?q=attention: {len(hits)} results ({time.monotonic() - t:.1f} s)",
          flush=True)


def main(site: Path) -> int:
    tracked = tracked_files(ROOT)
    shots = ROOT / "_build" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    check = Checks()
    t0 = time.monotonic()
    with offline_chromium(site, width=WIDTH, height=HEIGHT) as (context, base):
        tab = context.new_page()
        tab.set_default_timeout(PAGE_TIMEOUT * 1000)
        events = Events(tab)
        for page in ["index.html"] + toc_pages(ROOT):
            check_page(check, tab, events, site, base, page, tracked, shots)
        check_search(check, tab, events, base)
    for f in check.failed:
        print("FAILED:", f)
    print(f"browser check of {site} in {time.monotonic() - t0:.1f} s "
          f"(screenshots in {shots.relative_to(ROOT)})")
    print(f"{check.passed} passed, {len(check.failed)} failed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"))
