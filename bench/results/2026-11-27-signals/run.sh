#!/bin/bash
# Signal benchmarks: emit vs uncontended (turnstiled and the reference server), fan-out.
cd /work/main
out=/tmp/sigbench
for run in 1 2 3; do
  for server in turnstiled refserver; do
    if [ $server = turnstiled ]; then bin=./build/net/turnstiled; else bin=./build/bench/turnstile-refserver; fi
    port=$((18000 + RANDOM % 500))
    $bin --host 127.0.0.1 --port $port --threads 2 > $out/$server-$run.log 2>&1 &
    pid=$!
    sleep 0.5
    timeout 120 ./build/bench/turnstile-bench --port $port --mode signal-emit --workers 100 --threads 2 --duration 5 --versus-uncontended > $out/emit-$server-$run.txt 2>&1
    kill $pid; wait $pid 2>/dev/null
  done
  port=$((18500 + RANDOM % 500))
  ./build/net/turnstiled --host 127.0.0.1 --port $port --threads 2 > $out/fanout-$run.log 2>&1 &
  pid=$!
  sleep 0.5
  for pattern in exact wildcard; do
    timeout 120 ./build/bench/turnstile-bench --port $port --mode signal-fanout --listeners 1000 --workers 4 --pattern $pattern --duration 5 > $out/fanout-$pattern-$run.txt 2>&1
  done
  kill $pid; wait $pid 2>/dev/null
done
echo done > $out/done
