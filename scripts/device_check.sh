#!/usr/bin/env bash
# The device check: crux's claim sweeps and their reports, the benchmark and the capacity search, on the machine's
# accelerator (a TPU or a GPU), installed from crux's own wheel; everything that comes back under $OUT.
#
#   bash scripts/device_check.sh --prepare                 # here (network): wheels a bare device image lacks -> .wheels/
#   bash scripts/device_check.sh --prepare --jno           # ... and jNO's -> .wheels/jno/ (the steps NAME-jno, fused)
#   bash scripts/device_check.sh [STEP ...]                # on the device machine ($OUT set): every step, or those named
#   OUT=/tmp/x bash scripts/device_check.sh --dry-run [STEP ...]   # the same path on a CPU with tiny settings
#
# Steps: the claim sweeps (accumulation inner_steps checkpoint offload substeps phases resume precision devices),
# each followed by its report; advise (crux-advise: the options to use on poisson1d on this machine, with
# $ARGS_advise appended, e.g. "--budget 300 problem=heat1d"; its report and advice in reports/advise); functions (scripts/function_accuracy.py: the float32 accuracy of the activations and
# of matrix products, on the accelerator and on the CPU); bench (crux-bench, with $BENCH_ARGS appended; with
# BENCH_JNO=1, after `--prepare --jno`, jNO's rows of the standard problem too, its time to a first update among them);
# anatomy (crux-bench anatomy --profile: the device's time per instruction of a fused update, crux beside
# the hand-written scans, on the problems of $ANATOMY_PROBLEMS, default small,standard; square is the 2-D one;
# $ANATOMY_ARGS appended, e.g. ANATOMY_PROBLEMS= ANATOMY_ARGS="--suite burgers --precision highest");
# capacity (scripts/capacity.py, with $CAPACITY_ARGS appended; at most $CAPACITY_S
# seconds, default 300); scale (scripts/memory_at_scale.py, with $SCALE_ARGS appended, at most $SCALE_S seconds,
# default 300: checkpoint_gradients' forms and offload_data at the chip's sizes); compile (crux-bench compile
# --rounds $COMPILE_ROUNDS, default 1, and $COMPILE_ARGS: a first solve()'s compile with checkpoint_gradients and
# with every memory option against the plain update's, Adam and L-BFGS, each in a fresh process); suite (crux-bench
# suite with $SUITE_ARGS: crux against the hand-written scan on the suite's shapes, compile and speed; suite.json); cache
# (scripts/measure_sweep.py: the $CACHE_SWEEP sweep, default accumulation, run twice into a fresh compilation cache, each run's compile
# seconds and its first jobs' compile share, the second run's compile over the first's; $CACHE_ARGS=--compile-log
# adds where each run's compile seconds went); command (crux-bench command: `crux-sweep $COMMAND_SWEEP`, default
# "accumulation solver.epochs=10", $COMMAND_REPEATS times, default 3, each in a fresh process into a fresh store,
# and where its time goes outside its jobs' training, with $COMMAND_ARGS; command.json); NAME-jno, any claim sweep with
# backend=jno (precision-jno on jNO's built-in problems, poisson1d and mixed_poisson1d), and fused
# (crux-bench fused: crux and jNO at K = 1, 10, 100, 1000 updates a call), both after `--prepare --jno`. A
# sweep step takes more overrides from $ARGS_<step> (dashes as underscores: ARGS_inner_steps_jno="repeat=0,1").
# The bench times the hand-written scans unrolled four to a turn too: on a TPU
# that form is the fastest hand-written one, the baseline crux is held to. `devices` runs only where
# JAX sees more than one device; REPORTS=0 leaves the reports to be made from the returned store. A step that
# fails or runs out of its time limit does not stop the next; the log says which. One command on a device machine
# may be limited (10 minutes on the lent TPU; BUDGET_S, default 570 s): name the steps to run a part, and the next
# command the rest. A sweep longer than one command runs over several: $STORE_IN names a folder holding the
# mlflow.db.gz and reports.tgz an earlier command returned, unpacked into the store before the steps, and $RESUME
# names the sweep steps that continue the newest sweep of their name in it (`crux-sweep NAME --resume`: the jobs
# that did not finish, the interrupted one again) rather than start a new one:
#
#   RESUME="precision" STORE_IN=.device-in bash scripts/device_check.sh precision   # .device-in named in carry
#
# The device image is expected to have Python 3.11 with JAX for its accelerator, numpy and scipy on PYTHONPATH.
# `--prepare` builds crux's wheel into .wheels/ and downloads into .wheels/deps/ the wheels such an image lacks
# (Hydra, OmegaConf, MLflow and their pure-Python needs; antlr4 4.9.3 is published only as source, so it is built).
# The packages a TPU image's own index holds (/opt/pypi/simple: optax, matplotlib, pandas, ...) are installed from
# it there; `--prepare --full` downloads them too, into .wheels/index/, for an image without such an index.
# `--prepare --jno` adds jNO (PyPI jax-numerical-operators, the version installed here, else $JNO_VERSION) and what
# it needs that neither the image nor its index holds, into .wheels/jno/ (about 8 MB: jNO, equinox, folx, foundax,
# paramax, blackjax, matfree, pygmsh); jNO's other needs (tensorstore, orbax-checkpoint, gmsh, ...) come from the
# index there (with --full, into .wheels/jno-index/). $JNO_LEAVE_OUT names what is not carried (default
# fenics-basix: jNO's finite-element bases, 13 MB, which neither `import jno` nor a PINN's solve() loads; with it
# the wheels and a checkout pass the 64 MiB a call to the lent TPU machine may carry).
# Everything installs under /tmp and is appended to PYTHONPATH, never put before it: the image's own JAX stays
# first. crux runs from its wheel in a folder outside the checkout (its configs, crux.conf and crux.sweeps, exist
# only in an installed crux). One process holds the accelerator at a time: the steps run one after another, and
# the sweeps use Hydra's in-process launcher. The store is SQLite under a fixed path (/tmp/crux-device-check, or $CRUX_DEVICE_CHECK_DIR), so
# that the returned mlflow.db.gz and reports.tgz, unpacked there on another machine, make the same reports.
#
# $OUT receives device_check.log, environment.txt, bench.md, bench.json, capacity.json, scale.json, fused.md,
# fused.json, mlflow.db.gz and reports.tgz (report folders, the MLflow artifacts, Hydra's multirun logs, the
# anatomy's tables, HLO and per-instruction times): at most 8 files come back from the lent TPU machine, so name
# the steps of one command so that no more are written.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python=$(command -v "${PYTHON:-python3}") || { echo "no ${PYTHON:-python3} here" >&2; exit 2; }
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"  # absolute (not resolved): the steps run elsewhere
sweeps=(accumulation inner_steps checkpoint offload substeps phases resume precision devices)
jno_steps=(accumulation-jno inner_steps-jno checkpoint-jno offload-jno substeps-jno phases-jno resume-jno
           precision-jno fused)  # devices: the jNO backend trains on one device
