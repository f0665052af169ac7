# Embeds docs/openapi.json in turnstiled as a C++ raw string (net/http_server.cc includes the
# output), so the document served at /v1/openapi.json is byte for byte the one in docs/.
# Usage: cmake -DINPUT=docs/openapi.json -DOUTPUT=.../openapi_json.inc -P embed_openapi.cmake
file(READ "${INPUT}" content)
string(FIND "${content}" ")openapi\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )openapi\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from docs/openapi.json by net/embed_openapi.cmake. Do not edit.\n"
  "constexpr std::string_view kOpenApiJson = R\"openapi(${content})openapi\";\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
