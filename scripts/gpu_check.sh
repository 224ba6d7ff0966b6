#!/usr/bin/env bash
# The device check: benchmark, inner_steps and accumulation sweeps on crux and on jNO, their reports (the two
# libraries side by side), the tracking share of a job at the device's speed; everything under $OUT.
#
#   bash scripts/gpu_check.sh                       # on the GPU machine (its run tool sets $OUT)
#   OUT=/tmp/x bash scripts/gpu_check.sh --dry-run  # the same path on a CPU with tiny settings (a smoke test)
#
# For a bare machine whose Python has JAX (CUDA), optax and matplotlib but not Hydra or MLflow: those come
# as wheels in .whl/ at the repo root and are installed into /tmp/site; jNO and the packages it adds (the jno
# extra, without jax/jaxlib) as wheels in .whl/jno/ (docs/jno.md says how to gather them). When jNO cannot be
# imported there (jNO 0.4.2 asks for jax < 0.11), the log says why and the jNO sweeps are skipped. Every step
# has a time limit taken from one budget (BUDGET_S, default 540 s: the whole check stays under 10 minutes; 900 s
# for the dry run on a small CPU), and a step that fails or runs out of time does not stop the next. At most 8 files come back, so $OUT holds
# exactly:
#   gpu_check.log   everything printed, with each step's exit status and seconds
#   environment.txt device, driver, versions
#   bench.md bench.json scaling.png   scripts/bench.py's tables (written after each problem)
#   anatomy.md      scripts/step_anatomy.py: kernels in a fused update's loop body, steps/s of crux variants
#                   (again with the loop kept in the CUDA graph: in the log and reports.tgz)
#   mlflow.db.gz    the MLflow store (MLFLOW_TRACKING_URI=sqlite:///$OUT/mlflow.db; gzipped: files over 16 MB
#                   do not come back, and the sweeps' histories make it about 20 MB)
#   reports.tgz     crux-report folders of both sweeps (crux and jNO side by side), the MLflow artifacts and
#                   Hydra's multirun logs
set -uo pipefail

dry=0
[[ "${1:-}" == "--dry-run" ]] && dry=1
: "${OUT:?set OUT to the folder that comes back}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
work="$(mktemp -d /tmp/gpu_check.XXXXXX)"  # everything with many files; tarred into reports.tgz at the end
exec > >(tee -a "$OUT/gpu_check.log") 2>&1

start=$(date +%s)
budget=${BUDGET_S:-$(( dry ? 900 : 540 ))}
left() { echo $(( budget - ($(date +%s) - start) )); }

# step NAME SHARE_OF_WHAT_IS_LEFT(%) MIN_S COMMAND...: run with a time limit, log status and seconds.
step() {
    local name=$1 share=$2 floor=$3
    shift 3
    local remaining limit t0 status
    remaining=$(left)
    limit=$(( remaining * share / 100 ))
    (( limit < floor )) && limit=$floor
    (( limit > remaining )) && limit=$remaining
    if (( limit < 5 )); then
        echo "== $name: skipped, budget spent"
        return 0
    fi
    echo "== $name (limit ${limit} s): $*"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@"
    status=$?
    echo "== $name: exit $status after $(( $(date +%s) - t0 )) s$( ((status == 124)) && echo ' (time limit)')"
    return 0
}

# -- environment ---------------------------------------------------------------------------------------------
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || echo "wheel install failed (exit $?)"
    export PYTHONPATH="/tmp/site:$root"
else
    (( dry )) || echo "no .whl/ beside the repo root: Hydra and MLflow must already be importable"
    export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
fi
if compgen -G ".whl/jno/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-jno \
        .whl/jno/*.whl || echo "jNO wheel install failed (exit $?)"
    export PYTHONPATH="$PYTHONPATH:/tmp/site-jno"  # after /tmp/site: the image's own packages come first
fi
# jNO's own cache and logs go where the sweeps' jobs put them (crux.backends.jno.job); this probe writes none.
if jno_problem=$(JNO_COMPILE_CACHE=0 JNO_LOG_DIR="$work/jno-probe" python3 -c "import jno" 2>&1); then
    jno=1
else
    jno=0
    echo "jNO cannot be imported here, so its sweeps are skipped: $(echo "$jno_problem" | tail -3)"
fi
export MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db"
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the sweeps' jobs and the benchmark share the device
export MPLBACKEND=Agg
export TQDM_DISABLE=1

