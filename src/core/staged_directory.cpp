// Atomic directory output (latentllm/files.hpp): checkpoints and generated test models.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"

namespace latentllm::core {
namespace {

namespace fs = std::filesystem;

// <out>.partial-<pid> left by a run that was killed while writing (its process is gone): removed, so
// interrupted runs do not pile up multi-gigabyte debris.
void remove_stale_partials(const fs::path& out) {
  const std::string prefix = out.filename().string() + ".partial-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix) || name.size() == prefix.size()) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const long pid = std::stol(pid_text);
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) log_info("removed {} (left by an interrupted run)", e.path().string());
  }
}

// Checks that out's parent exists (creating it) and takes a file.
void check_writable(const fs::path& out) {
  const fs::path parent = out.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) {
    throw IoError(fmt::format("{}: cannot create the parent directory {} ({})", out.string(), parent.string(),
                              ec.message()));
  }
  const fs::path probe = parent / fmt::format(".{}.probe-{}", out.filename().string(), ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw IoError(fmt::format("{}: output directory is not writable (cannot create a file in {}: {})", out.string(),
                              parent.string(), std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

fs::path normalized_dir(const fs::path& p) {
  fs::path out = fs::absolute(p).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();
  return out;
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open ({})", dir.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("{}: sync failed ({})", dir.string(), std::strerror(err)));
}

StagedDirectory::StagedDirectory(const fs::path& out, bool overwrite) : out_(normalized_dir(out)) {
  if (fs::exists(out_) && !overwrite) {
    throw IoError(fmt::format("{}: output directory exists (use --force to replace it)", out_.string()));
  }
  check_writable(out_);
  remove_stale_partials(out_);
  tmp_ = out_.parent_path() / fmt::format("{}.partial-{}", out_.filename().string(), ::getpid());
  std::error_code ec;
  fs::remove_all(tmp_, ec);
  if (!fs::create_directories(tmp_, ec) || ec) {
    throw IoError(fmt::format("{}: cannot create output directory ({})", tmp_.string(), ec.message()));
  }
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void StagedDirectory::commit() {
  sync_directory(tmp_);
  std::error_code ec;
  if (fs::exists(out_)) {
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, out_.c_str(), RENAME_EXCHANGE) == 0) {
      committed_ = true;
      fs::remove_all(tmp_, ec);  // now the old directory
      sync_directory(out_.parent_path());
      return;
    }
    const fs::path old = out_.parent_path() / fmt::format("{}.old-{}", out_.filename().string(), ::getpid());
    fs::rename(out_, old, ec);
    if (ec) throw IoError(fmt::format("{}: cannot move the existing directory aside ({})", out_.string(), ec.message()));
    fs::rename(tmp_, out_, ec);
    if (ec) {
      std::error_code back;
      fs::rename(old, out_, back);
      throw IoError(fmt::format("{}: cannot rename into place ({})", out_.string(), ec.message()));
    }
    committed_ = true;
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp_, out_, ec);
    if (ec) throw IoError(fmt::format("{}: cannot rename into place ({})", out_.string(), ec.message()));
    committed_ = true;
  }
  sync_directory(out_.parent_path());
}

}  // namespace latentllm::core
