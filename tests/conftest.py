import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))  # the book's Sphinx extension
