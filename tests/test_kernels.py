"""No notebook kernel hears another kernel's messages (issue 41), and kernel log lines are
recognised.

`make test` starts one Jupyter kernel per chapter in two pytest workers at once: the quick pass
(tests/test_notebooks.py, `execute`) in one, the Colab simulation (tests/test_colab.py,
`execute_in_runtime`) in the other. Over TCP, two things can make a kernel receive frames that are
not its own:

- jupyter_client picks a kernel's five ports by binding port 0 and releasing it, so two processes
  that launch kernels at the same moment can be handed the same port: the later kernel cannot bind
  it and dies before it replies to `kernel_info`, or a client talks to the other process's kernel;
- a client left open after its kernel has ended keeps pinging that kernel's heartbeat port (a new
  REQ socket every second, reconnecting by itself). When a later kernel, of either process, binds
  the port for its control or shell socket, it logs every ping as `ValueError: DELIM not in
  msg_list` into the cell it is running: the traceback that pages a_core and d_viz once showed.

Chance makes both rare, so this test forces them. Two processes, as the two workers, start kernels
at the same moment through the suite's own functions (`execute`, `execute_in_runtime`), and every
kernel is handed the same five port numbers as the kernels of the other process, rotated by one from
the kernel before it in its own process, so that its control socket gets the number its
predecessor's heartbeat had. Each kernel runs three cells: print a token, sleep across two heartbeat
periods, print the token again. Counted, per kernel: died before replying to `kernel_info`; hung
(its process killed after a time limit: a blocking client can wait for ever on a socket no kernel
serves); outputs that carry a kernel log line; crossed (another kernel's token, or its own missing);
failed otherwise; other unexpected output; and, per process, clients still running at the end.

More kernels, or ports as jupyter_client picks them (`--random`), for a stress run that prints the
counts:

    .venv/bin/python tests/test_kernels.py --kernels 40 [--random]

Chance collisions are likelier in a private network namespace with a narrow port range (Linux;
nothing else on the machine is affected):

    unshare -rn sh -c 'ip link set lo up &&
                       echo "40000 40199" > /proc/sys/net/ipv4/ip_local_port_range &&
                       exec .venv/bin/python tests/test_kernels.py --kernels 40 --random'
"""
import argparse, json, os, re, socket, subprocess, sys, threading, time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from notebook_kernel import (idle_gaps, kernel_log_lines, log_lines_in, log_report,  # noqa: E402
                             output_texts, sliced)

pytestmark = pytest.mark.kernels
FLAVOURS = ("quick", "colab")   # the quick pass's way of running a notebook, the Colab simulation's
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
SLEEP = 2.5                     # seconds: a client's heartbeat pings once a second
CELLS = ["import os\nprint(os.environ['TXBOOK_PROBE'])",
         f"import time\ntime.sleep({SLEEP})",
         "import os\nprint(os.environ['TXBOOK_PROBE'], 'done')"]
PROBLEMS = ("died", "hung", "log", "crossed", "failed", "unexpected", "open clients")


# ------------------------------------------------------------------------------------- the detector
CI_TRACEBACK = """ERROR:tornado.general:Uncaught exception in ZMQStream callback
Traceback (most recent call last):
  File "/x/site-packages/zmq/eventloop/zmqstream.py", line 585, in _log_error
    f.result()
  File "/x/site-packages/ipykernel/kernelbase.py", line 372, in dispatch_control
    await self.process_control(msg)
  File "/x/site-packages/ipykernel/kernelbase.py", line 378, in process_control
    idents, msg = self.session.feed_identities(msg, copy=False)
  File "/x/site-packages/jupyter_client/session.py", line 998, in feed_identities
    raise ValueError(msg)
ValueError: DELIM not in msg_list
"""


