"""Notebook kernels' log lines: what the Jupyter machinery (the kernel, its messaging, zmq) wrote into a
cell's output, which a page must never show.

`kernel_log_lines(text)` finds them in one output's text, `log_lines_in(nb)` in every output of an executed
notebook: the quick pass (tests/test_notebooks.py) and the book's page checks (tests/check_site.py) name the
page and the cell of each.
"""
from __future__ import annotations

import re

# The messaging stack of a Jupyter kernel: a traceback through these packages is the kernel's, not a chapter's
STACK = ("zmq", "ipykernel", "jupyter_client", "tornado")
_LOG_LINE = re.compile(
    # a record of one of the stack's loggers in logging's default format (what its last-resort handler prints):
    # `ERROR:tornado.general:Uncaught exception in ZMQStream callback`
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:" + "|".join(STACK) + r"|asyncio|traitlets|IPKernelApp)\b[\w.]*:"
    # a record of a traitlets application: `[IPKernelApp] WARNING | ...`, `[W 12:00:00.000 ServerApp] ...`
    r"|^\[(?:[DIWEC] [\d: .-]+ )?\w+App\] "
    # a traceback frame in the stack's source: `  File ".../zmq/eventloop/zmqstream.py", line 585, in _log_error`
    r"""|^\s*File "[^"]*[/\\](?:""" + "|".join(STACK) + r""")[/\\][^"]*", line \d+"""
    # what a kernel logs when its sockets get frames that are not a message of its session (a heartbeat ping
    # on a control port, a message signed with another kernel's key)
    r"|DELIM not in msg_list|Invalid Signature|Duplicate Signature|Invalid Message"
    r"|Uncaught exception in ZMQStream callback|Exception in message handler|Unknown message type")


def kernel_log_lines(text: str) -> list[str]:
    "The lines of `text` (one output of a cell) that the kernel's machinery logged, in order"
    return [line.strip() for line in text.splitlines() if _LOG_LINE.search(line)]


def output_texts(cell: dict):
    "The texts of a code cell's outputs: streams, text/* data (not SVG), tracebacks"
    for out in cell.get("outputs", []):
        texts = [out.get("text", "")] if out.get("output_type") == "stream" else []
        texts += [v for k, v in out.get("data", {}).items() if k.startswith("text/") and k != "text/svg+xml"]
        texts += out.get("traceback", [])
        for t in texts:
            yield t if isinstance(t, str) else "".join(t)


def log_lines_in(nb: dict) -> list[tuple[int, str]]:
    "(cell number, counted from 1 as the notebook's cells, line) of every kernel log line in `nb`'s outputs"
    return [(i, line) for i, cell in enumerate(nb.get("cells", []), 1) for text in output_texts(cell)
            for line in kernel_log_lines(text)]
