// The `cluster` and `admin` commands of the CLI (cli_common.h): `cluster status` over each
// node's client port; `cluster add/remove/transfer` and `admin release` on the HTTP admin routes
// (cli_http.h); `admin show` (`inspect`) on the key's server.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "client/cli.h"
#include "client/cli_common.h"
#include "client/cli_http.h"

namespace turnstile::client::cli {
namespace {

std::string one_decimal(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// The inspect JSON as lines a person reads: a summary, one line per holder (grant order) and per
// waiter (queue order), and the lock-delay.
void print_inspection(const Json& inspection) {
  const std::string kind = inspection.value("kind", std::string("?"));
  const std::string key = inspection.value("key", std::string("?"));
  const Json holders = inspection.value("holders", Json::array());
  const Json waiters = inspection.value("waiters", Json::array());
  if (!inspection.value("exists", false)) {
    std::cout << kind << " " << key << ": not held, nobody waiting\n";
    return;
  }
  std::cout << kind << " " << key << ": " << holders.size() << " holder"
            << (holders.size() == 1 ? "" : "s") << " (limit " << inspection.value("limit", 0)
            << "), " << waiters.size() << " waiting\n";
  const auto extras = [](const Json& entry) {
    std::string text;
    if (entry.contains("mode")) text += "  " + entry.value("mode", std::string());
    if (entry.value("orphaned", false)) text += "  orphaned";
    return text;
  };
  for (const Json& holder : holders) {
    std::cout << "  holder  fence " << holder.value("fence", std::uint64_t{0}) << "  session "
              << holder.value("session", std::uint64_t{0}) << "  lease left "
              << one_decimal(holder.value("lease_expires_in_s", 0.0)) << " s" << extras(holder)
              << "\n";
  }
  std::size_t place = 0;
  for (const Json& waiter : waiters) {
    std::cout << "  waiter  #" << ++place << "  session "
              << waiter.value("session", std::uint64_t{0}) << "  waited "
              << one_decimal(waiter.value("waited_s", 0.0)) << " s" << extras(waiter) << "\n";
  }
  if (inspection.contains("lock_delay_left_s")) {
    std::cout << "  lock-delay left " << one_decimal(inspection.value("lock_delay_left_s", 0.0))
              << " s\n";
  }
}

// The token of the HTTP admin routes: --admin-token, else TURNSTILE_ADMIN_TOKEN. A usage error
// without one, with a byte that cannot go in a header, or with --tls (the routes are plain HTTP).
std::string admin_token(const cxxopts::ParseResult& parsed, const Common& common) {
  std::string token;
  if (parsed.count("admin-token") != 0) {
    token = parsed["admin-token"].as<std::string>();
  } else if (const char* env = std::getenv("TURNSTILE_ADMIN_TOKEN"); env != nullptr) {
    token = env;
  }
  token = trim(token);
  if (token.empty()) throw UsageError{"--admin-token (or TURNSTILE_ADMIN_TOKEN) is required"};
  for (const char c : token) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      throw UsageError{"the admin token holds a control character"};
    }
  }
  if (common.connect.tls) throw UsageError{common.command + " speaks plain HTTP: no --tls"};
  return token;
}

// An admin route's answer other than 200, reported with its exit code: 77 for a refused token,
// 1 otherwise (a follower's 503 names the leader's client address).
int http_failure(const Common& common, const HttpAnswer& answer, const Endpoint& server) {
  const Json json = Json::parse(answer.body, nullptr, false);
  std::string message = "HTTP " + std::to_string(answer.status);
  if (json.is_object()) {
    message += " " + json.value("error", std::string());
    if (json.contains("detail") && json["detail"].is_string()) {
      message += ": " + json["detail"].get<std::string>();
    }
  }
  if (answer.status == 503 && !answer.leader.empty()) {
    message += " (the leader's client address is " + answer.leader +
               ": run this against the leader's HTTP address)";
  }
  ErrorCode code = ErrorCode::kProtocol;
  if (answer.status == 401 || answer.status == 403) code = ErrorCode::kAuth;
  if (answer.status == 503) code = ErrorCode::kNotLeader;
  return fail(common, Error{code, message}, server.to_string());
}

// --timeout of the admin commands, in milliseconds.
Milliseconds admin_timeout(const cxxopts::ParseResult& parsed) {
  const double timeout_s = parsed["timeout"].as<double>();
  if (!(timeout_s > 0 && timeout_s < 86400)) throw UsageError{"--timeout out of range"};
  return Milliseconds{static_cast<std::int64_t>(timeout_s * 1000)};
}

// A key as one path segment: every byte but A-Z a-z 0-9 - . _ ~ percent-encoded.
std::string path_segment(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string segment;
  for (const char c : key) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      segment.push_back(c);
    } else {
      const auto byte = static_cast<unsigned char>(c);
      segment.push_back('%');
      segment.push_back(kHex[byte >> 4]);
      segment.push_back(kHex[byte & 0xf]);
    }
  }
  return segment;
}

}  // namespace

