"""The full-size results the book shows: `results/full/<chapter>.json`, written by
`tools/run_full.py` on a GPU.

Each record must parse, come from a finished full-size run on a CUDA device, name a commit that
exists in this repository with a clean tree, and the chapter's "At full size" cell (required when
the record holds figures) must be exactly what `tools/run_full.py --render` makes of it (so nobody
edits a figure by hand, and a new record is not left unrendered). A chapter without a record says so
in that cell ("No full-size run is recorded yet.").
"""
import json, subprocess, sys

import pytest
from helpers import NBS, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import run_full  # noqa: E402
from txbook.stats import format_value  # noqa: E402

RECORDS = sorted((ROOT / "results" / "full").glob("*.json"))
KEYS = {"chapter", "commit", "dirty", "device", "torch", "cuda", "precision", "size", "jobs",
        "date", "status", "wall_s", "metrics"}


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def _source(cell) -> str:
    return "".join(cell["source"])


@pytest.mark.needs_gpu_records
@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_record_is_a_finished_full_size_gpu_run(path):
    rec = json.loads(path.read_text())
    assert KEYS <= rec.keys(), f"{path.name} lacks {sorted(KEYS - rec.keys())}"
    assert rec["chapter"] == path.stem and (ROOT / "nbs" / f"{path.stem}.ipynb").exists()
    assert rec["status"] == "ok", (
        f"{path.name}: the run ended with {rec['status']}: {rec.get('error')}"
    )
    assert rec["size"] == "full" \
        and rec["device"].startswith("cuda: "), (rec["size"], rec["device"])
    assert rec["cuda"] and rec["precision"] in ("bf16", "fp16", "fp32")
    assert rec["dirty"] is False, f"{path.name} comes from a tree with uncommitted changes"
    for name, m in rec["metrics"].items():
        assert set(m) == {"value", "fmt"}, name
        format_value(m["value"], m["fmt"])   # a figure that cannot be shown fails here


@pytest.mark.needs_gpu_records
@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_record_names_a_commit_that_exists(path):
    sha = json.loads(path.read_text())["commit"]
    assert sha and len(sha) == 40, f"{path.name}: commit {sha!r} is not a full hash"
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone cannot tell whether an old commit exists")
    r = _git("cat-file", "-e", f"{sha}^{{commit}}")
    assert r.returncode == 0, f"{path.name} names commit {sha}, which is not in this repository"


@pytest.mark.parametrize("path", [p for p in NBS if p.name[0].isdigit()], ids=lambda p: p.stem)
def test_at_full_size_cell_matches_its_record(path):
    nb = json.loads(path.read_text())
    cell = run_full.full_size_cell(nb, path.stem)
    rec_path = ROOT / "results" / "full" / f"{path.stem}.json"
    if cell is None:   # a chapter that reports no figures (no experiment) needs no table
        assert not rec_path.exists() or not json.loads(rec_path.read_text())["metrics"], \
            f"{rec_path.name} holds figures but {path.name} has no 'At full size' cell to show them"
        return
    if not rec_path.exists():
        assert _source(cell).rstrip().endswith("No full-size run is recorded yet."), \
            f"{path.name}: the 'At full size' cell shows figures but there is no {rec_path.name}"
        return
    want = run_full.render(json.loads(rec_path.read_text()))
    assert _source(cell) == want, (
        f"{path.name}: the 'At full size' cell is not its record rendered: run tools/run_full.py "
        "--render"
    )
