#!/usr/bin/env bash
# jNO column for crux-bench: its own venv with crux and the jno extra, the reference problems through jNO's
# API as the jNO backend builds them (cruxlab.backends.jno.problems).
#
#   bash scripts/bench_jno.sh                 # writes jno.json (override: JNO_OUT=path)
#   bash scripts/bench_jno.sh --quick
#   crux-bench --jno jno.json                 # merge as jNO rows (measured in another process, so not interleaved)
#
# Environment: JNO_VENV (default /tmp/jno-venv), JNO_VERSION (default 0.4.2, the version of the jNO figures in
# docs/BENCHMARK.md), JNO_OUT (default jno.json). Extra arguments go to
# python -m cruxlab.bench.jno_problems.
# jNO 0.4.2 needs jax >=0.10.1,<0.11 and pulls gmsh, fenics-basix, blackjax, equinox, folx, ... (about 1 GB).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${JNO_VENV:-/tmp/jno-venv}"
version="${JNO_VERSION:-0.4.2}"
out="${JNO_OUT:-jno.json}"

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import jno" 2>/dev/null; then
    # Ask the index for the distribution alone first, so a refusal says so instead of failing mid-install.
    probe="$(mktemp -d)"
    if ! python3 -m pip download --no-deps --quiet -d "$probe" "jax-numerical-operators==$version"; then
        echo "bench_jno.sh: PyPI did not serve jax-numerical-operators==$version; no jNO column" >&2
        rm -rf "$probe"
        exit 3
    fi
    rm -rf "$probe"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e "$here/..[jno]" "jax-numerical-operators==$version"
fi

"$venv/bin/python" -c "import jno, jax; print('jNO', __import__('importlib.metadata').metadata.version('jax-numerical-operators'), 'jax', jax.__version__)" 2>/dev/null
"$venv/bin/python" -m cruxlab.bench.jno_problems --out "$out" "$@"
echo "wrote $out (merge: crux-bench --jno $out)" >&2
