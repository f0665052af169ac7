#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan+UBSan) in build-fuzz and runs each one for a bounded
# time from its committed seed corpus. Exits non-zero if any harness crashes or finds a broken
# property; crash inputs land in build-fuzz/artifacts/. See docs/fuzzing.md.
# Usage: scripts/fuzz.sh [seconds_per_harness (default 60)] [harness...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
harnesses=("$@")
if [ "${#harnesses[@]}" -eq 0 ]; then
  harnesses=(fuzz_wire fuzz_session fuzz_engine fuzz_journal fuzz_http fuzz_log fuzz_signal)
fi

build_dir=${TURNSTILE_FUZZ_BUILD_DIR:-build-fuzz}
CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTURNSTILE_FUZZ=ON -DTURNSTILE_BUILD_TESTS=OFF -DTURNSTILE_BUILD_BENCH=OFF >/dev/null
# Only the harnesses (and what they link): the fuzz build does not need the daemon or simulator.
cmake --build "$build_dir" -j "$(nproc)" --target "${harnesses[@]}"

artifacts="$build_dir/artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=()
for harness in "${harnesses[@]}"; do
  # A copy of the corpus: what the run discovers stays out of the committed seeds.
  corpus="$work/$harness"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$harness"/* "$corpus"/
  log="$work/$harness.log"
  echo "fuzz: $harness for ${seconds}s"
  status=0
  # A harness's own dictionary if it has one (fuzz/<harness>.dict), else the protocol's.
  dict=fuzz/protocol.dict
  [ -f "fuzz/$harness.dict" ] && dict="fuzz/$harness.dict"
  "$build_dir/fuzz/$harness" "$corpus" -dict="$dict" -max_total_time="$seconds" \
    -print_final_stats=1 -artifact_prefix="$artifacts/$harness-" -close_fd_mask=1 \
    >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  if [ "$status" -ne 0 ]; then
    failed+=("$harness")
    echo "fuzz: $harness FAILED (exit $status); last lines of its log:"
    tail -n 60 "$log"
    ls -1 "$artifacts"/"$harness"-* 2>/dev/null | sed 's/^/fuzz:   crash input: /'
  else
    echo "fuzz: $harness ok: ${execs:-?} runs, ${rate:-?} execs/s, corpus $(ls "$corpus" | wc -l) inputs"
  fi
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $artifacts/; replay: $build_dir/fuzz/<harness> <input>)"
  exit 1
fi
echo "fuzz: all ${#harnesses[@]} harnesses passed"
