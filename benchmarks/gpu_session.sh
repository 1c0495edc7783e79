#!/usr/bin/env bash
# A lent GPU's session in two calls (a call may run 600 s; the session has 900 s of device time, starts included):
# after `../shared/gpu/bundle.sh` here, `run` with carry [".gpu"] and the command
#   STEPS="tests bench profile" bash benchmarks/gpu_session.sh     (timeout_s 480; about 7 minutes)
#   STEPS="suite" bash benchmarks/gpu_session.sh                   (timeout_s 240; about 3 minutes)
# Each step has its own timeout and its log under $OUT; a step that fails does not stop the others.
#   tests    tests/test_gpu.py (the CUDA side of the graphed step and of graphed inference)         ~30 s
#   bench    benchmarks/gpu.py, issue 40's table                                                   ≤ 280 s
#   profile  benchmarks/gpu_profile.py on the random bert-base: bound by the device or the host?    ~70 s
#   suite    the CPU-and-GPU part of the test suite, names printed as each test ends (-v)          ≤ 150 s
# The set-up (wheels, the MiniLM, the random bert-base, the matmul rate) takes about 45 s of each call.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"; STEPS=${STEPS:-tests bench profile suite}
say() { echo "=== $(date +%T) $*"; }
say setup; source .gpu/setup.sh >"$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }; tail -3 "$OUT/setup.log"
for s in $STEPS; do
  case $s in
    tests) say tests; timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py >"$OUT/test_gpu.log" 2>&1
           echo "rc=$?"; grep -E "passed|failed" "$OUT/test_gpu.log" | tail -1; grep -E "^(FAILED|ERROR)" "$OUT/test_gpu.log";;
    bench) say bench; timeout 300 python3 benchmarks/gpu.py --budget 280 --out "$OUT/gpu-bench" >"$OUT/bench.log" 2>&1
           echo "rc=$?"; sed -n '/^| row/,$p' "$OUT/bench.log" | cut -c1-220;;
    profile) say profile; timeout 120 python3 benchmarks/gpu_profile.py --model "$BB" --out "$OUT/profile" \
             >"$OUT/profile.log" 2>&1; echo "rc=$?"; cat "$OUT/profile/profile.txt" 2>/dev/null | head -24;;
    suite) say suite; timeout 150 python3 -m pytest -v -p no:cacheprovider -n 8 --timeout 120 tests/test_portable.py \
             tests/test_training_options.py tests/test_contract.py tests/test_swag.py tests/test_qa.py \
             tests/test_ner.py tests/test_extract.py tests/test_memory.py tests/test_custom_task.py tests/test_heads.py \
             tests/test_graphed_step.py tests/test_graphed_inference.py tests/test_accumulation.py \
             >"$OUT/suite.log" 2>&1; echo "rc=$?"; grep -cE " PASSED " "$OUT/suite.log" | sed 's/^/passed: /'
           grep -E " (FAILED|ERROR) " "$OUT/suite.log" | sed 's/^.*\(FAILED\|ERROR\)/\1/' | head -30;;
  esac
done
say done