// `admin show KEY [kind]`: the key's holders and waiters (`inspect`).
int do_admin_show(const Common& common, const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 1, 2, "KEY [lock|sem|rw]");
  const std::string& key = arguments[0];
  const core::Namespace space = kind_argument(arguments, 1);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  std::string where;
  auto connection = connect_for(common, key, where);
  if (!connection) return fail(common, connection.error(), where);
  auto inspected = connection->inspect(space, key);
  if (!inspected) return fail(common, inspected.error(), key);
  const Json inspection = Json::parse(inspected->json, nullptr, false);
  if (!inspection.is_object()) {
    return fail(common, make_error(ErrorCode::kBadReply, "inspect sent no JSON object"), key);
  }
  if (common.json) {
    std::cout << Json{{"ok", true},
                      {"server", connection->endpoint().to_string()},
                      {"inspect", inspection}}
                     .dump(-1, ' ', false, Json::error_handler_t::replace)
              << "\n";
  } else {
    print_inspection(inspection);
  }
  return kExitOk;
}

// `cluster status`: every node's `stats` cluster object, one line (or JSON object) per node.
// Exit 0 when every node answered and exactly one of them says it leads; else 1.
int do_cluster_status(const Common& common) {
  int worst = kExitOk;
  int leaders = 0;
  for (const Endpoint& endpoint : common.servers) {
    const std::string name = endpoint.to_string();
    auto connection = Connection::connect(endpoint, common.connect);
    auto stats = connection ? connection->stats() : Result<StatsResult>(connection.error());
    if (!stats) {
      worst = std::max(worst, fail(common, stats.error(), name));
      continue;
    }
    const Json parsed = Json::parse(stats->json, nullptr, false);
    if (!parsed.is_object() || !parsed.contains("cluster") || !parsed["cluster"].is_object()) {
      worst = std::max(worst,
                       fail(common, make_error(ErrorCode::kBadReply, "not a cluster node"), name));
      continue;
    }
    const Json& node = parsed["cluster"];
    if (node.value("role", std::string()) == "leader") ++leaders;
    if (common.json) {
      std::cout << Json{{"ok", true}, {"server", name}, {"cluster", node}}.dump() << "\n";
      continue;
    }
    std::cout << name << " node " << node.value("node_id", 0) << " "
              << node.value("role", std::string("?")) << " term " << node.value("term", 0)
              << " leader " << node.value("leader_id", 0) << " ("
              << node.value("leader_address", std::string()) << ") commit "
              << node.value("commit_index", 0) << " applied " << node.value("applied_index", 0)
              << " voters " << node.value("voters", Json::array()).dump() << "\n";
  }
  if (worst == kExitOk && leaders != 1) {
    std::cerr << "turnstile cluster status: " << leaders << " nodes say they lead, not 1\n";
    worst = kExitError;
  }
  return worst;
}

