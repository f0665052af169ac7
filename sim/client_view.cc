#include "sim/client_view.h"

namespace turnstile::sim {

std::optional<core::Token> ClientView::on_reply(const core::Request& request,
                                                const core::Reply& reply, std::int64_t sent_ns,
                                                std::uint64_t op, History& history) {
  using core::Operation;
  const ResourceKey key{core::command_namespace(request.command), request.key};
  const bool shared = core::is_shared_command(request.command);
  std::optional<core::Token> granted;
  switch (core::command_operation(request.command)) {
    case Operation::kWait:
      if (auto it = enqueued.find(key); it != enqueued.end()) {
        // `rw` waits only for an `re`, `ww` for a `we`: the other kind leaves the record be.
        if (reply.status == core::Status::kErrorNotEnqueued &&
            enqueued_shared.count(key) != (shared ? 1U : 0U)) {
          break;
        }
        if (op != 0) history.widen_call(op, it->second);
        enqueued.erase(it);
        enqueued_shared.erase(key);
      }
      granted = reply.token;
      break;
    case Operation::kAcquire:
      granted = reply.token;
      break;
    case Operation::kEnqueue:
      if (reply.status == core::Status::kAcquired) {
        granted = reply.token;
      } else if (reply.status == core::Status::kQueued) {
        enqueued[key] = sent_ns;
        if (shared) {
          enqueued_shared.insert(key);
        } else {
          enqueued_shared.erase(key);
        }
      }
      break;
    case Operation::kRelease:
      if (reply.status == core::Status::kOk) {
        auto it = held.find(key);
        if (it != held.end() && request.token && it->second == *request.token) {
          held.erase(it);
          held_shared.erase(key);
        }
      }
      break;
    case Operation::kRenew:
      if (reply.status != core::Status::kOk) {
        // The lease ended; a renew of the other kind of read-write slot fails whatever the lease.
        const bool other_kind = key.first == core::Namespace::kReadWrite && held.count(key) != 0 &&
                                (held_shared.count(key) != 0) != shared;
        if (!other_kind) {
          held.erase(key);
          held_shared.erase(key);
        }
      }
      break;
    case Operation::kOther:
      break;
  }
  if (granted) {
    held[key] = *granted;
    if (shared) {
      held_shared.insert(key);
    } else {
      held_shared.erase(key);
    }
  }
  return granted;
}

}  // namespace turnstile::sim
