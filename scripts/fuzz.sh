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
  harnesses=(fuzz_wire fuzz_session fuzz_engine fuzz_journal fuzz_http fuzz_log fuzz_signal
    fuzz_handshake)
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

# One harness: its corpus copied, run for $seconds, its verdict in $work/$harness.status and a
# summary in $work/$harness.out (printed in harness order once all have run).
run_harness() {
  local harness=$1 corpus="$work/$1" log="$work/$1.log" out="$work/$1.out" status=0
  mkdir -p "$corpus"
  cp fuzz/corpus/"$harness"/* "$corpus"/
  local dict=fuzz/protocol.dict
  [ -f "fuzz/$harness.dict" ] && dict="fuzz/$harness.dict"
  "$build_dir/fuzz/$harness" "$corpus" -dict="$dict" -max_total_time="$seconds" \
    -print_final_stats=1 -artifact_prefix="$artifacts/$harness-" -close_fd_mask=1 \
    >"$log" 2>&1 || status=$?
  local execs rate
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  if [ "$status" -ne 0 ]; then
    {
      echo "fuzz: $harness FAILED (exit $status); last lines of its log:"
      tail -n 60 "$log"
      ls -1 "$artifacts"/"$harness"-* 2>/dev/null | sed 's/^/fuzz:   crash input: /'
    } >"$out"
  else
    echo "fuzz: $harness ok: ${execs:-?} runs, ${rate:-?} execs/s, corpus $(ls "$corpus" | wc -l) inputs" >"$out"
  fi
  echo "$status" >"$work/$harness.status"
}

# As many harnesses at once as there are cores: each is single-threaded, and each still gets its
# full $seconds.
parallel=${TURNSTILE_FUZZ_JOBS:-$(nproc)}
running=0
for harness in "${harnesses[@]}"; do
  echo "fuzz: $harness for ${seconds}s"
  run_harness "$harness" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=()
for harness in "${harnesses[@]}"; do
  cat "$work/$harness.out"
  [ "$(cat "$work/$harness.status")" -eq 0 ] || failed+=("$harness")
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $artifacts/; replay: $build_dir/fuzz/<harness> <input>)"
  exit 1
fi
echo "fuzz: all ${#harnesses[@]} harnesses passed"