int do_cluster(const cxxopts::ParseResult& parsed, const Common& common,
               const std::string& subcommand) {
  const std::string token = admin_token(parsed, common);
  std::string method = "POST";
  std::string path = "/v1/admin/leader/transfer";
  std::string body;
  const std::int64_t id = subcommand == "transfer" ? 0 : parsed["id"].as<std::int64_t>();
  if (subcommand != "transfer" && id < 1) throw UsageError{"--id must be at least 1"};
  if (subcommand == "remove-voter") {
    method = "DELETE";
    path = "/v1/admin/voters/" + std::to_string(id);
  } else if (subcommand == "add-voter") {
    method = "POST";
    path = "/v1/admin/voters";
    body = Json{{"id", id},
                {"raft_address", required(parsed, "raft-address")},
                {"client_address", required(parsed, "client-address")}}
               .dump();
  }
  const Milliseconds timeout = admin_timeout(parsed);
  const Endpoint& server = common.servers.front();
  auto answer =
      http_call(server, method, path, token, body, common.connect.connect_timeout, timeout);
  if (!answer) return fail(common, answer.error(), server.to_string());
  Json json = Json::parse(answer->body, nullptr, false);
  if (answer->status == 200 && subcommand == "transfer") {
    const std::string leader = json.value("leader", std::string());
    if (common.json) {
      std::cout << Json{{"ok", true}, {"leader", leader}}.dump() << "\n";
    } else {
      std::cout << "leader: " << (leader.empty() ? "another node (not known here yet)" : leader)
                << "\n";
    }
    return kExitOk;
  }
  if (answer->status == 200) {
    if (common.json) {
      std::cout << Json{{"ok", true}, {"voters", json.value("voters", Json::array())}}.dump()
                << "\n";
    } else {
      std::cout << "voters:";
      for (const Json& voter : json.value("voters", Json::array())) std::cout << " " << voter;
      std::cout << "\n";
    }
    return kExitOk;
  }
  return http_failure(common, *answer, server);
}

// `admin release KEY [kind] [--fence N] [--clear-delay]`: DELETE
// /v1/admin/<locks|semaphores|rwlocks>/KEY[?fence=N][&clear_delay=true], the operator's
// force-release of every holder of KEY, or of the one with fence N; with --clear-delay it also
// ends the key's running lock-delay (docs/http-api.md, "Admin force-release").
int do_admin_release(const cxxopts::ParseResult& parsed, const Common& common,
                     const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 1, 2, "KEY [lock|sem|rw]");
  const std::string& key = arguments[0];
  const core::Namespace space = kind_argument(arguments, 1);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  std::string path = "/v1/admin/locks/";
  if (space == core::Namespace::kSemaphore) path = "/v1/admin/semaphores/";
  if (space == core::Namespace::kReadWrite) path = "/v1/admin/rwlocks/";
  path += path_segment(key);
  if (parsed.count("fence") != 0) {
    const std::uint64_t fence = parsed["fence"].as<std::uint64_t>();
    if (fence == 0) throw UsageError{"--fence must be at least 1 (leave it out for every holder)"};
    path += "?fence=" + std::to_string(fence);
  }
  const bool clear_delay = parsed.count("clear-delay") != 0 && parsed["clear-delay"].as<bool>();
  if (clear_delay) path += path.find('?') == std::string::npos ? "?" : "&";
  if (clear_delay) path += "clear_delay=true";
  const std::string token = admin_token(parsed, common);
  const Milliseconds timeout = admin_timeout(parsed);
  const Endpoint& server = common.servers.front();
  auto answer =
      http_call(server, "DELETE", path, token, "", common.connect.connect_timeout, timeout);
  if (!answer) return fail(common, answer.error(), server.to_string());
  if (answer->status != 200) return http_failure(common, *answer, server);
  const Json json = Json::parse(answer->body, nullptr, false);
  if (!json.is_object() || !json.contains("released") || !json["released"].is_number_unsigned()) {
    return fail(common, make_error(ErrorCode::kBadReply, "no count of released holders"),
                server.to_string());
  }
  const std::uint64_t released = json["released"].get<std::uint64_t>();
  const bool cleared = json.value("delay_cleared", false) == true;
  if (common.json) {
    Json out{{"ok", true}, {"released", released}};
    if (clear_delay) out["delay_cleared"] = cleared;
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "released " << released;
    if (clear_delay)
      std::cout << (cleared ? ", lock-delay cleared" : ", no lock-delay was running");
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace turnstile::client::cli
