#include "core/json_error.h"

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

namespace turnstile::core {
namespace {

using Json = nlohmann::json;

// Follows the parse far enough to know, when it fails, which field of the top-level object was
// having its value read: a key at depth 1 opens a field, its value (a scalar, or a whole nested
// object or array) closes it.
class Tracker {
 public:
  bool null() { return scalar(); }
  bool boolean(bool /*value*/) { return scalar(); }
  bool number_integer(Json::number_integer_t /*value*/) { return scalar(); }
  bool number_unsigned(Json::number_unsigned_t /*value*/) { return scalar(); }
  bool number_float(Json::number_float_t /*value*/, const Json::string_t& /*text*/) {
    return scalar();
  }
  bool string(Json::string_t& /*value*/) { return scalar(); }
  bool binary(Json::binary_t& /*value*/) { return scalar(); }
  bool start_object(std::size_t /*size*/) { return open(); }
  bool start_array(std::size_t /*size*/) { return open(); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(Json::string_t& name) {
    if (depth_ == 1) field_ = name;
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& error) {
    position_ = position;
    problem_ = problem_of(error.what());
    return false;
  }

  const std::optional<std::string>& field() const { return field_; }
  std::size_t position() const { return position_; }
  std::string_view problem() const { return problem_; }

 private:
  bool scalar() {
    if (depth_ == 1) field_.reset();
    return true;
  }
  bool open() {
    ++depth_;
    return true;
  }
  bool close() {
    if (depth_ > 0) --depth_;
    if (depth_ == 1) field_.reset();
    return true;
  }

  // The parser's message mapped to ours; nothing of its text goes on.
  static std::string_view problem_of(std::string_view what) {
    const auto has = [what](std::string_view part) { return what.find(part) != what.npos; };
    if (has("surrogate")) {
      return "a \\u escape is half of a UTF-16 surrogate pair (U+D800 to U+DFFF) without the "
             "other half";
    }
    if (has("must be followed by 4 hex digits")) return "a \\u escape needs 4 hex digits";
    if (has("control character")) {
      return "a control character (U+0000 to U+001F) inside a string must be escaped";
    }
    if (has("after backslash")) return "a backslash starts no JSON escape";
    if (has("missing closing quote")) return "a string has no closing quote";
    if (has("UTF-8")) return "a string holds bytes that are not UTF-8";
    if (has("invalid number")) return "a number is malformed";
    if (has("invalid literal")) return "a word that is not true, false or null";
    if (has("unexpected end of input")) return "the body ends before its JSON value does";
    // What the parser expected, after "; " (its "unexpected X" comes before and may look alike).
    if (has("; expected end of input")) return "something follows the JSON value";
    if (has("; expected ':'")) return "a field name is not followed by ':'";
    if (has("; expected string literal")) return "a field name is not a string";
    if (has("; expected '}'"))
      return "an object's fields are not separated by ',' or closed by '}'";
    if (has("; expected ']'")) return "an array's values are not separated by ',' or closed by ']'";
    if (has("; expected '[', '{', or a literal")) return "a value is missing";
    return "unexpected text";
  }

  int depth_ = 0;
  std::optional<std::string> field_;  // the top-level field whose value is being read
  std::size_t position_ = 0;
  std::string_view problem_ = "unexpected text";
};

}  // namespace

std::string describe_json_error(std::string_view body) {
  Tracker tracker;
  Json::sax_parse(body.begin(), body.end(), &tracker, nlohmann::detail::input_format_t::json,
                  /*strict=*/true);
  // The parser counts the bytes it has read; the byte it stopped at is the last of them.
  const std::size_t at = tracker.position() == 0 ? 0 : tracker.position() - 1;
  const std::string where = "not valid JSON at byte " + std::to_string(at) + ": ";
  if (tracker.field()) {
    return "field \"" + *tracker.field() + "\": " + where + std::string(tracker.problem());
  }
  return "request body is " + where + std::string(tracker.problem());
}

}  // namespace turnstile::core
