# Runs the same seeds twice and demands identical output, digests included: same seed, same trace.
#   cmake -DSIM=<path to turnstile-sim> -P determinism.cmake
if(NOT SIM)
  message(FATAL_ERROR "SIM (the turnstile-sim executable) is required")
endif()
foreach(run first second)
  execute_process(COMMAND ${SIM} --seeds 1..25 --profile all --events 10000
    OUTPUT_VARIABLE output RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "turnstile-sim failed:\n${output}")
  endif()
  # The summary line holds wall-clock figures; everything else must match byte for byte.
  string(REGEX REPLACE "summary:[^\n]*\n?" "" output "${output}")
  set(output_${run} "${output}")
endforeach()
if(NOT output_first STREQUAL output_second)
  message(FATAL_ERROR "same seeds, different traces:\n--- first\n${output_first}\n--- second\n${output_second}")
endif()
string(REGEX MATCHALL "digest" digests "${output_first}")
list(LENGTH digests count)
if(count LESS 25)
  message(FATAL_ERROR "expected 25 digests, got ${count}:\n${output_first}")
endif()
message(STATUS "25 seeds replayed with identical digests")