def test_kernel_log_lines_are_found():
    "The CI failure's traceback, a traitlets record, a signature failure: found, line by line"
    found = kernel_log_lines(CI_TRACEBACK)
    assert found[0] == "ERROR:tornado.general:Uncaught exception in ZMQStream callback"
    assert found[-1] == "ValueError: DELIM not in msg_list" and len(found) == 6, found
    assert kernel_log_lines(
        "[IPKernelApp] WARNING | Kernel is running over TCP without encryption.")
    assert kernel_log_lines("epoch 1\nERROR:asyncio:Task exception was never retrieved\n") == \
        ["ERROR:asyncio:Task exception was never retrieved"]
    assert kernel_log_lines("[E 12:00:01.250 IPKernelApp] Invalid Signature: b'...'")


def test_ordinary_outputs_are_not_kernel_log_lines():
    """What chapters print: results, warnings, a caught error, progress bars, a traceback of their
    own code"""
    ordinary = ["accuracy 0.93 ± 0.01 (n = 3)\n",
                "/x/site-packages/torch/nn/modules/module.py:12: UserWarning: a warning\n  "
                "warnings.warn(\n",
                "ValueError: image size 30x30 is not divisible by patch size 16\n",
                "epoch 3/3 ━━━━━━━━━━ 100% 0:00:01 loss 0.41\n",
                'Traceback (most recent call last):\n  File "/tmp/x/train.py", line 3, in '
                '<module>\n'
                "    main()\nRuntimeError: planted\n",
                "[tokens] 1,024 | [Kernel] no App here\n", "WARNING: rank 1 left the group\n"]
    for text in ordinary:
        assert kernel_log_lines(text) == [], text


def test_log_lines_name_the_cell():
    nb = {"cells": [{"cell_type": "markdown", "source": "x"},
                    {"cell_type": "code",
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": "ok\n"}]},
                    {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stderr",
                                                       "text": CI_TRACEBACK}]}]}
    nb["cells"][2]["id"] = "c3"
    assert [c for c, _ in log_lines_in(nb)] == ["cell 3 (id c3)"] * 6
    assert log_report(
        "a_core", nb).splitlines()[-1] == "a_core cell 3 (id c3): ValueError: DELIM not in msg_list"
    assert list(output_texts(nb["cells"][1])) == ["ok\n"]


def test_idle_gaps_name_the_cell():
    """A code cell the kernel started long after the cell before it replied is found, counted from
    the reply (kernel-stamped) to its busy status; markdown and unexecuted cells are passed over"""
    def code(id, busy, reply):
        return {"cell_type": "code", "id": id, "metadata": {"execution": {
            "iopub.status.busy": f"2026-12-06T01:{busy}Z", "shell.execute_reply":
            f"2026-12-06T01:{reply}Z"}}}
    nb = {"cells": [code("a", "55:40.000000", "55:49.928000"),
                    {"cell_type": "markdown", "id": "m", "metadata": {}},
                    {"cell_type": "code", "id": "skip", "metadata": {}},
                    code("b", "55:50.000000", "55:51.000000"),          # 0.07 s after a
                    code("c", "56:30.500000", "56:31.000000"),          # 39.5 s after b
                    code("d", "56:31.000000", "56:32.000000")]}
    assert idle_gaps(nb) == [("cell 5 (id c)", 39.5)]
    assert idle_gaps(nb, over=40) == []
    assert idle_gaps(nb, over=0.05) == [("cell 4 (id b)", 0.1), ("cell 5 (id c)", 39.5)]


