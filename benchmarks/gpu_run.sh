#!/usr/bin/env bash
# The GPU checks and tables in one command, for one call on a lent machine (each stage within
# its own time limit; logs and JSON under $OUT, default ./gpu_out):
#
#   bash benchmarks/gpu_run.sh checks          # build the extension, tests/gpu, memcheck
#   bash benchmarks/gpu_run.sh table [KIT]     # FlashInfer from KIT (a copy of its wheel kit:
#                                              # fi_stripped.tar.xz + wheels/), warmed, then
#                                              # attention_gpu and norm_act_quant_gpu
#   bash benchmarks/gpu_run.sh prefill [KIT]   # the attention table's prefill rows only, with
#                                              # FlashInfer's two FA3 kernels from KIT
#   bash benchmarks/gpu_run.sh fast            # fast-mode numerics and time split
#   bash benchmarks/gpu_run.sh decode-ab [KIT] # decode configurations against each other and
#                                              # XQA (benchmarks/decode_config_ab.py)
#
# Stages can be combined: `checks fast` (about 4-5 minutes on an H100) fits one 10-minute
# call, `table KIT` (about 4-7 minutes, FlashInfer's first build included) the next. Without
# KIT (or with a FlashInfer that does not import) the attention table has no FlashInfer
# columns. With GPU_WANT set (e.g. GPU_WANT=H200) the run stops at once, exit status 3, on a
# card whose name does not contain it: a lent machine of another kind costs only its start.
set -uo pipefail
cd "$(dirname "$0")/.."
for stage in "$@"; do
    case "$stage" in
        checks | table | prefill | fast | decode-ab) ;;
        *) [ -d "$stage" ] || {
            echo "gpu_run: unknown stage '$stage' (checks, table [KIT], prefill [KIT], fast," \
                "decode-ab [KIT])"
            exit 2
        } ;;
    esac
done
[ $# -gt 0 ] || { sed -n 2,19p "$0"; exit 2; }
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s)
say() { echo "[gpu_run $(( $(date +%s) - T0 )) s] $*"; }
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) || exit 1
echo "$GPU"
if [ -n "${GPU_WANT:-}" ] && [[ "$GPU" != *"$GPU_WANT"* ]]; then
    echo "gpu_run: wanted a card named *$GPU_WANT*, got $GPU; nothing run"
    exit 3
fi

build() {
    timeout 300 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1
    say "extension build rc=$?"
}

checks() {
    build
    timeout 400 python3 -m pytest -q -n 8 -p no:cacheprovider tests/gpu > "$OUT/tests_gpu.log" 2>&1
    say "tests/gpu rc=$?: $(tail -1 "$OUT/tests_gpu.log")"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck \
        python3 tests/gpu/sanitize_kernels.py > "$OUT/memcheck.log" 2>&1
    say "memcheck rc=$?: $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
}

# FlashInfer from the kit $1 onto PYTHONPATH, then its kernels $2.. built (all without names)
peer() {
    local kit=$1 site=/tmp/flashinfer_site
    shift
    mkdir -p "$site"
    tar -xJf "$kit/fi_stripped.tar.xz" -C "$site" && python3 -m pip install -q --no-index \
        --no-deps --no-compile --no-cache-dir --target "$site" "$kit"/wheels/*.whl
    export PYTHONPATH=$PYTHONPATH:$site CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    export PATH=$CUDA_HOME/bin:$PATH
    export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer_ws
    timeout 420 python3 -m benchmarks.flashinfer_peer warm "$@"
    say "FlashInfer warm rc=$?"
}

# the extension, unless a stage before built it (a machine is fresh for each call)
built() {
    python3 -c "import graphfuse._C" 2> /dev/null || build
}

table() {
    built
    [ -n "${1:-}" ] && peer "$1"
    timeout 400 python3 -m benchmarks.attention_gpu --json "$OUT/attention_gpu.json" 2>&1 |
        grep -v Warning | tail -25
    say "attention table done"
    timeout 200 python3 -m benchmarks.norm_act_quant_gpu --json "$OUT/norm_act_quant_gpu.json" \
        2>&1 | tail -40
    say "norm / act table done"
}

prefill() {
    built
    [ -n "${1:-}" ] && peer "$1" prefill_fa3_bf16 prefill_fa3_fp8
    timeout 300 python3 -m benchmarks.attention_gpu --only prefill \
        --json "$OUT/attention_gpu_prefill.json" 2>&1 | grep -v Warning | tail -25
    say "prefill table done"
}

decode_ab() {
    built
    [ -n "${1:-}" ] && peer "$1" decode_xqa
    timeout 400 python3 -m benchmarks.decode_config_ab --json "$OUT/decode_config_ab.json" 2>&1 |
        grep -v Warning | tail -40
    say "decode configuration A/B done"
}

fast() {
    timeout 200 python3 -m benchmarks.fast_mode_numerics 2>&1 | tee "$OUT/fast_numerics.log"
    timeout 120 python3 -m benchmarks.fast_mode_split 2>&1 | tee "$OUT/fast_split.log"
    say "fast mode done"
}

while [ $# -gt 0 ]; do
    case "$1" in
        checks) checks ;;
        fast) fast ;;
        table) if [ -n "${2:-}" ] && [ -d "$2" ]; then table "$2"; shift; else table; fi ;;
        prefill) if [ -n "${2:-}" ] && [ -d "$2" ]; then prefill "$2"; shift; else prefill; fi ;;
        decode-ab) if [ -n "${2:-}" ] && [ -d "$2" ]; then decode_ab "$2"; shift; else decode_ab; fi ;;
    esac
    shift
done
