#!/usr/bin/env python3
"""Run the chapters at full size, one process each, and record what they report.

    python tools/run_full.py                      # every chapter, full size, one at a time
    python tools/run_full.py 10_vit 12_swin       # some chapters (stems or paths)
    python tools/run_full.py --size smoke --out /tmp/r   # full shapes, cut budgets (CI, on the CPU)
    python tools/run_full.py --jobs 4             # four chapters at once (GPU, CPU cores to spare)
    python tools/run_full.py --render             # write each chapter's "At full size" cell

Each chapter is executed top to bottom with nbclient from `nbs/` (where the data is found), with
`TXBOOK_SIZE` set and `TXBOOK_RESULTS` naming a scratch file that `txbook.stats.report` fills with
the chapter's headline figures. The result is `<out>/<chapter>.json` (default `results/full/`): the
chapter, the commit, the date, the device, torch and CUDA versions, the precision, the size, the
wall time, how many chapters ran at once, the status (ok, error, timeout) and the figures.
`--executed DIR` also keeps each executed notebook (outputs included) for reading what happened.

The commit is `git rev-parse HEAD` (or `$TXBOOK_COMMIT` where there is no git, as on a machine that
got a copy of the tree); a tree with uncommitted changes is recorded as `dirty`, and the book's test
refuses a dirty or unknown commit.
"""
import argparse, datetime, json, os, platform, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
RESULTS = ROOT / "results" / "full"
MARK = (
    "<!-- results/full/{stem}.json: written by `python tools/run_full.py --render`; do not edit -->"
)


def git(*args) -> str | None:
    "The output of a git command in the repository, or None (no git, or no repository)"
    try:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def commit_info() -> dict:
    "The commit the chapters run at: {'commit': sha or None, 'dirty': bool or None}"
    sha = git("rev-parse", "HEAD")
    if sha is None:
        return {"commit": os.environ.get("TXBOOK_COMMIT") or None,
                "dirty": os.environ.get("TXBOOK_DIRTY", "") not in ("", "0")}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    # results/ aside: a run writes records as it goes
    return {"commit": sha, "dirty": bool(status)}



def bench_meta(script: str, argv: list[str]) -> dict:
    """What a bench record says about where it came from: script, command, commit, sources, date,
    machine"""
    import shlex
    import torch
    sys.path.insert(0, str(ROOT))
    from txbook.core import default_device
    name = Path(script).name
    cpu = platform.processor() or platform.machine()
    if os.path.exists('/proc/cpuinfo'):
        cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo')
                    if l.startswith('model name')), cpu)
    from records import source_hashes                   # tools/records.py: what the command runs
    dev = default_device()
    return {'script': 'bench/' + name, 'command': 'python bench/' + name + ' ' + shlex.join(argv),
            **commit_info(), 'sources': source_hashes('bench/' + name),
            'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
            'machine': {'cpu': cpu, 'cpu_count': os.cpu_count(), 'device': str(dev),
                        'gpu': torch.cuda.get_device_name(dev) if dev.type == 'cuda' else None,
                        'torch': torch.__version__, 'python': platform.python_version(),
                        'load_average_at_start': os.getloadavg()}}

def machine_info() -> dict:
    "Device, versions and the precision `fit` picks there (the chapters' default)"
    import torch
    sys.path.insert(0, str(ROOT))
    from txbook.core import default_device
    from txbook.amp import amp_dtype
    dev = default_device()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "CPU"
    amp = amp_dtype(dev)
    return {"device": f"{dev.type}: {name}", "torch": torch.__version__, "cuda": torch.version.cuda,
            "precision": {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(amp, "fp32"),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "alongside": os.environ.get("TXBOOK_ALONGSIDE") or None}   # other work on the device


def chapters(names) -> list[Path]:
    "Notebook paths for stems, names or paths; all chapters when `names` is empty"
    if not names: return sorted(NBS.glob("*.ipynb"))
    out = []
    for n in names:
        p = Path(n)
        p = p if p.suffix == ".ipynb" else NBS / f"{p.name}.ipynb"
        if not p.exists(): raise SystemExit(f"no chapter {n!r} (looked for {p})")
        out.append(p.resolve())
    return out


def execute(path: Path, results_file: Path, size: str, timeout: int, executed: Path | None) -> dict:
    "Execute one notebook in this process; returns {'status', 'wall_s', 'error'}"
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError
    # a kernel of its own over ipc: --jobs N start N at once
    from notebook_kernel import run_notebook
    os.environ.update(TXBOOK_SIZE=size, TXBOOK_RESULTS=str(results_file))
    for k in ("TXBOOK_QUICK", "IN_TEST"): os.environ.pop(k, None)
    nb = nbformat.read(path, as_version=4)
    t0, status, error = time.time(), "ok", None
    try:
        run_notebook(nb, path.parent, dict(os.environ), timeout, kernel_name="python3")
    except CellTimeoutError as e:
        status, error = "timeout", str(e)[-2000:]
    except CellExecutionError as e:
        status, error = "error", str(e)[-4000:]
    wall = time.time() - t0
    if executed is not None:
        executed.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, executed / path.name)
    return {"status": status, "wall_s": round(wall, 1), "error": error}


