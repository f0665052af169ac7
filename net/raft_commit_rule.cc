#include "net/raft_commit_rule.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace turnstile::net {

namespace {

// What the wrapper replaced, per raft_io (a process may run several nodes, as the simulator does).
struct Wrapped {
  int (*start)(raft_io*, unsigned, raft_io_tick_cb, raft_io_recv_cb) = nullptr;
  raft_io_recv_cb recv = nullptr;
};

std::mutex wrapped_mutex;
std::unordered_map<const raft_io*, Wrapped>& wrapped() {
  static std::unordered_map<const raft_io*, Wrapped> table;
  return table;
}

std::atomic<std::uint64_t> holds{0};

Wrapped lookup(const raft_io* io) {
  std::lock_guard lock(wrapped_mutex);
  return wrapped().at(io);
}

void receive(raft_io* io, raft_message* message) {
  // raft_init points io->data at its raft instance.
  const auto* r = static_cast<const raft*>(io->data);
  if (message->type == RAFT_IO_APPEND_ENTRIES_RESULT && r->state == RAFT_LEADER) {
    raft_append_entries_result& result = message->append_entries_result;
    if (result.rejected == 0 && result.term == r->current_term) {
      const std::uint64_t counted =
          countable_ack(r->current_term, r->commit_index, result.last_log_index,
                        term_in_log(r, result.last_log_index));
      if (counted != result.last_log_index) {
        result.last_log_index = counted;
        holds.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  lookup(io).recv(io, message);
}

int start(raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
  Wrapped original;
  {
    std::lock_guard lock(wrapped_mutex);
    Wrapped& entry = wrapped().at(io);
    entry.recv = recv;
    original = entry;
  }
  return original.start(io, msecs, tick, &receive);
}

}  // namespace

std::uint64_t countable_ack(std::uint64_t current_term, std::uint64_t commit_index,
                            std::uint64_t acknowledged, std::optional<std::uint64_t> entry_term) {
  if (acknowledged <= commit_index) return acknowledged;  // nothing new to commit
  if (entry_term && *entry_term == current_term) return acknowledged;
  return commit_index;
}

std::optional<std::uint64_t> term_in_log(const raft* r, std::uint64_t index) {
  const raft_log& log = r->log;
  if (log.size == 0 || index <= log.offset) return std::nullopt;
  const std::size_t count =
      log.back >= log.front ? log.back - log.front : log.size - log.front + log.back;
  if (index - log.offset > count) return std::nullopt;
  const std::size_t slot =
      (log.front + static_cast<std::size_t>(index - log.offset - 1)) % log.size;
  return log.entries[slot].term;
}

void install_commit_rule(raft* r) {
  std::lock_guard lock(wrapped_mutex);
  if (r->io->start == &start) return;  // installed already
  // A raft_io at the address of a closed one replaces its entry.
  wrapped()[r->io] = Wrapped{r->io->start, nullptr};
  r->io->start = &start;
}

std::uint64_t commit_rule_holds() { return holds.load(std::memory_order_relaxed); }

}  // namespace turnstile::net
