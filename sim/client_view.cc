#include "sim/client_view.h"

namespace turnstile::sim {

std::optional<core::Token> ClientView::on_reply(const core::Request& request,
                                                const core::Reply& reply, std::int64_t sent_ns,
                                                std::uint64_t op, History& history) {
  using core::Command;
  const ResourceKey key{core::command_namespace(request.command), request.key};
  std::optional<core::Token> granted;
  switch (request.command) {
    case Command::kWait:
    case Command::kSemWait:
      if (auto it = enqueued.find(key); it != enqueued.end()) {
        if (op != 0) history.widen_call(op, it->second);
        enqueued.erase(it);
      }
      granted = reply.token;
      break;
    case Command::kLock:
    case Command::kSemLock:
      granted = reply.token;
      break;
    case Command::kEnqueue:
    case Command::kSemEnqueue:
      if (reply.status == core::Status::kAcquired) {
        granted = reply.token;
      } else if (reply.status == core::Status::kQueued) {
        enqueued[key] = sent_ns;
      }
      break;
    case Command::kRelease:
    case Command::kSemRelease:
      if (reply.status == core::Status::kOk) {
        auto it = held.find(key);
        if (it != held.end() && request.token && it->second == *request.token) held.erase(it);
      }
      break;
    case Command::kRenew:
    case Command::kSemRenew:
      if (reply.status != core::Status::kOk) held.erase(key);  // the lease ended
      break;
    default:
      break;
  }
  if (granted) held[key] = *granted;
  return granted;
}

}  // namespace turnstile::sim