{
    date -u
    echo "mode: $( ((dry)) && echo dry-run || echo device)"
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 - <<'EOF'
import importlib, platform
print("python", platform.python_version())
for name in ("jax", "jaxlib", "optax", "matplotlib", "numpy", "hydra", "omegaconf", "mlflow", "jno"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as error:
        print(name, "MISSING:", type(error).__name__, error)
import jax
print("backend", jax.default_backend(), jax.devices())
EOF
    git -C "$root" rev-parse HEAD 2>/dev/null
    git -C "$root" status --porcelain 2>/dev/null | head -20
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

# -- benchmark, sweeps, reports --------------------------------------------------------------------------------
# A fused loop runs from the host, one CUDA graph launch per update (the H200 trace in docs/gpu/: crux's
# launches left the GPU idle between updates). The anatomy runs again with XLA keeping the loop in the graph
# (CUDA conditional nodes), then unrolled into it; their tables are in the log and reports.tgz. A GPU flag is
# a no-op on a CPU.
graph_loop="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_enable_command_buffer=+WHILE"
if (( dry )); then
    step bench 60 30 python3 scripts/bench.py --quick --problems small,accumulation --repeats 3 --mlflow --out "$OUT"
    step anatomy 30 20 python3 scripts/step_anatomy.py --quick --out "$OUT"
    step "anatomy, loop in the graph" 30 20 env XLA_FLAGS="$graph_loop" python3 scripts/step_anatomy.py --quick \
        --out "$work/anatomy_graph_loop"
    step "sweep inner_steps" 50 20 python3 -m crux.commands.sweep inner_steps solver.epochs=20 solver.inner_steps=1,20 \
        repeat=0 "hydra.sweep.dir=$work/multirun/inner_steps"
    step "sweep accumulation" 60 20 python3 -m crux.commands.sweep accumulation solver.epochs=10 repeat=0 gradient_draws=8 \
        "hydra.sweep.dir=$work/multirun/accumulation"
    if (( jno )); then
        tiny=(model.width=8 model.depth=1 problem.n_interior=64 solver.epochs=10 repeat=0)
        step "sweep inner_steps on jNO" 50 30 python3 -m crux.commands.sweep inner_steps backend=jno "${tiny[@]}" \
            solver.inner_steps=1,10 "hydra.sweep.dir=$work/multirun/inner_steps_jno"
        step "sweep accumulation on jNO" 60 60 python3 -m crux.commands.sweep accumulation backend=jno "${tiny[@]}" \
            memory=b8,b8_acc4 gradient_draws=8 "hydra.sweep.dir=$work/multirun/accumulation_jno"
    fi
else
    # The device run: every problem; the tables are rewritten after each, so a time limit keeps what was done.
    step bench 55 60 python3 scripts/bench.py --problems standard,small,accumulation,scaling,laplacian \
        --repeats 3 --mlflow --out "$OUT"
    step anatomy 20 30 python3 scripts/step_anatomy.py --out "$OUT"
    step "anatomy, loop in the graph" 15 30 env XLA_FLAGS="$graph_loop" python3 scripts/step_anatomy.py \
        --out "$work/anatomy_graph_loop"
    step "anatomy, loop unrolled in the graph" 15 30 \
        env XLA_FLAGS="$graph_loop --xla_gpu_command_buffer_unroll_loops=true" python3 scripts/step_anatomy.py \
        --out "$work/anatomy_graph_unrolled"
    step "sweep inner_steps" 50 30 python3 -m crux.commands.sweep inner_steps "hydra.sweep.dir=$work/multirun/inner_steps"
    step "sweep accumulation" 60 30 python3 -m crux.commands.sweep accumulation "hydra.sweep.dir=$work/multirun/accumulation"
    if (( jno )); then
        step "sweep inner_steps on jNO" 45 30 python3 -m crux.commands.sweep inner_steps backend=jno \
            "hydra.sweep.dir=$work/multirun/inner_steps_jno"
        step "sweep accumulation on jNO" 80 30 python3 -m crux.commands.sweep accumulation backend=jno \
            "hydra.sweep.dir=$work/multirun/accumulation_jno"
    fi
fi
# What tracking adds to a job at the device's speed: scripts/measure_tracking.py's shares and parts, in the log.
if (( dry )); then
    step "tracking share" 30 30 python3 scripts/measure_tracking.py --jobs 2 \
        solver.epochs=200
else
    step "tracking share" 30 60 python3 scripts/measure_tracking.py --jobs 4
fi
step "report inner_steps" 50 30 python3 -m crux.report inner_steps --out "$work/reports/inner_steps"
step "report accumulation" 100 30 python3 -m crux.report accumulation --out "$work/reports/accumulation"

# -- pack: many files go into one archive ----------------------------------------------------------------------
if [[ -d "$OUT/mlartifacts" ]]; then  # crux.tracking puts artifacts beside a SQLite store
    mv "$OUT/mlartifacts" "$work/mlartifacts"
fi
tar czf "$OUT/reports.tgz" -C "$work" . 2> /dev/null || echo "tar failed"
[[ -f "$OUT/mlflow.db" ]] && gzip -f "$OUT/mlflow.db"
rm -rf "$work"
echo "== done in $(( $(date +%s) - start )) s; files in $OUT:"
ls -la "$OUT"
