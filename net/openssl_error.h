// The text of OpenSSL's oldest queued error (popped), for log lines and link failures; "unknown
// error" when the queue is empty.
#pragma once

#include <openssl/err.h>

#include <string>

namespace turnstile::net {

inline std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

}  // namespace turnstile::net
