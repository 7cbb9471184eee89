#!/usr/bin/env bash
# The GPU checks in one prepared call (issue 44): the tests/gpu tier, the GEMV autotune
# sweep, the copy bandwidth, benchmarks/engine.py's table (bf16 with CUDA graphs on and off,
# int8, int4, FP8 at batch 1/8/32/64), the decode step under torch.compile, benchmarks/gemv.py,
# the speculative verification cost, a real-vocabulary model through `ember serve` on the cuda
# backend, and a peer (transformers eager and torch.compile'd) on the same random Llama-3-8B
# shape. Each step has its own time limit, cut to what is left of the run's budget
# (GPU_CHECKS_BUDGET_S, default 450 s: the call fits in 8 minutes with the start-up), so one
# that hangs leaves the others their time. Each step's stdout goes to $OUT/steps/NAME.out and
# its exit status and seconds to NAME.rc; everything to $OUT/log (default build/gpu-checks);
# at the end benchmarks/gpu_summary.py writes the one JSON, $OUT/summary.json, and a copy
# named <gpu>-<date>.json for docs/notes/gpu-runs/.
#
#     bash benchmarks/gpu_checks.sh [step ...]
#     # steps: copy tests tune graphs bf16 int8 int4 fp8 compile gemv spec lookup serve peer
#     #        peer-eager llama
#     GPU_CHECKS_REHEARSAL=1 bash benchmarks/gpu_checks.sh   # every step, reduced, on a CPU
#
# The rehearsal runs each step end to end on this CPU in a few minutes: Triton in its
# interpreter (TRITON_INTERPRET=1, EMBER_KERNELS=triton), the tiny-llama shape (two small
# layers) for llama3-8b and its draft, batches 1 and 8, the serve step's tiny shape (with
# the real vocabulary), each limit x4, and the GPU tier byte-compiled but not run (it refuses
# to import without a GPU), so the GPU call cannot fail on a typo.
#
# Python packages the machine lacks travel as wheels in .whl/ (see docs/notes/gpu-checks.md).
# The llama step (llama.cpp's GPU backends on a random Llama-3-8B-shaped Q4_0 GGUF, by layers
# offloaded: benchmarks/gpu_offload.py) needs the portable llama-cpp-python wheel in .whl/ and,
# for CUDA, .whl/libggml-cuda.so.gz (packaging/llama_cpp_cuda.sh, gzipped: 40.6 MB for sm_90
# is 20.9 MB, and the wheel's 30 MB share the 64 MiB carried), put in its lib folder;
# it links the cuBLAS and CUDA runtime of torch's nvidia/cu13 wheels. llama.cpp's own
# llama-bench goes along as .whl/llama-bench.tgz (benchmarks/build_llama_bench.sh: the binary,
# libllama-bench-impl.so and libllama-common.so.0; 2 MB), and the vocabulary the random model
# gets as .whl/ggml-vocab-llama-bpe.gguf (from the sdist's models/). LLAMA_SHAPE,
# LLAMA_LAYERS and LLAMA_TOKENS shrink it for a rehearsal on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-checks}
STEPS_DIR="$OUT/steps"
mkdir -p "$STEPS_DIR"
LOG="$OUT/log"
export PYTHONUNBUFFERED=1
REHEARSAL=${GPU_CHECKS_REHEARSAL:-0}
BUDGET=${GPU_CHECKS_BUDGET_S:-450}
if [ "$REHEARSAL" = 1 ]; then
    PY=${PYTHON:-.venv/bin/python}
    export TRITON_INTERPRET=1 EMBER_KERNELS=triton
    export EMBER_HOME=${EMBER_HOME:-$(realpath -m "$OUT")/ember-home}  # never the user's data folder
    export PYTHONPATH="$PWD"
    SHAPE=tiny-llama DRAFT=tiny-llama BATCHES=1,8 SERVE_SHAPE=tiny
    ENGINE_STEPS="--steps 2" SPEC_STEPS=2 PEER_TOKENS=4,8 PEER_REPEAT=1 COPY_GIB=0.125
    GEMV_ARGS="--cpu-rehearsal" TUNE_ARGS="--cpu-rehearsal"
    # dynamo cannot trace Triton's interpreter (numpy pointer arithmetic): the compiled step
    # runs the plain-torch kernels here; on the GPU it traces the compiled Triton launches
    COMPILE_ENV="EMBER_KERNELS=torch"
    SCALE=4  # the step limits x4: the interpreter on 2 shared cores
    BUDGET=${GPU_CHECKS_BUDGET_S:-1500}
