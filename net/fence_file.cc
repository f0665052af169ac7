#include "net/fence_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "net/clock.h"
#include "net/log.h"

namespace turnstile::net {
namespace {

constexpr auto kRetryFirst = std::chrono::milliseconds(50);
constexpr auto kRetryMax = std::chrono::milliseconds(1000);
constexpr const char* kSeeDocs = "see docs/fence-journal.md";

std::string errno_text(const char* step, int error) {
  return std::string(step) + ": " + std::strerror(error);
}

// The directory that holds `path`, for the fsync that makes a new file's entry durable.
std::string parent_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Closes the fd unless released: the file lock goes with it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

}  // namespace

namespace {

std::string refusal(const std::string& name, const std::string& what) {
  return name + " " + what + "; refusing to start (" + kSeeDocs + ")";
}

// Locks the open file and checks that it may be read: a regular file no longer than a journal.
// nullopt, or why start-up is refused.
std::optional<std::string> lock_and_check(int fd, const std::string& name) {
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return name + " is locked by another process (is another turnstiled using it?)";
    }
    return refusal(name, errno_text("cannot be locked", errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0)
    return refusal(name, errno_text("cannot be examined (fstat)", errno));
  if (!S_ISREG(info.st_mode)) return refusal(name, "is not a regular file");
  // A bigger file is not ours to interpret (and may be huge): refuse without reading it.
  if (info.st_size > static_cast<off_t>(core::kJournalFileBytes)) {
    return refusal(name, "is " + std::to_string(info.st_size) +
                             " bytes long, but a fence state file is empty or exactly " +
                             std::to_string(core::kJournalFileBytes) + " bytes");
  }
  return std::nullopt;
}

// Reads the file (one byte more than a journal at most) and recovers the journal from it; or why
// start-up is refused.
std::variant<core::JournalRecovery, std::string> read_journal(int fd, const std::string& name) {
  std::array<std::uint8_t, core::kJournalFileBytes + 1> bytes{};
  std::size_t size = 0;
  while (size < bytes.size()) {
    const ssize_t got =
        ::pread(fd, bytes.data() + size, bytes.size() - size, static_cast<off_t>(size));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return refusal(name, errno_text("cannot be read", errno));
    if (got == 0) break;
    size += static_cast<std::size_t>(got);
  }
  core::JournalRecovery recovery =
      core::recover_journal(std::span<const std::uint8_t>(bytes.data(), size));
  if (recovery.outcome == core::JournalRecovery::Outcome::kRefused) {
    return refusal(name, recovery.problem);
  }
  return recovery;
}

}  // namespace

std::variant<std::unique_ptr<FenceFile>, std::string> FenceFile::open(const std::string& path,
                                                                      const TestOptions& test) {
  using Result = std::variant<std::unique_ptr<FenceFile>, std::string>;
  const std::string name = "fence state file " + path;
  const auto refuse = [&](const std::string& why) { return Result(std::in_place_index<1>, why); };

  FdGuard fd{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (fd.fd < 0) return refuse(refusal(name, errno_text("cannot be opened", errno)));
  if (std::optional<std::string> why = lock_and_check(fd.fd, name)) return refuse(*why);
  std::variant<core::JournalRecovery, std::string> read = read_journal(fd.fd, name);
  if (auto* why = std::get_if<std::string>(&read)) return refuse(*why);
  const core::JournalRecovery& recovery = std::get<core::JournalRecovery>(read);

  std::unique_ptr<FenceFile> file(new FenceFile(
      path, fd.release(), recovery, shifted_wall_clock_ns(test.wall_clock_offset_s), test));
  if (file->journal_.exhausted()) {
    return refuse(refusal(name,
                          "has no fence left: fence space exhausted (the counter is at the top of "
                          "the 64-bit space)"));
  }
  const std::uint64_t first_fence = file->journal_.last_handed_out() + 1;
  if (std::optional<std::string> why = file->reserve_first()) return refuse(refusal(name, *why));
  file->log_startup(name, recovery, first_fence);
  return Result(std::in_place_index<0>, std::move(file));
}

// The first reservation is durable before anything is granted: no thread runs yet.
std::optional<std::string> FenceFile::reserve_first() {
  const std::optional<core::JournalWrite> write = journal_.begin_write();
  if (!write) return "has no fence left to reserve: fence space exhausted";
  std::string error;
  if (!write_durably(*write, error)) {
    journal_.end_write(write->seq, false);
    return "cannot be written, so no fence can be reserved: " + error;
  }
  journal_.end_write(write->seq, true);
  return std::nullopt;
}

void FenceFile::log_startup(const std::string& name, const core::JournalRecovery& recovery,
                            std::uint64_t first_fence) {
  const bool recovered = recovery.outcome == core::JournalRecovery::Outcome::kRecovered;
  startup_summary_ = name + ": " +
                     (recovered ? "recovered (seq " + std::to_string(recovery.record.seq) +
                                      ", ceiling " + std::to_string(recovery.record.ceiling) + ")"
                                : std::string("fresh")) +
                     "; fences start at " + std::to_string(first_fence) + "; durable ceiling " +
                     std::to_string(journal_.durable_ceiling());
  log_event(LogLevel::kInfo, "fence_journal_open", startup_summary_,
            {{"path", path_},
             {"recovered", recovered},
             {"recovered_seq", recovered ? recovery.record.seq : 0},
             {"recovered_ceiling", recovered ? recovery.record.ceiling : 0},
             {"first_fence", first_fence},
             {"durable_ceiling", journal_.durable_ceiling()}});
}

namespace {
core::FenceJournalConfig journal_config(const FenceFile::TestOptions& test) {
  core::FenceJournalConfig config;
  if (test.range != 0) config.range = test.range;
  return config;
}
}  // namespace

FenceFile::FenceFile(std::string path, int fd, const core::JournalRecovery& recovery,
                     std::uint64_t wall_ns, const TestOptions& test)
    : path_(std::move(path)),
      fd_(fd),
      journal_(journal_config(test), recovery, wall_ns),
      injected_failures_left_(test.write_failures) {}

FenceFile::~FenceFile() {
  stop_writer();
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

core::FenceBlock FenceFile::take(std::uint64_t want) {
  core::FenceBlock block;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    block = journal_.take(want);
    wake = journal_.write_wanted();
  }
  if (wake) wake_.notify_one();
  return block;
}

void FenceFile::start_writer() {
  if (!writer_.joinable()) writer_ = std::thread([this] { writer_loop(); });
}

void FenceFile::stop_writer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (writer_.joinable()) writer_.join();
}

bool FenceFile::write_durably(const core::JournalWrite& write, std::string& error) const {
  std::size_t done = 0;
  while (done < write.size) {
    const ssize_t wrote = ::pwrite(fd_, write.bytes.data() + done, write.size - done,
                                   static_cast<off_t>(write.offset + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      error = errno_text("pwrite", wrote < 0 ? errno : EIO);
      return false;
    }
    done += static_cast<std::size_t>(wrote);
  }
  if (::fsync(fd_) != 0) {
    error = errno_text("fsync", errno);
    return false;
  }
  if (write.creates_file) {
    const std::string directory = parent_directory(path_);
    const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
      error = errno_text(("open of directory " + directory).c_str(), errno);
      return false;
    }
    const bool synced = ::fsync(dir_fd) == 0;
    const int sync_error = errno;
    ::close(dir_fd);
    if (!synced) {
      error = errno_text(("fsync of directory " + directory).c_str(), sync_error);
      return false;
    }
  }
  return true;
}

void FenceFile::writer_loop() {
  auto retry_delay = kRetryFirst;
  bool failing = false;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || journal_.write_wanted(); });
    if (stopping_) return;
    const std::optional<core::JournalWrite> write = journal_.begin_write();
    if (!write) continue;
    lock.unlock();
    std::string error;
    bool ok = false;
    if (injected_failures_left_ > 0) {
      --injected_failures_left_;
      error = "fsync: Input/output error (injected by --test-fence-write-failures)";
    } else {
      ok = write_durably(*write, error);
    }
    lock.lock();
    journal_.end_write(write->seq, ok);
    if (ok) {
      const std::uint64_t ceiling = journal_.durable_ceiling();
      lock.unlock();
      if (failing) {
        log_event(LogLevel::kInfo, "fence_reservation_recovered",
                  "fence state file " + path_ + ": written again; durable ceiling " +
                      std::to_string(ceiling),
                  {{"path", path_}, {"seq", write->seq}, {"durable_ceiling", ceiling}});
      } else {
        log_event(LogLevel::kDebug, "fence_reservation",
                  "fence state file " + path_ + ": reserved up to " + std::to_string(ceiling),
                  {{"path", path_}, {"seq", write->seq}, {"durable_ceiling", ceiling}});
      }
      lock.lock();
      failing = false;
      retry_delay = kRetryFirst;
      continue;
    }
    failing = true;
    const std::uint64_t ceiling = journal_.durable_ceiling();
    lock.unlock();
    log_event(LogLevel::kError, "fence_reservation_failed",
              "fence state file " + path_ + ": cannot reserve fences beyond " +
                  std::to_string(ceiling) + ": " + error +
                  "; grants that need a new fence fail with error until a write succeeds; "
                  "retrying in " +
                  std::to_string(retry_delay.count()) + " ms",
              {{"path", path_},
               {"durable_ceiling", ceiling},
               {"error", error},
               {"retry_ms", static_cast<long long>(retry_delay.count())}});
    lock.lock();
    wake_.wait_for(lock, retry_delay, [this] { return stopping_; });
    retry_delay = std::min(retry_delay * 2, kRetryMax);
  }
}

}  // namespace turnstile::net
