#!/usr/bin/env bash
# Record every page at full size on one GPU machine that has no internet, in one call (issue 32).
#
#   bash tools/gpu_record.sh pack          # here, with the package registry: wheels into .whl/, data into shared/
#   bash tools/gpu_record.sh run [JOBS]    # there: install the wheels, run every page at full size, JOBS at once
#                                            (default 4), render the "At full size" cells, copy the records to $OUT
#   SIZE=smoke bash tools/gpu_record.sh run 2 01_attention b_stats   # the same on a CPU, cut budgets (tests)
#
# What travels: the working tree (the notebooks, txbook/, tools/), shared/data (the datasets, which `run` names
# to txbook.data with TXBOOK_DATA), and .whl/ (carry it). The GPU image has torch, numpy, matplotlib, einops,
# safetensors, transformers, sacrebleu, scikit-learn and timm; the wheels add what the pages and nbclient need besides.
# (pooch, which txbook.data imports, and requests under it are carried: the image may lack them.)
# A page's record is results/full/<page>.json (tools/run_full.py); the records and the rendered notebooks come back
# as two files under $OUT: records.tar.gz and rendered.patch (apply with `git apply`).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
shift || true

WHEELS="fastcore fastprogress num2words nbclient nbformat fastjsonschema jsonschema jsonschema-specifications
referencing rpds-py jupyter_client jupyter_core platformdirs traitlets pyzmq tornado ipykernel comm debugpy ipython
decorator jedi parso matplotlib-inline pexpect ptyprocess prompt_toolkit wcwidth stack_data asttokens executing
pure_eval nest_asyncio ipython_pygments_lexers
pooch requests urllib3 idna charset-normalizer certifi packaging"

case "$what" in
pack)
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  grep -qx '/shared/' .git/info/exclude 2>/dev/null || echo /shared/ >> .git/info/exclude
  rm -rf .whl && mkdir -p .whl
  for w in $WHEELS; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform any -d .whl "$w"
  done
  mkdir -p shared && rm -rf shared/data && cp -r ../shared/data shared/data
  du -sh .whl shared/data
  echo "packed: call the device with carry ['.whl'] and the command: bash tools/gpu_record.sh run 4"
  ;;
run)
  jobs=${1:-4}
  shift || true
  size=${SIZE:-full}
  if ! python3 -c 'import nbclient, fastcore, fastprogress, num2words, pooch' 2>/dev/null; then
    # the GPU machine: nothing can be fetched there, the carried wheels hold what its image lacks
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    python3 -m ipykernel install --user --name python3 >/dev/null
  fi
  export TXBOOK_DATA=${TXBOOK_DATA:-$PWD/shared/data}   # the carried datasets (txbook.data does not search)
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TXBOOK_COMMIT=${TXBOOK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
  out=${OUT:-/tmp/txbook-gpu-record}
  mkdir -p "$out"
  records=${RECORDS:-results/full}
  status=0
  python3 tools/run_full.py --size "$size" --jobs "$jobs" --timeout 300 --out "$records" "$@" 2>&1 \
    | tee "$out/run.log" || status=$?
  if [ "$size" = full ]; then python3 tools/run_full.py --render --out "$records"; fi
  tar -czf "$out/records.tar.gz" "$records"
  git diff -- nbs > "$out/rendered.patch" 2>/dev/null || true
  echo "records in $out/records.tar.gz (and the run's log in $out/run.log)"
  exit $status
  ;;
*)
  echo "usage: bash tools/gpu_record.sh pack | run [JOBS] [PAGES...]" >&2
  exit 2
  ;;
esac
