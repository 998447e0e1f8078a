"""The built site in a real browser (run after `jupyter-book build` and tests/check_site.py).

Headless Chromium (Debian's `chromium` package; installed with apt-get when missing and running as root)
loads the landing page, every page of `_toc.yml` and the search page from an HTTP server on 127.0.0.1, with
every other host unreachable (so the check also proves the site works offline), and checks on each page:

- equations are typeset: every `.math` element holds MathJax's output (`mjx-container`), and no raw
  `\\(`, `\\[` or `\\begin{` is left in the text outside code;
- every image loads (`naturalWidth > 0`);
- no code block scrolls sideways in a 1440 px wide window (lines of at most 100 characters fit);
- a chapter's "open in Colab" links point at that chapter's notebook in the repository (a tracked file);
- the console shows no error, no exception is thrown, no request fails, and nothing is requested from
  any host but 127.0.0.1;
- the search page finds "attention", the attention chapter among the results.

It saves screenshots of two chapters (first displayed equation in view) under `_build/browser/`.
Chromium is driven through the Chrome DevTools Protocol over `--remote-debugging-pipe`: only the
standard library, no driver, no websocket package.

usage: python tests/check_browser.py [_build/html]   (prints one line per page, then 'N passed, N failed')
"""
from __future__ import annotations

import base64, fcntl, functools, json, os, select, shutil, subprocess, sys, tempfile, threading, time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ["nbs/01_attention.html", "nbs/02_mhsa.html"]  # two chapters with displayed equations
PAGE_TIMEOUT = 90  # seconds for one page to load and typeset (the 2-core CI machine may be busy)
WIDTH, HEIGHT = 1440, 900  # a laptop screen: both sidebars shown, code cells hold 100 characters (txbook.css)


# ---------------------------------------------------------------------------------------------- set-up
def find_chromium() -> str:
    "Path of a Chromium binary; installs Debian's `chromium` package with apt-get when missing (as root)"
    names = [os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome", "chrome"]
    for n in filter(None, names):
        if p := shutil.which(n):
            return p
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("check_browser: installing Debian's chromium package with apt-get", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        if p := shutil.which("chromium"):
            return p
    sys.exit("check_browser: no Chromium found; install Debian's `chromium` package (apt-get install chromium) "
             "or set CHROMIUM=/path/to/chrome")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site: Path) -> tuple[ThreadingHTTPServer, str]:
    "Serve `site` on 127.0.0.1 (a free port) from a background thread; returns the server and its base URL"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


# ------------------------------------------------------------------- Chrome DevTools Protocol over a pipe
class Browser:
    "Headless Chromium driven through the DevTools protocol on file descriptors 3 (commands) and 4 (replies)"

    def __init__(self, binary: str, profile: str, log):
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        # keep the child's ends above 4, so that moving them to 3 and 4 cannot overwrite one another
        hi = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (cmd_r, res_w)]
        for fd in (cmd_r, res_w):
            os.close(fd)

        def child_fds():
            os.dup2(hi[0], 3)
            os.dup2(hi[1], 4)

        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
                "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-extensions", "--disable-default-apps", "--disable-quic",
                "--metrics-recording-only", "--mute-audio", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
                # offline: no host but 127.0.0.1 resolves, whatever a page asks for
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--no-proxy-server",
                "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     pass_fds=(3, 4), preexec_fn=child_fds)
        for fd in hi:
            os.close(fd)
        self.w, self.r = cmd_w, res_r
        self.buf, self.events, self.next_id, self.session = b"", [], 0, None

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit code {self.proc.poll()})")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, *, session: bool = True, timeout: float = 60):
        "Send one command and return its result; events that arrive meanwhile are kept in `self.events`"
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method: str, timeout: float) -> dict:
        "Wait for the next event `method` (of the page's session), keeping every event in `self.events`"
        deadline = time.monotonic() + timeout
        seen = len(self.events)
        while True:
            for m in self.events[seen:]:
                if m.get("method") == method:
                    return m
            seen = len(self.events)
            m = self._read(deadline)
            if "method" in m:
                self.events.append(m)

    def open_page(self):
        "A new tab with the domains the checks listen to"
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Network.setCacheDisabled", {"cacheDisabled": True})
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})

    def goto(self, url: str, timeout: float = PAGE_TIMEOUT) -> str:
        "Load `url`, follow a redirect page (meta refresh or script), wait for the load event; returns the final URL"
        self.events = []
        res = self.send("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise RuntimeError(f"navigation failed: {res['errorText']}")
        self.wait_event("Page.loadEventFired", timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # a redirect page (the landing index.html) goes on to another page
            try:
                href, state, refresh = self.eval("[location.href, document.readyState,"
                                                 " !!document.querySelector('meta[http-equiv=refresh i]')]", timeout=10)
                if state == "complete" and not refresh:
                    return href
            except RuntimeError:
                pass  # the page's context went away during the redirect
            time.sleep(0.2)
        raise TimeoutError(f"{url} did not finish loading in {timeout} s")

    def eval(self, expression: str, timeout: float = PAGE_TIMEOUT):
        "Evaluate JavaScript in the page (promises awaited) and return its value"
        r = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                           "returnByValue": True, "timeout": timeout * 1000}, timeout=timeout + 5)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(d.get("exception", {}).get("description") or d.get("text"))
        return r["result"].get("value")

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.w)
        os.close(self.r)