def run_one(path: Path, size: str, out: Path, timeout: int, jobs: int, executed: Path | None,
            meta: dict) -> dict:
    "Run one chapter in a child process (a hard time limit), write and return its record"
    with tempfile.TemporaryDirectory() as d:
        rf, status_file = Path(d) / "metrics.json", Path(d) / "status.json"
        cmd = [sys.executable, __file__, "--child", str(path), "--size", size, "--timeout",
               str(timeout), "--metrics-file", str(rf), "--status-file", str(status_file)]
        if executed is not None: cmd += ["--executed", str(executed)]
        t0 = time.time()
        try:
            subprocess.run(cmd, timeout=timeout + 60, check=False)
            run = (json.loads(status_file.read_text()) if status_file.exists()
                   else {"status": "error", "wall_s": None, "error": "the child process died"})
        except subprocess.TimeoutExpired:
            run = {"status": "timeout", "wall_s": round(time.time() - t0, 1),
                   "error": f"stopped after {timeout} s"}
        metrics = json.loads(rf.read_text()) if rf.exists() else {}
    rec = {"chapter": path.stem, **meta, "size": size, "jobs": jobs,
           "date": datetime.date.today().isoformat(), **run, "metrics": metrics}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{path.stem}.json").write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    print(f"{path.stem}: {rec['status']} in {rec['wall_s']} s, {len(metrics)} figures", flush=True)
    return rec


# ---- the "At full size" cell of a chapter ----
def render(rec: dict) -> str:
    "The Markdown of a chapter's 'At full size' cell for its results record"
    sys.path.insert(0, str(ROOT))
    from txbook.stats import format_value
    dev = rec["device"].split(": ", 1)[-1]
    head = ["### At full size", "", MARK.format(stem=rec["chapter"]), "",
            f"What this chapter printed when it ran at full size on one {dev} ({rec['precision']} "
            f"autocast, torch {rec['torch']}, CUDA {rec['cuda']}) on {rec['date']}, at commit "
            f"`{rec['commit'][:10]}`; the whole chapter took {rec['wall_s'] / 60:.1f} min"
            + _alongside(rec) + ". The numbers above are the quick CPU run's.", ""]
    rows = ["| figure | at full size |", "|---|---|"]
    rows += [f"| {k} | {format_value(v['value'], v['fmt'])} |" for k, v in rec["metrics"].items()]
    return "\n".join(head + rows)


def _alongside(rec: dict) -> str:
    "', with ... running on the same GPU' when the chapter shared the device, else ''"
    others = [f"{rec['jobs'] - 1} other chapters"] if rec["jobs"] > 1 else []
    if rec.get("alongside"): others.append(rec["alongside"])
    return f", with {' and '.join(others)} running on the same GPU" if others else ""


def full_size_cell(nb: dict, stem: str) -> dict | None:
    "The chapter's 'At full size' Markdown cell (found by its marker), or None"
    cells = [c for c in nb["cells"] if c["cell_type"] == "markdown"
             and MARK.format(stem=stem) in "".join(c["source"])]
    if len(cells) > 1: raise ValueError(f"{stem}: {len(cells)} 'At full size' cells, expected one")
    return cells[0] if cells else None


def render_all(results: Path) -> None:
    "Rewrite each chapter's 'At full size' cell from results/full/<chapter>.json"
    for f in sorted(results.glob("*.json")):
        rec = json.loads(f.read_text())
        path = NBS / f"{rec['chapter']}.ipynb"
        nb = json.loads(path.read_text())
        cell = full_size_cell(nb, rec["chapter"])
        if cell is None:
            raise SystemExit(f"{path.name} has no 'At full size' cell: add a Markdown cell holding "
                             f"{MARK.format(stem=rec['chapter'])}")
        text = render(rec).split("\n")
        cell["source"] = [l + "\n" for l in text[:-1]] + [text[-1]]
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        print(f"{path.name}: 'At full size' cell written from {f.relative_to(ROOT)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chapters", nargs="*", help="chapter stems or paths (default: all)")
    ap.add_argument("--size", default="full", choices=["quick", "smoke", "full"])
    ap.add_argument("--out", type=Path, default=RESULTS, help="where <chapter>.json goes")
    ap.add_argument("--jobs", type=int, default=1, help="chapters run at once")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per chapter")
    ap.add_argument("--executed", type=Path, help="also keep the executed notebooks here")
    ap.add_argument("--render", action="store_true",
                    help="write the chapters' 'At full size' cells")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--metrics-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--status-file", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.render: return render_all(a.out)
    if a.child:   # one chapter, in its own process
        st = execute(a.child, a.metrics_file, a.size, a.timeout, a.executed)
        a.status_file.write_text(json.dumps(st))
        return
    paths = chapters(a.chapters)
    meta = {**commit_info(), **machine_info()}
    print(f"{len(paths)} chapters at size {a.size}, {a.jobs} at a time, on {meta['device']} "
          f"({meta['precision']}), commit {meta['commit']}{' (dirty)' if meta['dirty'] else ''}",
          flush=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        recs = list(
            pool.map(lambda p: run_one(p, a.size, a.out, a.timeout, a.jobs, a.executed, meta),
                     paths))
    bad = [r["chapter"] for r in recs if r["status"] != "ok"]
    if bad:
        for r in recs:
            if r["status"] != "ok": print(f"--- {r['chapter']} ({r['status']}):\n{r['error']}")
        raise SystemExit(f"{len(bad)} of {len(recs)} chapters failed: {', '.join(bad)}")
    print(f"all {len(recs)} chapters ran; records in {a.out}")


if __name__ == "__main__":
    main()
