"""Where CI's time went: the split (install, quick pass, smoke pass, the rest of the tests, book)
and the ten slowest pages of each pass, read from pytest's JUnit XML report.

    python tools/ci_split.py REPORT.xml --install S --test S --book S --pdf S

`--install/--test/--book/--pdf` are the wall-clock seconds `.ci/run` measured around `make install`,
`make test`, `make book` and `make pdf`. Inside `make test` the report gives each test's own time;
when pytest runs tests side by side (`-n`), the passes overlap, so their sums add up to more than
the wall time, and both are printed. Last, a fixed piece of work timed on one thread
(`machine_reference`): the same CI takes minutes more on a slower machine, so a CI time is read
beside it."""
import argparse, collections, time, xml.etree.ElementTree as ET

PASSES = {"tests.test_notebooks": "quick pass", "tests.test_colab": "smoke pass (Colab simulation)"}


def read_report(path):
    "[(pass name, test id, seconds)] for every test case in the JUnit XML at `path`"
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        module = cls if cls.startswith("tests.test_") else ".".join(cls.split(".")[:2])
        rows.append(
            (PASSES.get(module, "the rest"), f"{cls}::{name}", float(case.get("time") or 0)))
    return rows


def machine_reference(reps: int = 3, n: int = 200) -> float:
    """Seconds for `n` float32 matrix products of 1024 x 1024 on one thread, the median of `reps`:
    the same work on every machine, so that CI times from different days can be compared"""
    import torch
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n): a @ a
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    for k in ("install", "test", "book", "pdf"):
        ap.add_argument(f"--{k}", type=float, default=float("nan"))
    a = ap.parse_args()
    rows = read_report(a.report)
    by = collections.defaultdict(float)
    for p, _, s in rows: by[p] += s
    m = lambda s: f"{s / 60:5.1f} min"
    print("== CI split (wall clock)")
    print(f"   install            {m(a.install)}")
    print(f"   make test          {m(a.test)}   (test time summed per pass below; passes run side "
          "by side)")
    for p in ("quick pass", "smoke pass (Colab simulation)", "the rest"):
        print(f"     {p:<32} {m(by[p])}")
    print(f"   make book          {m(a.book)}")
    print(f"   make pdf           {m(a.pdf)}")
    print(f"   total              {m(a.install + a.test + a.book + a.pdf)}")
    for p in ("quick pass", "smoke pass (Colab simulation)"):
        print(f"== the ten slowest pages, {p}")
        for _, name, s in sorted((r for r in rows if r[0] == p), key=lambda r: -r[2])[:10]:
            print(f"   {s:6.1f} s  {name.split('[')[-1].rstrip(']')}")
    print(f"== machine reference: {machine_reference():.2f} s for 200 float32 matrix products of "
          "1024 x 1024 on one thread (median of 3), to read the times above beside")


if __name__ == "__main__":
    main()