# ------------------------------------------------------------------------------------ what is checked
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
    untypeset: mathEls.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60)),
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
    if (hits.length && done && done.textContent.trim()) return hits.map(a => a.getAttribute('href'));
    await new Promise(ok => setTimeout(ok, 100));
  }
  return [...document.querySelectorAll('#search-results li a, ul.search li a')].map(a => a.getAttribute('href'));
})()
"""


def problems_in_events(events: list[dict], base: str) -> list[str]:
    "Console errors, exceptions, failed requests and requests to other hosts among a page's events"
    out, urls = [], {}
    host = urlsplit(base).netloc
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Network.requestWillBeSent":
            url = p["request"]["url"]
            urls[p["requestId"]] = url
            if urlsplit(url).scheme in ("http", "https", "ws", "wss") and urlsplit(url).netloc != host:
                out.append(f"requests another host: {url}")
        elif m == "Network.loadingFailed" and not p.get("canceled"):
            out.append(f"request failed ({p.get('errorText')}): {urls.get(p['requestId'], '?')}")
        elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
            out.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
        elif m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}"[:300])
        elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            out.append(f"console.{p['type']}: {args}"[:300])
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"console error ({p['entry']['source']}): {p['entry']['text']} {p['entry'].get('url', '')}"[:300])
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
        out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
        return set(out.splitlines())
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout: fall back to the file's existence


def main(site: Path) -> int:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo_url = cfg["repository"]["url"].rstrip("/")
    branch = cfg["repository"].get("branch", "main")
    book_path = (cfg["repository"].get("path_to_book") or "").strip("/")
    tracked = tracked_files(ROOT)
    shots = ROOT / "_build" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    passed, failed = 0, []

    def check(ok: bool, what: str):
        nonlocal passed
        if ok:
            passed += 1
        else:
            failed.append(what)
        return ok

    t0 = time.monotonic()
    binary = find_chromium()
    httpd, base = serve(site)
    profile = tempfile.mkdtemp(prefix="txbook-chromium-")
    log = open(shots / "chromium.log", "wb")
    browser = Browser(binary, profile, log)
    try:
        browser.open_page()
        pages = ["index.html"] + toc_pages(ROOT)
        for page in pages:
            t = time.monotonic()
            if not check((site / page).exists(), f"{page}: exists in the built site"):
                continue
            try:
                landed = browser.goto(base + page)
                info = browser.eval(INSPECT)
            except Exception as e:  # a page that does not load or hangs is a failure of that page, not a crash
                check(False, f"{page}: loads ({type(e).__name__}: {e})")
                continue
            errors = problems_in_events(browser.events, base)
            check(not errors, f"{page}: no console error or failed request: " + "; ".join(errors[:8]))
            if info["math"] or info["raw"]:
                check(info["mathjax"] == "typeset", f"{page}: MathJax loaded ({info['mathjax']})")
                check(not info["untypeset"] and info["mjx"] >= info["math"],
                      f"{page}: all {info['math']} equations typeset ({info['mjx']} MathJax outputs; "
                      f"not typeset: {info['untypeset'][:3]})")
                check(not info["raw"], f"{page}: no raw TeX in the text: {info['raw']}")
            check(not info["wide"], f"{page}: no code block scrolls sideways at {WIDTH} px "
                                    f"({len(info['wide'])} do: {info['wide'][:3]})")
            check(not info["broken"], f"{page}: every image loads ({len(info['broken'])} of {info['images']} "
                                      f"broken: {info['broken'][:5]})")
            if page.startswith("nbs/"):
                nb = f"{book_path + '/' if book_path else ''}{page.removesuffix('.html')}.ipynb"
                want = f"https://colab.research.google.com/github/{repo_url.removeprefix('https://github.com/')}" \
                       f"/blob/{branch}/{nb}"
                present = (nb in tracked) if tracked is not None else (ROOT / nb).exists()
                check(bool(info["colab"]) and all(h == want for h in info["colab"]) and present,
                      f"{page}: Colab link points at {nb} in the repository (found {info['colab'][:2]}, "
                      f"tracked: {present})")
            if page in SCREENSHOTS:
                browser.eval("(() => { const m = document.querySelector('mjx-container[display=\"true\"]')"
                             " || document.querySelector('mjx-container');"
                             " if (m) m.scrollIntoView({block: 'center'}); })()")
                time.sleep(0.5)
                png = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"])
                out = shots / (Path(page).stem + ".png")
                out.write_bytes(png)
                check(len(png) > 10_000, f"{page}: screenshot {out.relative_to(ROOT)} ({len(png)} bytes)")
            if landed != base + page:
                check(landed.startswith(base) and Path(site / urlsplit(landed).path[1:]).is_file(),
                      f"{page}: redirects to a page of the site ({landed})")
            print(f"  {page}{' → ' + landed.removeprefix(base) if landed != base + page else ''}: {info['mjx']} equations, {info['images']} images, "
                  f"{len(info['colab'])} Colab links ({time.monotonic() - t:.1f} s)", flush=True)

        t = time.monotonic()
        try:
            browser.goto(base + "search.html?q=attention")
            hits = browser.eval(SEARCH) or []
            errors = problems_in_events(browser.events, base)
        except Exception as e:
            hits, errors = [], [f"{type(e).__name__}: {e}"]
        check(not errors, "search.html: no console error or failed request: " + "; ".join(errors[:8]))
        check(any("01_attention" in h for h in hits),
              f"search.html: 'attention' finds the attention chapter ({len(hits)} results: {hits[:5]})")
        print(f"  search.html?q=attention: {len(hits)} results ({time.monotonic() - t:.1f} s)", flush=True)
    finally:
        browser.close()
        httpd.shutdown()
        log.close()
        shutil.rmtree(profile, ignore_errors=True)

    for f in failed:
        print("FAILED:", f)
    print(f"browser check of {site} in {time.monotonic() - t0:.1f} s (screenshots in {shots.relative_to(ROOT)})")
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"))