every_step=("${sweeps[@]}" advise functions bench anatomy capacity scale compile suite cache command)
platform_flags=(--only-binary=:all: --python-version 3.11 --implementation cp --platform any)
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64; do
    platform_flags+=(--platform "$tag")
done
present=(jax jaxlib numpy scipy ml-dtypes opt-einsum)  # the image's own: never carried
# normalised NAME of a wheel FILE (as the index spells it)
wheel_name() { basename "$1" | cut -d- -f1 | tr '[:upper:]_' '[:lower:]-'; }
listed() { local name=$1; shift; printf '%s\n' "$@" | grep -qx "$name"; }

prepare() {  # $1: "full" to carry the index's packages too
    local wheels="$root/.wheels" index_names
    index_names=(optax absl-py matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil six
                 packaging pandas tzdata pyarrow joblib pyyaml tqdm narwhals scikit-learn threadpoolctl)
    rm -rf "$wheels" && mkdir -p "$wheels/deps" || return 1
    # built as pip builds any package, in an environment of its own with the setuptools pyproject.toml asks for:
    # the venv of the README's install has an older setuptools and no `wheel` (no bdist_wheel) of its own
    "$python" -m pip wheel -q --no-deps -w "$wheels" "$root" || return 1
    "$python" -m pip wheel -q --no-deps -w "$wheels/deps" "antlr4-python3-runtime==4.9.3" || return 1
    local pins
    pins=$("$python" - <<'EOF'
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in
      ("mlflow", "hydra-core", "omegaconf", "hydra-joblib-launcher", "optax", "matplotlib", "tqdm")))