def test_waits_are_sliced():
    """`sliced` waits in slices of at most `most` seconds: a message that a slice's end finds is
    returned (pyzmq looks once more when a wait times out), a wait with a timeout still ends with
    `queue.Empty` at that timeout, and one without waits on"""
    import asyncio, queue

    def channel(ready_after: float = float("inf"), ready_on_call: int = 0):
        "A reply once `ready_after` seconds have passed, or from call `ready_on_call` on"
        calls, t0 = [], time.monotonic()
        async def get_msg(timeout=None):
            calls.append(timeout)
            await asyncio.sleep(min(timeout, 0.05))             # no wake-up: only the end looks
            if time.monotonic() - t0 >= ready_after or len(calls) == ready_on_call:
                return {"msg": "reply"}
            raise queue.Empty
        return get_msg, calls
    # counted in calls, not seconds: a busy machine that wakes the sleeps late changes nothing
    get_msg, calls = channel(ready_on_call=3)
    assert asyncio.run(sliced(get_msg, most=0.05)(timeout=10)) == {"msg": "reply"}
    assert calls == [0.05] * 3, calls                           # slices, not one 10 s wait
    get_msg, calls = channel(ready_after=99)
    t0 = time.monotonic()
    with pytest.raises(queue.Empty):   # within 2 s, or the test fails rather than hangs
        asyncio.run(asyncio.wait_for(sliced(get_msg, most=0.05)(timeout=0.2), 2))
    assert time.monotonic() - t0 >= 0.19, calls                 # not before its timeout ...
    assert max(calls) <= 0.05 and sum(calls) <= 0.2 + 1e-9, calls   # ... and no wait beyond it
    get_msg, calls = channel(ready_after=0.2)
    assert asyncio.run(sliced(get_msg, most=0.05)()) == {"msg": "reply"}   # no timeout: on


def test_site_check_names_page_and_cell(tmp_path):
    """tests/check_site.py names the page and the cell of a kernel log line in the executed
    notebooks it reads"""
    from check_site import kernel_logs
    cell = lambda i, text: {"cell_type": "code", "id": i, "outputs": [
        {"output_type": "stream", "name": "stderr", "text": text}]}
    (tmp_path / "a_core.ipynb").write_text(
        json.dumps({"cells": [cell("x1", "fine\n"), cell("x2", CI_TRACEBACK)]}))
    (tmp_path / "b_stats.ipynb").write_text(json.dumps({"cells": [cell("y1", "mean 0.5\n")]}))
    found = kernel_logs(tmp_path).splitlines()
    assert len(found) == 6 \
        and all(l.startswith("nbs/a_core cell 2 (id x2): ") for l in found), found


# --------------------------------------------------------------- kernels from two processes at once
def free_ports(n: int) -> list[int]:
    "`n` TCP port numbers that were free a moment ago (as jupyter_client finds them)"
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def watch_launches(numbers: list[int] | None = None) -> None:
    """Record in LAUNCHES the connection info of every kernel this process starts, and with
    `numbers`, hand each kernel those five port numbers, rotated by one per kernel: kernel i+1's
    control port is kernel i's heartbeat port. The numbers are set on the kernel manager just before
    it writes the connection file, whatever its transport; over TCP they are ports."""
    from jupyter_client.connect import ConnectionFileMixin
    write, count = ConnectionFileMixin.write_connection_file, iter(range(10 ** 6))

    def forced(self, **kw):
        if numbers and not getattr(self, "_connection_file_written", False):
            i = next(count) % len(numbers)
            for name, port in zip(PORT_NAMES, numbers[i:] + numbers[:i]):
                setattr(self, name, port)
        write(self, **kw)
        LAUNCHES.append(
            {"transport": self.transport, "ip": self.ip,
             "ports": [getattr(self, n) for n in PORT_NAMES]})
    ConnectionFileMixin.write_connection_file = forced


LAUNCHES: list[dict] = []   # the connection info each forced launch of this process wrote


def _runner(flavour: str, folder: Path):
    """run(nb, env) for `flavour`: the suite's own function for running a notebook, and the
    environment it uses"""
    sys.path.insert(0, str(ROOT / "tests"))
    if flavour == "quick":
        from helpers import execute, kernel_env
        return (lambda nb, env: execute(nb, folder, env, timeout=60)), kernel_env()
    from helpers import execute_in_runtime, kernel_threads
    # a kernelspec named as the simulated runtime's, on this Python
    spec = folder / "kernels" / "colab"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "colab", "language": "python"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | kernel_threads()
    return (
        lambda nb, env: execute_in_runtime(nb, folder, env, folder / "kernels", timeout=60)), env


