"""Debian's Chromium driven by Playwright, offline: what tests/check_browser.py and
tools/book_pdf.py share.

- `find_chromium()`: the system Chromium (`/usr/bin/chromium`, Debian's `chromium` package); when it
  is missing and this process runs as root on a machine with apt-get, it installs that package
  first. Playwright never downloads a browser of its own: it launches this binary
  (`executable_path`).
- `serve(site)`: the built site over HTTP on 127.0.0.1, from a background thread.
- `offline_chromium(site)`: a headless Chromium with a browser context in which every request whose
  host is not 127.0.0.1 is aborted (Playwright's routing), and no other host resolves either
  (Chromium's host resolver rules, for what routing does not see, such as DNS prefetches), so a page
  that works here works offline.
"""
from __future__ import annotations

import contextlib, functools, os, re, shutil, subprocess, sys, threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"
SYSTEM_CHROMIUM = "/usr/bin/chromium"


def find_chromium() -> str:
    "Path of the system Chromium; installs Debian's `chromium` with apt-get when missing (as root)"
    names = [os.environ.get("CHROMIUM", ""), SYSTEM_CHROMIUM, "chromium", "chromium-browser",
             "google-chrome", "chrome"]
    for n in filter(None, names):
        if p := shutil.which(n):
            return p
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("chromium: installing Debian's chromium package with apt-get", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        if p := shutil.which("chromium"):
            return p
    sys.exit("chromium: no Chromium found; install Debian's `chromium` package "
             "(apt-get install chromium) or set CHROMIUM=/path/to/chromium")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site: Path) -> tuple[ThreadingHTTPServer, str]:
    "Serve `site` on 127.0.0.1 (a free port) from a background thread; returns the server, its URL"
    httpd = ThreadingHTTPServer((HOST, 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://{HOST}:{httpd.server_address[1]}/"


# Every http(s) URL whose host is not 127.0.0.1, each request for one aborted. A pattern (not a
# Python function) is matched by Playwright's driver: a request to 127.0.0.1 never waits for Python.
NOT_LOCAL = re.compile(r"^(?!https?://127\.0\.0\.1[:/])https?:")


# Chromium's flags: quiet, headless, no background traffic; no host but 127.0.0.1 resolves.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--no-default-browser-check", "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync", "--disable-extensions", "--disable-default-apps", "--disable-quic",
        "--metrics-recording-only", "--mute-audio", "--hide-scrollbars", "--no-proxy-server",
        f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {HOST}"]


@contextlib.contextmanager
def offline_chromium(site: Path, *, width: int = 1440, height: int = 900):
    """Yields `(context, base)`: a Playwright browser context of headless system Chromium in which
    only 127.0.0.1 is reachable, and the base URL at which `site` is served"""
    from playwright.sync_api import sync_playwright
    binary = find_chromium()
    httpd, base = serve(site)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=binary, headless=True, args=ARGS)
            try:
                context = browser.new_context(viewport={"width": width, "height": height},
                                              device_scale_factor=1, service_workers="block")
                context.route(NOT_LOCAL, lambda route: route.abort())
                yield context, base
                context.close()
            finally:
                browser.close()
    finally:
        httpd.shutdown()