EOF
) || return 1
    # shellcheck disable=SC2086
    "$python" -m pip download -q "${platform_flags[@]}" --find-links "$wheels/deps" -d "$wheels/deps" $pins \
        || return 1
    # What the image has (JAX and its numerics) never travels; what its index has travels only with --full.
    local name file
    [[ "${1:-}" == full ]] && mkdir -p "$wheels/index"
    for file in "$wheels"/deps/*.whl; do
        name=$(wheel_name "$file")
        if listed "$name" "${present[@]}"; then
            rm "$file"
        elif listed "$name" "${index_names[@]}"; then
            if [[ "${1:-}" == full ]]; then mv "$file" "$wheels/index/"; else rm "$file"; fi
        fi
    done
    printf '%s\n' "${index_names[@]}" > "$wheels/index-names.txt"
    echo "$(find "$wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$wheels" | cut -f1) in $wheels"
}

prepare_jno() {  # after prepare; $1: "full" to carry the index's packages too
    local wheels="$root/.wheels" jno_index jno_version name file left_out=() carried=()
    for file in "$wheels"/deps/*.whl; do carried+=("$(wheel_name "$file")"); done
    # jNO's needs that the TPU image's own index holds (read there, 2026-12): installed from it, not carried
    jno_index=(tensorstore orbax-checkpoint meshio shapely einops cloudpickle jaxtyping wadler-lindig gmsh
               typing-extensions absl-py etils msgpack prometheus-client pyyaml aiofiles protobuf humanize
               simplejson psutil uvloop fsspec zipp rich pygments markdown-it-py mdurl optax)
    read -ra left_out <<< "${JNO_LEAVE_OUT-fenics-basix}"
    jno_version=$("$python" -c "from importlib.metadata import version; print(version('jax-numerical-operators'))" \
                  2> /dev/null) || jno_version=${JNO_VERSION:-0.4.2}
    rm -rf "$wheels/jno" "$wheels/jno-index" && mkdir -p "$wheels/jno" || return 1
    "$python" -m pip download -q "${platform_flags[@]}" -d "$wheels/jno" "jax-numerical-operators==$jno_version" \
        || return 1
    [[ "${1:-}" == full ]] && mkdir -p "$wheels/jno-index"
    for file in "$wheels"/jno/*.whl; do
        name=$(wheel_name "$file")
        if listed "$name" "${present[@]}" "${left_out[@]}" "${carried[@]}"; then
            rm "$file"  # the image's, left out, or carried with crux already
        elif listed "$name" "${jno_index[@]}"; then
            if [[ "${1:-}" == full ]]; then mv "$file" "$wheels/jno-index/"; else rm "$file"; fi
        fi
    done
    printf '%s\n' "${jno_index[@]}" > "$wheels/jno-index-names.txt"
    echo "jNO $jno_version: $(find "$wheels/jno" -name '*.whl' | wc -l) wheels, $(du -sh "$wheels/jno" | cut -f1) in" \
         "$wheels/jno${left_out[*]:+ (left out: ${left_out[*]})}; all: $(du -sh "$wheels" | cut -f1)"
}

if [[ "${1:-}" == "--prepare" ]]; then
    shift
    full="" jno=0
    for flag in "$@"; do
        case $flag in
            --full) full=full ;;
            --jno) jno=1 ;;
            *) echo "--prepare takes --full and --jno, not '$flag'" >&2; exit 2 ;;
        esac
    done
    prepare "$full" || exit
    (( jno )) && { prepare_jno "$full" || exit; }
    exit 0
fi

dry=0
if [[ "${1:-}" == "--dry-run" ]]; then
    dry=1
    shift
fi
chosen=("$@")
(( ${#chosen[@]} )) || chosen=("${every_step[@]}")
for name in "${chosen[@]}"; do
    if ! listed "$name" "${every_step[@]}" "${jno_steps[@]}"; then
        echo "unknown step '$name'; choose among: ${every_step[*]} ${jno_steps[*]}" >&2
        exit 2
    fi
    [[ $name == *-jno || $name == fused ]] && export CHECK_JNO=1  # the environment names jNO's version too
done
: "${OUT:?set OUT to the folder that comes back}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# A fixed folder: the store's artifact paths must mean the same on the machine that makes the reports again.
store=${CRUX_DEVICE_CHECK_DIR:-/tmp/crux-device-check}
rm -rf "$store" && mkdir -p "$store/work"
work="$store/work"
if [[ -n "${STORE_IN:-}" ]]; then  # an earlier command's store, where it was: its artifact paths mean the same
    [[ -f "$STORE_IN/mlflow.db.gz" ]] || { echo "STORE_IN=$STORE_IN holds no mlflow.db.gz" >&2; exit 2; }
    gunzip -c "$STORE_IN/mlflow.db.gz" > "$store/mlflow.db" || exit 1
    if [[ -f "$STORE_IN/reports.tgz" ]]; then
        tar xzf "$STORE_IN/reports.tgz" -C "$work" || exit 1
        [[ -d "$work/mlartifacts" ]] && mv "$work/mlartifacts" "$store/mlartifacts"
    fi
fi
exec > >(tee -a "$OUT/device_check.log") 2>&1

start=$(date +%s)
budget=${BUDGET_S:-$(( dry ? 1800 : 570 ))}
left() { echo $(( budget - ($(date +%s) - start) )); }

# step NAME MIN_S MAX_S COMMAND...: run with the time left as its limit (at least MIN_S, at most MAX_S where MAX_S
# is not 0), log status and seconds.
step() {
    local name=$1 floor=$2 most=$3 limit t0 status
    shift 3
    limit=$(left)
    (( most > 0 && limit > most )) && limit=$most
    if (( limit < floor )); then
        echo "== $name: skipped, ${limit} s left of the budget and it needs at least ${floor} s"
        return 0
    fi
    echo "== $name (limit ${limit} s): $*"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@"
    status=$?
    echo "== $name: exit $status after $(( $(date +%s) - t0 )) s$( ((status == 124)) && echo ' (time limit)')"
}

# -- install: appended to PYTHONPATH, crux from its wheel into a folder of its own ------------------------------
install() {  # TARGET WHEEL...
    local target=$1
    shift
    PIP_CONFIG_FILE=/dev/null "$python" -m pip install --isolated -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$target" "$@"
}
# from_index TARGET NAMES_FILE: the packages named in NAMES_FILE from the image's own index, all at once, else (one
# missing name fails them all) one by one, naming those it lacks
from_index() {
    local target=$1 names name
    mapfile -t names < "$2"
    index_install() {
        PIP_CONFIG_FILE=/dev/null "$python" -m pip install --isolated -q --only-binary=:all: --no-deps \
            --no-compile --no-cache-dir --index-url file:///opt/pypi/simple --target "$target" "$@"
    }
    if ! index_install "${names[@]}" 2> /dev/null; then
        for name in "${names[@]}"; do
            index_install "$name" 2> /dev/null || echo "the image's index has no $name"
        done
    fi
}
if compgen -G "$root/.wheels/crux-*.whl" > /dev/null; then
    install "$store/site-crux" "$root"/.wheels/crux-*.whl || echo "crux's wheel did not install (exit $?)"
    install "$store/site" "$root"/.wheels/deps/*.whl || echo "the wheels in .wheels/deps did not install (exit $?)"
    if compgen -G "$root/.wheels/index/*.whl" > /dev/null; then
        install "$store/site-index" "$root"/.wheels/index/*.whl || echo ".wheels/index did not install (exit $?)"
    elif [[ -d /opt/pypi/simple ]]; then
        from_index "$store/site-index" "$root/.wheels/index-names.txt"
    fi
    export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$store/site-crux:$store/site:$store/site-index"
    if compgen -G "$root/.wheels/jno/*.whl" > /dev/null; then  # jNO, after crux's: crux's pins come first
        install "$store/site-jno" "$root"/.wheels/jno/*.whl || echo "the wheels in .wheels/jno did not install (exit $?)"
        if compgen -G "$root/.wheels/jno-index/*.whl" > /dev/null; then
            install "$store/site-jno-index" "$root"/.wheels/jno-index/*.whl || echo ".wheels/jno-index did not install"
        elif [[ -d /opt/pypi/simple ]]; then
            from_index "$store/site-jno-index" "$root/.wheels/jno-index-names.txt"
        fi
        export PYTHONPATH="$PYTHONPATH:$store/site-jno:$store/site-jno-index"
    fi
    # Bytecode, written once here: where the image sets PYTHONDONTWRITEBYTECODE, a command would otherwise compile
    # every module it imports, each time (on the TPU machine 4-5 s of a sweep command's start, MLflow's 2.5 s of it)
    "$python" -m compileall -q -j 0 "$store"/site* > /dev/null || echo "compileall did not finish (exit $?)"
else
    echo "no .wheels/crux-*.whl (run --prepare first): crux, Hydra and MLflow must already be installed"
fi
cd "$work" || exit 1  # never the checkout: there `import crux` would find the source tree, without its configs
export MLFLOW_TRACKING_URI="sqlite:///$store/mlflow.db"
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false
export MPLBACKEND=Agg
export TQDM_DISABLE=1
export PYTHONUNBUFFERED=1

{
    date -u
    echo "mode: $( ((dry)) && echo dry-run || echo device); steps: ${chosen[*]}"
    echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
    git -C "$root" status --porcelain 2>/dev/null | head -20
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    "$python" - <<'EOF'
import importlib, platform
print("python", platform.python_version(), "on", platform.processor() or platform.machine(), "cores", __import__("os").cpu_count())
import os
from importlib.metadata import version
os.environ.setdefault("JNO_COMPILE_CACHE", "0")  # jNO's import would make a cache of its own in ~/.cache
names = ["jax", "jaxlib", "optax", "matplotlib", "numpy", "hydra", "omegaconf", "mlflow", "crux"]
for name in names + (["equinox", "jno"] if os.environ.get("CHECK_JNO") == "1" else []):
    try:
        module = importlib.import_module(name)
        found = version("jax-numerical-operators") if name == "jno" else getattr(module, "__version__", "?")
        print(name, found, module.__file__)
    except Exception as error:
        print(name, "MISSING:", type(error).__name__, error)
import jax
print("backend", jax.default_backend(), jax.devices())
stats = jax.devices()[0].memory_stats()
print("bytes_limit", stats and stats.get("bytes_limit"))
print("device_count", jax.device_count())
EOF
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
device_count=$(sed -n 's/^device_count //p' "$OUT/environment.txt")

# -- steps ----------------------------------------------------------------------------------------------------
# The dry run's settings: each sweep's own grid cut to one repeat and a few epochs, short timing budgets.
declare -A tiny=(
    [accumulation]="solver.epochs=10 repeat=0 gradient_draws=8"
    [inner_steps]="solver.epochs=20 solver.inner_steps=1,20 repeat=0 timing.budget_seconds=2"
    [checkpoint]="solver.epochs=10 model.depth=2 repeat=0 timing.budget_seconds=2"
    [offload]="solver.epochs=10 repeat=0"
    [substeps]="solver.epochs=10"
    [phases]="solver.epochs=20 phases.lbfgs.epochs=5 phases.soap.epochs=5"
    [resume]="repeat=0"
    [precision]="solver.epochs=100 solver.inner_steps=10 phases.lbfgs.epochs=10 repeat=0 timing.budget_seconds=2"
    [devices]="solver.epochs=10 repeat=0"
)
declare -A on_jno=(  # what a sweep needs on jNO beyond backend=jno
    [precision]="problem=poisson1d,mixed_poisson1d"  # jNO's built-in problems (heat1d is refused)
)

# sweep STEP NAME OVERRIDES...: crux-sweep NAME with the dry run's settings, OVERRIDES and $ARGS_<STEP>, then its
# report into reports/STEP (the latest sweep of each backend, side by side)
sweep() {
    local label=$1 name=$2 args_var="ARGS_${1//-/_}" resume=()
    shift 2
    listed "$label" ${RESUME:-} && resume=(--resume)
    # shellcheck disable=SC2086
    step "sweep $label" 30 0 "$python" -m cruxlab.commands.sweep "$name" $( ((dry)) && echo "${tiny[$name]}" ) "$@" \
        ${!args_var:-} "hydra.sweep.dir=$work/multirun/$label" "${resume[@]}"
    if [[ "${REPORTS:-1}" == 0 ]]; then
        echo "== report $label: left for later (REPORTS=0): crux-report $name, against the returned store"
    else
        step "report $label" 20 0 "$python" -m cruxlab.report "$name" --out "$work/reports/$label"
    fi
}
for name in "${chosen[@]}"; do
    case $name in
        advise)
            # shellcheck disable=SC2086
            step advise 60 0 "$python" -m cruxlab.commands.advise --out "$work/reports/advise" \
                $( ((dry)) && echo "--budget 16 solver.epochs=20 model.width=8 model.depth=1" ) ${ARGS_advise:-} \
                "hydra.sweep.dir=$work/multirun/advise" ;;
        functions)
            step functions 20 120 "$python" "$root/scripts/function_accuracy.py" --out "$work/function_accuracy.json" \
                $( ((dry)) && echo "--points 1001" ) ;;
        bench)
            # shellcheck disable=SC2086
            if (( dry )); then
                step bench 20 0 "$python" -m cruxlab.bench --quick --problems small --repeats 2 --out "$OUT" ${BENCH_ARGS:-}
            else
                jno_column=()
                if [[ "${BENCH_JNO:-0}" == 1 ]]; then  # jNO's rows (its time to a first update among them) first
                    step bench-jno 60 240 "$python" -m cruxlab.bench.jno_problems --quick --problems standard \
                        --out "$work/jno.json" && [[ -s "$work/jno.json" ]] && jno_column=(--jno "$work/jno.json")
                fi
                step bench 60 0 "$python" -m cruxlab.bench --problems standard,small,fusing,throughput \
                    --sizes 16384,65536 --widths 64,256 --peak-tflops "${PEAK_TFLOPS:-197}" --loop-forms unroll=4 \
                    --out "$OUT" "${jno_column[@]}" ${BENCH_ARGS:-}
            fi ;;
        anatomy)
            # shellcheck disable=SC2086
            step anatomy 60 240 "$python" -m cruxlab.bench anatomy --quick --profile --repeats "$( ((dry)) \
                && echo 1 || echo 3)" --problems "${ANATOMY_PROBLEMS-small,standard}" --out "$work/anatomy" \
                ${ANATOMY_ARGS:-} ;;
        compile)
            # shellcheck disable=SC2086
            step compile 60 0 "$python" -m cruxlab.bench compile --rounds "${COMPILE_ROUNDS:-1}" \
                $( ((dry)) && echo "--optimizers adam" ) ${COMPILE_ARGS:-} ;;
        suite)
            # shellcheck disable=SC2086
            step suite 60 0 "$python" -m cruxlab.bench suite --out "$OUT" \
                $( ((dry)) && echo "--shapes square --optimizers adam --rounds 1 --depths 10 --steps 20 --precisions highest" ) \
                ${SUITE_ARGS:-} ;;
        command)
            # shellcheck disable=SC2086
            step command 60 0 "$python" -m cruxlab.bench command --repeats "${COMMAND_REPEATS:-3}" ${COMMAND_ARGS:-} \
                --json "$work/command.json" crux-sweep ${COMMAND_SWEEP:-accumulation solver.epochs=10} \
                $( ((dry)) && echo "repeat=0 gradient_draws=8" ) ;;
        cache)
            # shellcheck disable=SC2086
            step cache 60 0 "$python" "$root/scripts/measure_sweep.py" --uri "$MLFLOW_TRACKING_URI" --sweeps 2 ${CACHE_ARGS:-} \
                "${CACHE_SWEEP:-accumulation}" "jax.compilation_cache_dir=$store/jax-cache" \
                $( ((dry)) && echo "${tiny[${CACHE_SWEEP:-accumulation}]}" ) ;;
        capacity)
            # shellcheck disable=SC2086
            if (( dry )); then
                step capacity 20 0 "$python" "$root/scripts/capacity.py" --budget-bytes 4194304 --out "$OUT/capacity.json" \
                    ${CAPACITY_ARGS:-}
            else
                step capacity 60 "${CAPACITY_S:-300}" "$python" "$root/scripts/capacity.py" --out "$OUT/capacity.json" \
                    ${CAPACITY_ARGS:-}
            fi ;;
        scale)
            # shellcheck disable=SC2086
            step scale 30 "${SCALE_S:-300}" "$python" "$root/scripts/memory_at_scale.py" --out "$OUT/scale.json" \
                ${SCALE_ARGS:-} ;;
        fused)
            # shellcheck disable=SC2086
            step fused 60 0 "$python" -m cruxlab.bench fused --out "$OUT" \
                $( ((dry)) && echo "--quick --problems small,own --repeats 1" ) ${FUSED_ARGS:-} ;;
        *-jno)
            # shellcheck disable=SC2086
            sweep "$name" "${name%-jno}" backend=jno ${on_jno[${name%-jno}]:-} ;;
        devices)
            if (( ${device_count:-1} < 2 )); then
                echo "== devices: skipped, JAX sees one device here"
                continue
            fi ;&
        *)
            sweep "$name" "$name" ;;
    esac
done

# -- pack: many files go into one archive, the store gzipped (files over 16 MB do not come back) ----------------
[[ -d "$store/mlartifacts" ]] && cp -r "$store/mlartifacts" "$work/"
tar czf "$OUT/reports.tgz" -C "$work" . 2> /dev/null || echo "tar failed"
[[ -f "$store/mlflow.db" ]] && gzip -c "$store/mlflow.db" > "$OUT/mlflow.db.gz"
echo "== done in $(( $(date +%s) - start )) s; files in $OUT:"
ls -la "$OUT"