def check_kernel(nb, token: str, error: BaseException | None) -> dict:
    "What went wrong with one probe notebook's kernel (empty lists and False: nothing)"
    stdout = [
        "".join(o.get("text", "") for o in c.get("outputs", []) if o.get("name") == "stdout")
        for c in nb.cells]
    texts = "".join(t for c in nb.cells for t in output_texts(c))
    others = sorted(set(re.findall(r"(?:quick|colab)-\d+-\d+", texts)) - {token})
    log = [f"{c}: {line}" for c, line in log_lines_in(nb)]
    unexpected = [t for c in nb.cells for t in output_texts(c) if not kernel_log_lines(t)
                  and t not in (token + "\n", token + " done\n")]
    died = error is not None \
        and ("died" in str(error).lower() or type(error).__name__ == "DeadKernelError")
    return {"token": token, "died": died, "log": log, "unexpected": unexpected,
            "crossed": bool(others)
            or (error is None and stdout != [token + "\n", "", token + " done\n"]),
            "failed": None if error is None or died else f"{type(error).__name__}: "
                                                         f"{str(error)[:300]}"}


def worker(flavour: str, n: int, ports: list[int] | None, folder: Path) -> dict:
    """Run `n` probe notebooks one after another, the way `flavour` runs chapters; what went wrong
    with each is appended to `folder/<flavour>.jsonl` as it is known (a process that hangs is read
    from there)"""
    from jupyter_client.channels import HBChannel
    from nbformat.v4 import new_code_cell, new_notebook
    watch_launches(ports)
    work = folder / flavour
    work.mkdir(parents=True)
    run, env = _runner(flavour, work)
    (folder / f"{flavour}.ready").touch()   # start together, as two workers do
    t0 = time.time()
    while not all((folder / f"{f}.ready").exists() for f in FLAVOURS) and time.time() - t0 < 300:
        time.sleep(0.05)
    for i in range(n):
        token = f"{flavour}-{i}-{os.getpid()}"
        nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
        error, before = None, len(LAUNCHES)
        try:
            run(nb, env | {"TXBOOK_PROBE": token})
        except Exception as e:   # counted, not raised: every kernel is checked
            error = e
        with open(folder / f"{flavour}.jsonl", "a") as f:
            f.write(json.dumps(check_kernel(nb, token, error) | {"launches": LAUNCHES[before:]})
                    + "\n")
    clients = [t.address for t in threading.enumerate()
               if isinstance(t, HBChannel) and t.is_alive()]
    return {"open clients": clients, "seconds": round(time.time() - t0, 1)}


