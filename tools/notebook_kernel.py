"""Notebook kernels that hear only their own client, and the kernel log lines a page must never
show.

`run_notebook` executes a notebook in a new kernel the way every kernel-starting part of `make test`
does (the quick pass, tests/test_notebooks.py; the Colab simulation, tests/test_colab.py;
tools/run_full.py): over the `ipc` transport, its five sockets files in a private folder of its own
(`tempfile.mkdtemp`, mode 0700) that is removed when the kernel has ended, and its client's channels
(the heartbeat's thread included) stopped before it returns, or it raises. Over TCP, jupyter_client
picks a kernel's ports by binding port 0 and releasing it, so two processes that launch at the same
moment can be handed the same port (the later kernel dies before replying to `kernel_info`, or a
client talks to the other's kernel), and a client left open keeps pinging its ended kernel's
heartbeat port until a later kernel binds that port for its control socket and logs every ping into
a cell (`ValueError: DELIM not in msg_list`: issue 41). A socket file in a folder no other kernel
uses can be neither. tests/test_kernels.py forces both TCP hazards and checks that none reaches
these kernels. `make book` leaves myst-nb its own TCP kernels (no setting reaches its kernel
manager): they run after `make test`, one at a time in one process, and nbclient, which makes each,
closes each client.

`kernel_log_lines(text)` finds what the Jupyter machinery (the kernel, its messaging, zmq) logged in
one output's text, `log_lines_in(nb)` in every output of an executed notebook: the quick pass and
the book's page checks (tests/check_site.py) name the page and the cell of each. `idle_gaps(nb)`
finds the cells the kernel was slow to start.
"""
from __future__ import annotations

import re, shutil, tempfile, threading
from pathlib import Path

# The messaging stack of a Jupyter kernel: a traceback through these packages is the kernel's, not a
# chapter's
STACK = ("zmq", "ipykernel", "jupyter_client", "tornado")
_LOG_LINE = re.compile(
    # a record of one of the stack's loggers in logging's default format (what its last-resort
    # handler prints): `ERROR:tornado.general:Uncaught exception in ZMQStream callback`
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:" + "|".join(STACK)
    + r"|asyncio|traitlets|IPKernelApp)\b[\w.]*:"
    # a record of a traitlets application: `[IPKernelApp] WARNING | ...`, `[W 12:00:00.000
    # ServerApp] ...`
    r"|^\[(?:[DIWEC] [\d: .-]+ )?\w+App\] "
    # a traceback frame in the stack's source: `  File ".../zmq/eventloop/zmqstream.py", line 585,
    # in _log_error`
    r"""|^\s*File "[^"]*[/\\](?:""" + "|".join(STACK) + r""")[/\\][^"]*", line \d+"""
    # what a kernel logs when its sockets get frames that are not a message of its session (a
    # heartbeat ping on a control port, a message signed with another kernel's key)
    r"|DELIM not in msg_list|Invalid Signature|Duplicate Signature|Invalid Message"
    r"|Uncaught exception in ZMQStream callback|Exception in message handler|Unknown message type")


def kernel_log_lines(text: str) -> list[str]:
    "The lines of `text` (one output of a cell) that the kernel's machinery logged, in order"
    return [line.strip() for line in text.splitlines() if _LOG_LINE.search(line)]


def output_texts(cell: dict):
    "The texts of a code cell's outputs: streams, text/* data (not SVG), tracebacks"
    for out in cell.get("outputs", []):
        texts = [out.get("text", "")] if out.get("output_type") == "stream" else []
        texts += [v for k, v in out.get("data", {}).items()
                  if k.startswith("text/") and k != "text/svg+xml"]
        texts += out.get("traceback", [])
        for t in texts:
            yield t if isinstance(t, str) else "".join(t)


def log_lines_in(nb: dict) -> list[tuple[str, str]]:
    """(cell, line) of every kernel log line in `nb`'s outputs; cell: `cell 3 (id 1a2b3c)`, counted
    from 1"""
    return [(f"cell {i} (id {cell.get('id', '?')})", line)
            for i, cell in enumerate(nb.get("cells", []), 1)
            for text in output_texts(cell) for line in kernel_log_lines(text)]


def log_report(page: str, nb: dict) -> str:
    "Where `nb` (page `page`) shows kernel log lines, one line each; '' if nowhere"
    return "\n".join(f"{page} {cell}: {line}" for cell, line in log_lines_in(nb))


