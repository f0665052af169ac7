# Fails when any file under core/ includes an OS, thread, clock or libevent header, or reads a
# clock or an OS random source. The core takes time, randomness and I/O as inputs.
file(GLOB_RECURSE core_files "${CORE_DIR}/*.h" "${CORE_DIR}/*.cc")
set(forbidden_includes
  "event2/" "sys/" "unistd\\.h" "pthread\\.h" "thread" "mutex" "shared_mutex" "condition_variable"
  "atomic" "future" "chrono" "ctime" "time\\.h" "fstream" "filesystem" "random" "netinet/"
  "arpa/" "fcntl\\.h" "signal\\.h" "csignal" "openssl/" "poll\\.h" "socket")
set(forbidden_calls "system_clock" "steady_clock" "high_resolution_clock" "clock_gettime"
  "gettimeofday" "std::time\\(" "[^_a-z]rand\\(\\)" "random_device" "getrandom" "std::thread")
set(failures "")
foreach(file IN LISTS core_files)
  file(STRINGS "${file}" lines)
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    foreach(header IN LISTS forbidden_includes)
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]${header}[>\"./]")
        string(APPEND failures "  ${file}:${line_number}: ${line}\n")
      endif()
    endforeach()
    foreach(call IN LISTS forbidden_calls)
      if(line MATCHES "${call}")
        string(APPEND failures "  ${file}:${line_number}: ${line}\n")
      endif()
    endforeach()
  endforeach()
endforeach()
list(LENGTH core_files count)
if(failures)
  message(FATAL_ERROR "core/ reaches outside itself:\n${failures}")
endif()
message(STATUS "core purity: ${count} files checked, no OS/thread/clock includes")
