"Every notebook runs top to bottom under nbdev-test: its assertions are the package's unit tests."
import subprocess, sys, time
from pathlib import Path

import pytest
from conftest import NBS, ROOT

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_notebook(path):
    t0 = time.time()
    r = subprocess.run([str(BIN / "nbdev-test"), str(path.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True)
    print(f"{path.name}: {time.time() - t0:.1f}s")
    assert r.returncode == 0, f"nbdev-test failed on {path.name}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
