#!/usr/bin/env bash
# The GPU checks (the compiled Triton kernels and the cuda engine on an NVIDIA GPU, then its
# speed) in one run, for a machine that has a GPU and cannot download: the tests/gpu tier,
# CUDA graphs on and off, benchmarks/engine.py in bf16, int4 and int8, benchmarks/gemv.py,
# the speculative verification cost, and a peer (transformers, eager and torch.compile'd)
# on the same random Llama-3-8B shape. Each step has its own time limit, so one that hangs
# leaves the others their time; everything goes to $OUT/log (default build/gpu-checks).
#
#     bash benchmarks/gpu_checks.sh [step ...]   # steps: tests graphs bf16 int4 int8 gemv spec peer peer-eager llama
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
mkdir -p "$OUT"
LOG="$OUT/log"
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/ember-site .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/ember-site"
    if [ -f .whl/libggml-cuda.so.gz ] && [ -d /tmp/ember-site/llama_cpp/lib ]; then
        # through `ember cuda install --from`, as a user installs it (cuBLAS stays torch's,
        # on LD_LIBRARY_PATH below: the pack names no runtime wheels); the lib folder if not
        mkdir -p /tmp/cuda-pack && gunzip -c .whl/libggml-cuda.so.gz > /tmp/cuda-pack/libggml-cuda.so
        if python3 benchmarks/cuda_pack.py /tmp/cuda-pack 2>&1 | tee -a "$LOG" && \
           EMBER_HOME=/tmp/ember-gpu-home python3 -m app.cli cuda install --from /tmp/cuda-pack \
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
else
    export PYTHONPATH="$PWD"
fi
[ -x /tmp/llama-bench/llama-bench ] && LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama-bench}
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n 4")  # compile kernels in parallel
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(tests graphs int4 gemv spec int8 peer)

run() {  # run NAME LIMIT_S COMMAND...: one step, its output and time in the log
    local name=$1 limit=$2
    shift 2
    echo "=== $name: $* ($(date -u +%T), limit ${limit}s)" | tee -a "$LOG"
    local start=$SECONDS
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    echo "=== $name: rc=${PIPESTATUS[0]} in $((SECONDS - start)) s" | tee -a "$LOG"
}

{
    date -u
    ls /dev/nvidiactl
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
        --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee -a "$LOG"

for step in "${STEPS[@]}"; do
    case $step in
        tests) run tests 130 python3 -m pytest tests/gpu -q -p no:cacheprovider $XDIST \
                   --timeout 120 -rf ;;
        graphs) run graphs 80 python3 benchmarks/engine.py --random llama3-8b \
                    --batches 1,8,32,64 --graphs compare ;;
        bf16) run bf16 80 python3 benchmarks/engine.py --random llama3-8b --batches 1,8,32,64 ;;
        int4) run int4 60 python3 benchmarks/engine.py --random llama3-8b --batches 1,8,32,64 \
                  --quant int4 ;;
        int8) run int8 50 python3 benchmarks/engine.py --random llama3-8b --batches 1,8,32,64 \
                  --quant int8 ;;
        gemv) run gemv 45 python3 benchmarks/gemv.py ;;
        spec) run spec 60 python3 benchmarks/cuda_speculative.py --random llama3-8b \
                  --draft-shape llama3.2-1b --max-draft 8 --steps 10 ;;
        peer) run peer 220 python3 benchmarks/peer_decode.py --random llama3-8b --tokens 16,80 ;;
        peer-eager) run peer-eager 100 python3 benchmarks/peer_decode.py --random llama3-8b \
                        --tokens 16,80 --no-compile ;;
        llama) nv=$(python3 -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], \
'cu13', 'lib'))" 2>/dev/null)
               LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run llama 60 \
                   python3 -m backends.llamacpp.device_report
               LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run llama 400 \
                   python3 benchmarks/gpu_offload.py --random "${LLAMA_SHAPE:-llama3-8b}" \
                   --layers="${LLAMA_LAYERS:--1,16,0}" --prompt 512 \
                   --tokens "${LLAMA_TOKENS:-64}" --repeat 2 \
                   ${LLAMA_BENCH:+--llama-bench "$LLAMA_BENCH"} \
                   $( [ -f .whl/ggml-vocab-llama-bpe.gguf ] && echo --vocab .whl/ggml-vocab-llama-bpe.gguf) ;;
        *) echo "unknown step $step" | tee -a "$LOG" ;;
    esac
done