else
    PY=${PYTHON:-python3}
    unset TRITON_INTERPRET
    SHAPE=llama3-8b DRAFT=llama3.2-1b BATCHES=1,8,32,64 SERVE_SHAPE=${SERVE_SHAPE:-llama3.2-1b}
    ENGINE_STEPS="" SPEC_STEPS=10 PEER_TOKENS=16,80 PEER_REPEAT=2 COPY_GIB=2
    GEMV_ARGS="--rows 1,8,16" TUNE_ARGS="--rows 1,8" SCALE=1
fi
if [ "$REHEARSAL" != 1 ] && compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/ember-site .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/ember-site"
    if [ -f .whl/libggml-cuda.so.gz ] && [ -d /tmp/ember-site/llama_cpp/lib ]; then
        # through `ember cuda install --from`, as a user installs it (cuBLAS stays torch's,
        # on LD_LIBRARY_PATH below: the pack names no runtime wheels); the lib folder if not
        mkdir -p /tmp/cuda-pack && gunzip -c .whl/libggml-cuda.so.gz > /tmp/cuda-pack/libggml-cuda.so
        if "$PY" benchmarks/cuda_pack.py /tmp/cuda-pack 2>&1 | tee -a "$LOG" && \
           EMBER_HOME=/tmp/ember-gpu-home "$PY" -m app.cli cuda install --from /tmp/cuda-pack \
               2>&1 | tail -n 3 | tee -a "$LOG" && \
           [ -f /tmp/ember-gpu-home/llama-modules/cuda/libggml-cuda.so ]; then
            export EMBER_LLAMA_MODULES=/tmp/ember-gpu-home/llama-modules
        else
            echo "ember cuda install failed: the module goes in the lib folder" | tee -a "$LOG"
            cp /tmp/cuda-pack/libggml-cuda.so /tmp/ember-site/llama_cpp/lib/libggml-cuda.so
        fi
    fi
    if [ -f .whl/llama-bench.tgz ]; then  # llama-bench, libllama-bench-impl.so, libllama-common.so.0
        mkdir -p /tmp/llama-bench && tar -xzf .whl/llama-bench.tgz -C /tmp/llama-bench
    fi
elif [ "$REHEARSAL" != 1 ]; then
    export PYTHONPATH="$PWD"
