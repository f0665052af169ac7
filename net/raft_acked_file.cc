#include "net/raft_acked_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace turnstile::net {

namespace {

// A failed write is answered this long after it failed.
constexpr auto kFailurePause = std::chrono::milliseconds(100);

bool write_all(int fd, const std::uint8_t* bytes, std::size_t size, std::uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, bytes, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

}  // namespace

struct AckedFile::Job {
  uv_work_t work{};
  AckedFile* file = nullptr;
  core::SlotWrite write;
  std::function<void(bool)> done;
  bool inject_failure = false;
  bool ok = false;
  std::string error;  // what failed, when !ok
};

std::variant<core::SlotRecovery, std::string> AckedFile::read(const std::string& dir) {
  const std::string path = dir + "/" + kAckedFileName;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return core::SlotRecovery{};  // fresh
    return "cannot open " + path + ": " + std::strerror(errno);
  }
  std::vector<std::uint8_t> bytes;
  std::uint8_t buffer[256];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string error = "cannot read " + path + ": " + std::strerror(errno);
      ::close(fd);
      return error;
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
    if (bytes.size() > 4096) break;  // far beyond any valid size: recovery refuses it
  }
  ::close(fd);
  return core::recover_slots(core::kAckedFormat, bytes);
}

AckedFile::AckedFile(uv_loop_t* loop, std::string dir, LogFn log)
    : loop_(loop), dir_(std::move(dir)), path_(dir_ + "/" + kAckedFileName), log_(std::move(log)) {}

AckedFile::~AckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AckedFile::write(const core::SlotWrite& write, std::function<void(bool ok)> done) {
  auto job = std::make_unique<Job>();
  job->file = this;
  job->write = write;
  job->done = std::move(done);
  unsigned left = failures_to_inject_.load();
  while (left > 0 && !failures_to_inject_.compare_exchange_weak(left, left - 1)) {
  }
  job->inject_failure = left > 0;
  job->work.data = job.get();
  if (uv_queue_work(loop_, &job->work, &AckedFile::run_job, &AckedFile::after_job) == 0) {
    job.release();  // after_job owns it
    return;
  }
  // The pool refused the job (it does not, short of a closed loop): do it here.
  run_job(&job->work);
  after_job(&job->work, 0);
  job.release();
}

// On the pool's thread: the only place the file is touched after read().
void AckedFile::run_job(uv_work_t* work) {
  auto* job = static_cast<Job*>(work->data);
  AckedFile* file = job->file;
  auto failed = [job](std::string what) {
    job->ok = false;
    job->error = std::move(what) + ": " + std::strerror(errno);
    std::this_thread::sleep_for(kFailurePause);
  };
  if (job->inject_failure) {
    errno = EIO;
    failed("writing " + file->path_ + " (injected)");
    return;
  }
  const core::SlotWrite& write = job->write;
  if (write.creates_file) {
    // A new file is written whole beside its name, then renamed: a crash in the middle leaves no
    // file (nothing was acknowledged yet), never a short one that recovery would refuse.
    const std::string fresh = file->dir_ + "/" + kAckedFreshName;
    if (file->fd_ >= 0) ::close(file->fd_);
    file->fd_ = ::open(fresh.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (file->fd_ < 0) return failed("opening " + fresh);
    if (!write_all(file->fd_, write.bytes.data(), write.size, write.offset)) {
      return failed("writing " + fresh);
    }
    if (::fdatasync(file->fd_) != 0) return failed("syncing " + fresh);
    if (::rename(fresh.c_str(), file->path_.c_str()) != 0) {
      return failed("renaming " + fresh + " to " + file->path_);
    }
  } else {
    if (file->fd_ < 0) {
      file->fd_ = ::open(file->path_.c_str(), O_RDWR | O_CLOEXEC);
      if (file->fd_ < 0) return failed("opening " + file->path_);
    }
    if (!write_all(file->fd_, write.bytes.data(), write.size, write.offset)) {
      return failed("writing " + file->path_);
    }
    if (::fdatasync(file->fd_) != 0) return failed("syncing " + file->path_);
  }
  if (write.creates_file) {
    const int dir = ::open(file->dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return failed("opening " + file->dir_);
    const int rc = ::fsync(dir);
    ::close(dir);
    if (rc != 0) return failed("syncing " + file->dir_);
  }
  job->ok = true;
}

void AckedFile::after_job(uv_work_t* work, int) {
  std::unique_ptr<Job> job(static_cast<Job*>(work->data));
  AckedFile* file = job->file;
  ++file->writes_;
  if (!job->ok) {
    ++file->failures_;
    // The first failure, then one in a hundred: a failing disk fails every write.
    if (file->failures_ == 1 || file->failures_ % 100 == 0) {
      file->log_("the acknowledged-index record could not be written (" + job->error +
                 "); entries wait until it is (" + std::to_string(file->failures_) +
                 " failures so far)");
    }
  }
  job->done(job->ok);
}

}  // namespace turnstile::net