def _kill_tree(pid: int) -> None:
    "Kill a worker and its kernels (jupyter_client starts each kernel in a session of its own)"
    import psutil   # ipykernel's dependency
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def run_pair(folder: Path, n: int, forced: bool = True, limit: float | None = None) -> dict:
    """Two processes, one per flavour, `n` kernels each, at once; the counts and each process's
    report. A process still running after `limit` seconds (default 120 + 30 n) is killed with its
    kernels; its kernel in progress counts as hung"""
    ports = free_ports(len(PORT_NAMES)) if forced else None
    folder.mkdir(parents=True, exist_ok=True)
    procs = {
        f: subprocess.Popen(
            [sys.executable, __file__, "--worker", f, "--kernels", str(n), "--folder",
             str(folder)] + (["--ports", ",".join(map(str, ports))] if ports else []),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in FLAVOURS}
    deadline = time.time() + (limit or 120 + 30 * n)
    reports = {}
    for f, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.time()))
            assert p.returncode == 0, f"the {f} process failed:\n{err[-4000:]}"
            report = json.loads(out.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            _kill_tree(p.pid)
            p.communicate()
            report = {"open clients": [], "seconds": None, "hung": True}
        log = folder / f"{f}.jsonl"
        report["kernels"] = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() \
            else []
        if report.get("hung"):   # the kernel it was running when it was killed
            report["kernels"].append(
                {"token": f"{f}-{len(report['kernels'])}", "hung": True, "launches": []})
        reports[f] = {"flavour": f, **report}
    ks = [k for r in reports.values() for k in r["kernels"]]
    for k in ks:
        k.update({p: k.get(p, False) for p in PROBLEMS[:-1]})
    if forced:
        # the numbers were handed out as planned: the same five to every launch, in both processes
        ran = [k for k in ks if not k["hung"]]
        assert all(len(k["launches"]) == 1 and sorted(k["launches"][0]["ports"]) == sorted(ports)
                   for k in ran), \
            [k["launches"] for k in ran]
    counts = {"kernels": 2 * n, "not run": 2 * n - len(ks),
              "ports": "forced" if forced else "random",
              "transport": sorted({l["transport"] for k in ks for l in k["launches"]}),
              **{p: sum(bool(k[p]) for k in ks) for p in PROBLEMS[:-1]},
              "log lines": sum(len(k["log"] or []) for k in ks),
              "open clients": sum(len(r["open clients"]) for r in reports.values()),
              "seconds": max((r["seconds"] or 0) for r in reports.values())}
    return {"counts": counts, "reports": reports}


def summary(result: dict) -> str:
    "The counts, and what went wrong with each kernel that had a problem"
    lines = [json.dumps(result["counts"])]
    for r in result["reports"].values():
        for k in r["kernels"]:
            bad = {p: k[p] for p in PROBLEMS[:-1] if k[p]}
            if bad:
                lines.append(f"  {k['token']}: " + json.dumps(bad)[:600])
        if r["open clients"]:
            lines.append(f"  {r['flavour']}: clients still running: {r['open clients']}")
        if r.get("hung"):
            lines.append(f"  {r['flavour']}: killed after the time limit, {len(r['kernels']) - 1} "
                         "kernels done")
    return "\n".join(lines)


@pytest.mark.slow   # starts kernels from two processes
def test_no_kernel_hears_another(tmp_path):
    """Kernels started by the quick pass's and the Colab simulation's functions, from two processes
    at once, with every launch handed the port numbers of a launch in the other process and of its
    predecessor's heartbeat: none dies, none shows a kernel log line, none talks to another, no
    client is left running"""
    result = run_pair(tmp_path / "pair", n=4)
    print(summary(result))
    c = result["counts"]
    assert not c["not run"] and not any(c[p] for p in PROBLEMS), summary(result)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="kernels from two processes at once; prints the counts")
    ap.add_argument("--kernels", type=int, default=40, help="kernels per process")
    ap.add_argument("--random", action="store_true", help="ports as jupyter_client picks them (not "
                                                          "forced)")
    ap.add_argument("--worker", choices=FLAVOURS, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help="where the probe notebooks run (default: a new "
                                                "temp folder)")
    ap.add_argument("--limit", type=float, help="seconds before a process is killed (default 120 + "
                                                "30 per kernel)")
    a = ap.parse_args(argv)
    if a.worker:
        ports = [int(p) for p in a.ports.split(",")] if a.ports else None
        print(json.dumps(worker(a.worker, a.kernels, ports, a.folder)))
        return 0
    import tempfile
    folder = a.folder or Path(tempfile.mkdtemp(prefix="txbook-kernels-"))
    result = run_pair(folder, a.kernels, forced=not a.random, limit=a.limit)
    print(summary(result))
    return 1 if any(result["counts"][p] for p in PROBLEMS) else 0


if __name__ == "__main__":
    sys.exit(main())