fi
[ -x /tmp/llama-bench/llama-bench ] && LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama-bench}
XDIST=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 4")  # compile kernels in parallel
VOCAB=$( [ -f .whl/ggml-vocab-llama-bpe.gguf ] && echo --vocab .whl/ggml-vocab-llama-bpe.gguf)
STEPS=("$@")
# in the order of what matters most: the budget cuts the last ones first. The tune sweep
# comes before the table, whose int4/int8 runs use what it cached for this device.
[ ${#STEPS[@]} -eq 0 ] && STEPS=(copy tune tests graphs int4 int8 fp8 spec gemv compile serve
                                 peer)
RUN_START=$SECONDS

run() {  # run NAME LIMIT_S COMMAND...: one step; stdout to steps/NAME.out, all to the log
    local name=$1 limit=$(($2 * SCALE))
    shift 2
    local left=$((BUDGET - (SECONDS - RUN_START)))
    if [ "$left" -lt 15 ]; then
        echo "=== $name: skipped, ${left}s of the ${BUDGET}s budget left" | tee -a "$LOG"
        echo "skipped 0" > "$STEPS_DIR/$name.rc"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name: $* ($(date -u +%T), limit ${limit}s)" | tee -a "$LOG"
    local start=$SECONDS
    timeout -k 10 "$limit" "$@" 2> >(tee -a "$LOG" >&2) | tee -a "$LOG" > "$STEPS_DIR/$name.out"
    local rc=${PIPESTATUS[0]}
    echo "$rc $((SECONDS - start))" > "$STEPS_DIR/$name.rc"
    echo "=== $name: rc=$rc in $((SECONDS - start)) s" | tee -a "$LOG"
}

{
    date -u
    [ "$REHEARSAL" = 1 ] && echo "rehearsal on the CPU: TRITON_INTERPRET=1, shape $SHAPE"
    ls /dev/nvidiactl
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
        --format=csv
    "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
} 2>&1 | tee -a "$LOG"

ENGINE=("$PY" benchmarks/engine.py --random "$SHAPE" --batches "$BATCHES" $ENGINE_STEPS)
for step in "${STEPS[@]}"; do
    case $step in
        copy) run copy 30 "$PY" benchmarks/copy_bandwidth.py --gib "$COPY_GIB" ;;
        tests) if [ "$REHEARSAL" = 1 ]; then  # the tier refuses to import without a GPU:
                   run tests 30 "$PY" -m compileall -q tests/gpu  # byte-compiled only
               else
                   run tests 110 "$PY" -m pytest tests/gpu -q -p no:cacheprovider $XDIST \
                       --timeout 100 -rf
               fi ;;
        tune) run tune 90 "$PY" -m kernels.tune $TUNE_ARGS ;;  # the GEMV sweep, cached per device
        graphs) run graphs 80 "${ENGINE[@]}" --graphs compare ;;  # bf16, graphs on and off
        bf16) run bf16 60 "${ENGINE[@]}" ;;
        int4|int8|fp8) run "$step" 50 "${ENGINE[@]}" --quant "$step" ;;
        compile) run compile 60 env ${COMPILE_ENV:-} "${ENGINE[@]}" --batches 1 --compile compare ;;  # compiled vs not
        gemv) run gemv 60 "$PY" benchmarks/gemv.py $GEMV_ARGS ;;
        spec) run spec 60 "$PY" benchmarks/cuda_speculative.py --random "$SHAPE" \
                  --draft-shape "$DRAFT" --max-draft 8 --steps "$SPEC_STEPS" ;;
        lookup) run lookup 120 "$PY" benchmarks/cuda_speculative.py --prompts edit \
                    ${LOOKUP_MODEL:+--model "$LOOKUP_MODEL"} ;;  # needs a real model installed
        serve) run serve 90 "$PY" benchmarks/cuda_serve_real_vocab.py --shape "$SERVE_SHAPE" \
                   $VOCAB ;;
        peer) run peer 220 "$PY" benchmarks/peer_decode.py --random "$SHAPE" \
                  --tokens "$PEER_TOKENS" --repeat "$PEER_REPEAT" ;;
        peer-eager) run peer-eager 100 "$PY" benchmarks/peer_decode.py --random "$SHAPE" \
                        --tokens "$PEER_TOKENS" --repeat "$PEER_REPEAT" --no-compile ;;
        llama) nv=$("$PY" -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], \
'cu13', 'lib'))" 2>/dev/null)
               LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run llama-devices 60 \
                   "$PY" -m backends.llamacpp.device_report
               LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run llama 400 \
                   "$PY" benchmarks/gpu_offload.py --random "${LLAMA_SHAPE:-llama3-8b}" \
                   --layers="${LLAMA_LAYERS:--1,16,0}" --prompt 512 \
                   --tokens "${LLAMA_TOKENS:-64}" --repeat 2 \
                   ${LLAMA_BENCH:+--llama-bench "$LLAMA_BENCH"} $VOCAB ;;
        *) echo "unknown step $step" | tee -a "$LOG" ;;
    esac
done
echo "=== all steps in $((SECONDS - RUN_START)) s (budget ${BUDGET}s)" | tee -a "$LOG"
"$PY" benchmarks/gpu_summary.py "$STEPS_DIR" --out "$OUT/summary.json" 2>&1 | tee -a "$LOG"
name=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['file_name'])" \
       "$OUT/summary.json" 2>/dev/null) && cp "$OUT/summary.json" "$OUT/$name"