def idle_gaps(nb: dict, over: float = 30.0) -> list[tuple[str, float]]:
    """(cell, seconds) of every code cell whose kernel started it more than `over` seconds after
    it had replied to the code cell before (nbclient's timing metadata, stamped by the kernel):
    time in which the notebook ran nothing. A gap that reaches the cell timeout fails the page; a
    shorter one passes, so the quick pass and the Colab simulation warn of each (seen once: 899.9 s
    before 01_attention's cell 90, under the 900 s timeout)."""
    from datetime import datetime
    stamp = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
    gaps, before = [], None
    for i, cell in enumerate(nb.get("cells", []), 1):
        t = cell.get("metadata", {}).get("execution", {})
        if "iopub.status.busy" not in t or "shell.execute_reply" not in t:
            continue
        if before is not None:
            gap = (stamp(t["iopub.status.busy"]) - before).total_seconds()
            if gap > over:
                gaps.append((f"cell {i} (id {cell.get('id', '?')})", round(gap, 1)))
        before = stamp(t["shell.execute_reply"])
    return gaps


# ------------------------------------------------------------------------------- running a notebook
# bytes a Unix socket's path may have (sockaddr_un: 108 on Linux, 104 on macOS), with room
_SUN_PATH = 100


def sliced(get_msg, most: float = 1.0):
    """`get_msg(timeout)` of a jupyter_client channel, waiting in slices of at most `most` seconds
    until the message comes or `timeout` runs out (None: no end), then raising `queue.Empty`.

    An ipywidgets `Output` widget (as `interact` makes) has nbclient send `comm_msg` updates on the
    shell socket while it waits on that socket for the cell's reply, and the reply can then sit in
    the socket with no wake-up until the wait times out (jupyter/nbclient#312, open): pyzmq looks at
    the socket once more when a wait times out. Here the kernel replied to 01_attention's `interact`
    cell and went idle, both processes idle in `select` (py-spy), and the client read the reply
    only when its 900 s cell timeout came: the page took 910 s instead of 8. Waits of one second
    each find such a message within a second."""
    import queue, time

    async def get(timeout: float | None = None):
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                return await get_msg(timeout=most if left is None else min(most, left))
            except queue.Empty:
                if left is not None and left <= most:
                    raise
    return get


def _slice_waits(kc) -> None:
    "The client's shell and IOPub waits, in slices of a second (`sliced`)"
    for channel in (kc.shell_channel, kc.iopub_channel):
        channel.get_msg = sliced(channel.get_msg)


def run_notebook(nb, folder: str | Path, env: dict, timeout: int, kernel_name: str = "python3",
                 kernel_dirs: list | None = None, **client_kw) -> None:
    """Execute `nb` in place in a new kernel `kernel_name` (found in `kernel_dirs`, else where
    Jupyter looks), working folder `folder`, environment `env`, `timeout` seconds per cell, with
    nbclient (`client_kw`: more NotebookClient options). Raises what nbclient raises
    (CellExecutionError, CellTimeoutError, DeadKernelError, RuntimeError when the kernel dies before
    replying to kernel_info)."""
    import zmq
    from jupyter_client.channels import HBChannel
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient
    if not zmq.has("ipc"):
        raise RuntimeError("this zmq has no ipc transport: notebook kernels would run over TCP, "
                           "where two "
                           "processes can be handed the same port (tools/notebook_kernel.py)")
    # mode 0700: this kernel's, no one else's
    private = Path(tempfile.mkdtemp(prefix="txbook-kernel-"))
    if len(str(private / "kernel-99")) > _SUN_PATH:
        shutil.rmtree(private)
        raise ValueError(f"the kernel's socket paths under {private} are longer than {_SUN_PATH} "
                         "bytes: set TMPDIR to a shorter folder")
    client = km = None
    try:
        specs = KernelSpecManager(kernel_dirs=[str(d) for d in kernel_dirs]) if kernel_dirs \
            else None
        km = AsyncKernelManager(kernel_name=kernel_name, transport="ipc",
                                ip=str(private / "kernel"),
                                connection_file=str(private / "kernel.json"),
                                **({"kernel_spec_manager": specs} if specs else {}))
        client = NotebookClient(nb, km=km, timeout=timeout, kernel_name=kernel_name,
                                resources={"metadata": {"path": str(folder)}},
                                on_notebook_start=lambda **_: _slice_waits(client.kc),
                                **client_kw)
        # cleanup_kc: nbclient shuts the kernel down and stops its client's channels although it did
        # not make `km` (by default it leaves both to the caller: the Colab simulation's heartbeats
        # outlived its kernels)
        client.execute(env=env, cleanup_kc=True)
    finally:
        try:
            if client is not None and client.kc is not None:   # nbclient did not get to its cleanup
                client.kc.stop_channels()
            if km is not None and km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    left = [t.address for t in threading.enumerate() if isinstance(t, HBChannel) and t.is_alive()
            and str(private) in (t.address or "")]
    if left:
        raise RuntimeError(
            f"the client of the kernel at {private} still runs its heartbeat: {left}")
