"""`tools/run_full.py` runs on the CPU: at smoke size (what CI can run), it writes a record per
chapter with the figures the chapter reported, marks a failing chapter as an error and exits
non-zero, and `--render` turns a record into the chapter's "At full size" cell.
"""
import json, os, subprocess, sys

import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import run_full  # noqa: E402
# runs tools/run_full.py, which executes notebooks: not in the fast path (`pytest -m "not slow"`)
pytestmark = pytest.mark.slow


def _notebook(path, *sources):
    cells = [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [],
         "source": s} for i, s in enumerate(sources)]
    cells.append({"cell_type": "markdown", "id": "full", "metadata": {},
                  "source": "### At full size\n\n" + run_full.MARK.format(stem=path.stem)
                  + "\n\nNo full-size run is recorded yet."})
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3"}},
                                "nbformat": 4, "nbformat_minor": 5}))
    return path


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k not in ("TXBOOK_RESULTS", "TXBOOK_SIZE")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(ROOT / "tools" / "run_full.py"), *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_smoke_run_records_the_reports_and_the_failures(tmp_path):
    good = _notebook(tmp_path / "good.ipynb",
                     "from txbook.core import size\nfrom txbook.stats import report\n"
                     "report('answer', [41.0, 43.0], '.1f')\n"
                     "report('size seen', size())")
    bad = _notebook(tmp_path / "bad.ipynb", "raise ValueError('planted')")
    out = tmp_path / "out"
    r = _run(good, bad, "--size", "smoke", "--out", out, "--jobs", "2", "--timeout", "120")
    assert r.returncode != 0 \
        and "1 of 2 chapters failed: bad" in r.stderr + r.stdout, r.stdout + r.stderr
    rec = json.loads((out / "good.json").read_text())
    assert rec["status"] == "ok" and rec["size"] == "smoke" and rec["jobs"] == 2
    assert rec["metrics"] == {"answer": {"value": [41.0, 43.0], "fmt": ".1f"},
                              "size seen": {"value": "smoke", "fmt": ".4g"}}
    assert rec["commit"] == subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                           capture_output=True, text=True).stdout.strip()
    failed = json.loads((out / "bad.json").read_text())
    assert failed["status"] == "error" and "planted" in failed["error"]


def test_render_writes_the_at_full_size_cell(tmp_path):
    rec = {"chapter": "x", "commit": "0123456789abcdef" * 2 + "01234567", "dirty": False,
           "device": "cuda: A GPU", "torch": "2.x", "cuda": "13.0", "precision": "bf16",
           "size": "full",
           "jobs": 3, "alongside": "a benchmark", "date": "2026-01-01", "status": "ok",
           "wall_s": 90.0, "metrics": {"accuracy": {"value": [0.9, 0.92, 0.94], "fmt": ".1%"}}}
    text = run_full.render(rec)
    assert "on one A GPU (bf16 autocast" in text and "`0123456789`" in text and "1.5 min" in text
    assert "with 2 other chapters and a benchmark running on the same GPU" in text
    assert text.endswith("| accuracy | 92.0% ± 2.0% (n = 3) |")
    nb = {"cells": [{"cell_type": "markdown", "source": ["### At full size\n", "\n",
                                                           run_full.MARK.format(stem="x")]}]}
    assert run_full.full_size_cell(nb, "x") is nb["cells"][0]
    nb["cells"].append(dict(nb["cells"][0]))
    with pytest.raises(ValueError, match="2 'At full size' cells"):
        run_full.full_size_cell(nb, "x")


def test_gpu_record_script_dry_run(tmp_path):
    """tools/gpu_record.sh, the one command for a GPU machine, runs here at smoke size and packs the
    records"""
    good = _notebook(tmp_path / "good.ipynb", "from txbook.stats import report\nreport('answer', "
                                              "42.0)")
    env = {k: v for k, v in os.environ.items() if k not in ("TXBOOK_RESULTS", "TXBOOK_SIZE")}
    env.update(SIZE="smoke", OUT=str(tmp_path / "out"), RECORDS=str(tmp_path / "records"),
               PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}")
    r = subprocess.run(["bash", str(ROOT / "tools" / "gpu_record.sh"), "run", "1", str(good)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(
        (tmp_path / "records" / "good.json").read_text())["metrics"]["answer"]["value"] == 42.0
    assert (tmp_path / "out" / "records.tar.gz").stat().st_size > 0 \
        and (tmp_path / "out" / "run.log").exists()
