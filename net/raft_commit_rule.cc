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
  int (*send)(raft_io*, raft_io_send*, const raft_message*, raft_io_send_cb) = nullptr;
  // The follower's side: how far its log is known to be the log of the leader of this term.
  FollowerMatch match;
};

std::mutex wrapped_mutex;
std::unordered_map<const raft_io*, Wrapped>& wrapped() {
  static std::unordered_map<const raft_io*, Wrapped> table;
  return table;
}

std::atomic<std::uint64_t> holds{0};
std::atomic<std::uint64_t> compacted_answers{0};

Wrapped lookup(const raft_io* io) {
  std::lock_guard lock(wrapped_mutex);
  return wrapped().at(io);
}

// What a follower learns from a message of a leader before raft handles it: an AppendEntries
// whose previous entry its log holds makes its log the leader's up to the last entry it carries
// (raft truncates what conflicts and appends the rest); a snapshot is the leader's up to its end.
void learn_match(raft_io* io, const raft* r, const raft_message& message) {
  std::optional<MatchedPrefix> seen;
  if (message.type == RAFT_IO_APPEND_ENTRIES) {
    const raft_append_entries& args = message.append_entries;
    if (args.term >= r->current_term && holds_entry(r, args.prev_log_index, args.prev_log_term)) {
      seen = MatchedPrefix{args.term, args.prev_log_index + args.n_entries};
    }
  } else if (message.type == RAFT_IO_INSTALL_SNAPSHOT) {
    const raft_install_snapshot& args = message.install_snapshot;
    if (args.term >= r->current_term) {
      seen = snapshot_match(MatchedPrefix{args.term, args.last_index}, r->log.snapshot.last_index);
    }
  }
  if (!seen) return;
  std::lock_guard lock(wrapped_mutex);
  wrapped().at(io).match.learn(*seen);
}

int send(raft_io* io, raft_io_send* request, const raft_message* message, raft_io_send_cb cb) {
  Wrapped entry;
  {
    std::lock_guard lock(wrapped_mutex);
    entry = wrapped().at(io);
  }
  if (message->type == RAFT_IO_APPEND_ENTRIES_RESULT &&
      message->append_entries_result.rejected != 0) {
    const auto* r = static_cast<const raft*>(io->data);
    const raft_append_entries_result& result = message->append_entries_result;
    if (const std::optional<std::uint64_t> answer = compacted_previous_answer(
            result.rejected, r->log.snapshot.last_index, result.last_log_index)) {
      raft_message answered = *message;
      answered.append_entries_result.rejected = 0;
      answered.append_entries_result.last_log_index = *answer;
      compacted_answers.fetch_add(1, std::memory_order_relaxed);
      return entry.send(io, request, &answered, cb);
    }
  }
  if (message->type == RAFT_IO_APPEND_ENTRIES_RESULT &&
      message->append_entries_result.rejected == 0) {
    const raft_append_entries_result& result = message->append_entries_result;
    const std::uint64_t reportable = entry.match.reportable(result.term, result.last_log_index);
    if (reportable != result.last_log_index) {
      // Both raft_io implementations copy or encode the message before send returns.
      raft_message capped = *message;
      capped.append_entries_result.last_log_index = reportable;
      holds.fetch_add(1, std::memory_order_relaxed);
      return entry.send(io, request, &capped, cb);
    }
  }
  return entry.send(io, request, message, cb);
}

void receive(raft_io* io, raft_message* message) {
  // raft_init points io->data at its raft instance.
  const auto* r = static_cast<const raft*>(io->data);
  learn_match(io, r, *message);
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

std::optional<std::uint64_t> compacted_previous_answer(std::uint64_t rejected,
                                                       std::uint64_t snapshot_last_index,
                                                       std::uint64_t last_stored) {
  // At the snapshot's end raft knows the term, and a mismatch there is a conflict, not a reject.
  if (rejected == 0 || rejected >= snapshot_last_index) return std::nullopt;
  if (last_stored < snapshot_last_index) return std::nullopt;  // installing a snapshot still
  return snapshot_last_index;
}

MatchedPrefix snapshot_match(MatchedPrefix seen, std::uint64_t snapshot_last_index) {
  if (snapshot_last_index > seen.index) seen.index = snapshot_last_index;
  return seen;
}

void FollowerMatch::learn(MatchedPrefix seen) {
  if (seen.term > term_) {
    term_ = seen.term;
    index_ = seen.index;
  } else if (seen.term == term_ && seen.index > index_) {
    index_ = seen.index;
  }
}

std::uint64_t FollowerMatch::reportable(std::uint64_t term, std::uint64_t last_stored) const {
  if (term != term_) return last_stored;  // nothing known of that leader: as raft reports it
  return last_stored < index_ ? last_stored : index_;
}

bool holds_entry(const raft* r, std::uint64_t index, std::uint64_t term) {
  if (index == 0) return true;
  if (index == r->log.snapshot.last_index && index != 0) return term == r->log.snapshot.last_term;
  const std::optional<std::uint64_t> held = term_in_log(r, index);
  return held && *held == term;
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
  if (r->io->start == &start) {
    // Installed already: a new raft instance on the same raft_io (the simulator restarts a
    // crashed node so) knows nothing of what the closed one had matched.
    wrapped().at(r->io).match = FollowerMatch{};
    return;
  }
  // A raft_io at the address of a closed one replaces its entry.
  wrapped()[r->io] = Wrapped{r->io->start, nullptr, r->io->send, FollowerMatch{}};
  r->io->start = &start;
  r->io->send = &send;
}

std::uint64_t commit_rule_holds() { return holds.load(std::memory_order_relaxed); }

std::uint64_t commit_rule_compacted_answers() {
  return compacted_answers.load(std::memory_order_relaxed);
}

}  // namespace turnstile::net
