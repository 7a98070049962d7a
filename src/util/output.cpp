#include "fusesim/util/output.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "fusesim/util/error.hpp"

namespace fusesim {

namespace output_detail {
namespace {
// The temporary files being written. Static because a signal handler can reach nothing else; a slot
// is filled (path copied, then marked ready) before its file is created, so the handler never misses
// one, and it only calls unlink(), which is async-signal-safe.
constexpr int kSlots = 8;
constexpr std::size_t kMaxPath = 4096;
std::atomic<int> slot_state[kSlots];  // 0 free, 1 being filled, 2 ready
char slot_path[kSlots][kMaxPath];
}  // namespace

int register_temporary(const std::string& path) {
  if (path.size() >= kMaxPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!slot_state[i].compare_exchange_strong(expected, 1)) continue;
    std::memcpy(slot_path[i], path.c_str(), path.size() + 1);
    slot_state[i].store(2);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0) slot_state[slot].store(0);
}

namespace {
extern "C" void remove_and_reraise(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (slot_state[i].load() == 2) ::unlink(slot_path[i]);
  // SA_RESETHAND restored the default action: the process ends as the signal would have ended it.
  ::raise(sig);
}
}  // namespace
}  // namespace output_detail

void remove_temporary_files_on_interrupt() {
  struct sigaction sa {};
  sa.sa_handler = output_detail::remove_and_reraise;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

namespace {

[[noreturn]] void refuse(const std::string& path, std::string_view option, const std::string& message) {
  throw InputError(path, std::string(option), message);
}

std::string folder_of(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

enum class Target { missing, regular, stream };

struct Resolved {
  std::string path;  // where to write: the final target of any symbolic links
  Target kind = Target::missing;
  mode_t mode = 0;   // an existing regular file's permissions, kept by the replacement
};

// Follows `path` to what it names and decides how to write it (see output.hpp).
Resolved resolve(const std::string& path, std::string_view option) {
  if (path.empty()) refuse(path, option, "an empty path names no file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) refuse(path, option, "is a directory; name a file in it");
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) return {path, Target::stream, 0};
    if (!S_ISREG(st.st_mode)) refuse(path, option, "is a block device or another special file; not written");
    // /dev/stdout, /dev/fd/N, /proc/self/fd/N redirected to a file: that is a stream the caller opened
    // (maybe for appending), not a file to replace.
    if (path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0) return {path, Target::stream, 0};
    char* real = ::realpath(path.c_str(), nullptr);
    if (real == nullptr) refuse(path, option, std::string("cannot resolve: ") + std::strerror(errno));
    Resolved r{real, Target::regular, static_cast<mode_t>(st.st_mode & 07777)};
    std::free(real);
    if (::access(r.path.c_str(), W_OK) != 0)
      refuse(path, option, std::string("cannot write '") + r.path + "': " + std::strerror(errno));
    return r;
  }
  if (errno != ENOENT) refuse(path, option, std::string("cannot write: ") + std::strerror(errno));
  // Missing, or a symbolic link to something missing: follow the links by hand to the name to create.
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat ls {};
    if (::lstat(p.c_str(), &ls) != 0 || !S_ISLNK(ls.st_mode)) {
      const std::string folder = folder_of(p);
      struct stat fs {};
      if (::stat(folder.c_str(), &fs) != 0 || !S_ISDIR(fs.st_mode))
        refuse(path, option, "the folder '" + folder + "' does not exist");
      return {p, Target::missing, 0};
    }
    std::string target(static_cast<std::size_t>(ls.st_size > 0 ? ls.st_size : 4096), '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) refuse(path, option, std::string("cannot read the link: ") + std::strerror(errno));
    target.resize(static_cast<std::size_t>(n));
    p = !target.empty() && target.front() == '/' ? target : folder_of(p) + "/" + target;
  }
  refuse(path, option, "too many levels of symbolic links");
}

// Writes all of `content` to `fd`, through short writes and interrupted calls.
bool write_all(int fd, std::string_view content) {
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void write_in_place(const std::string& path, std::string_view content, std::string_view option) {
  if (path == "-") {
    std::fflush(stdout);
    if (!write_all(STDOUT_FILENO, content)) refuse(path, option, std::string("cannot write to standard output: ") + std::strerror(errno));
    return;
  }
  // O_APPEND: a stream redirected to a file keeps what was written to it before.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) refuse(path, option, std::string("cannot open for writing: ") + std::strerror(errno));
  const bool ok = write_all(fd, content);
  const int saved = errno;
  ::close(fd);
  if (!ok) refuse(path, option, std::string("write failed: ") + std::strerror(saved));
}

void write_replacing(const Resolved& target, const std::string& path, std::string_view content, std::string_view option) {
  const std::string tmp = target.path + ".tmp." + std::to_string(::getpid());
  const int slot = output_detail::register_temporary(tmp);
  const auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    output_detail::unregister_temporary(slot);
    refuse(path, option, what + ": " + std::strerror(err));
  };
  ::unlink(tmp.c_str());  // a leftover of an earlier process with this pid
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    output_detail::unregister_temporary(slot);
    refuse(path, option, "cannot create '" + tmp + "': " + std::strerror(err));
  }
  if (target.kind == Target::regular && ::fchmod(fd, target.mode) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot keep the permissions of '" + target.path + "'", err);
  }
  if (!write_all(fd, content) || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("write failed", err);
  }
  if (::close(fd) != 0) fail("write failed", errno);
  if (::rename(tmp.c_str(), target.path.c_str()) != 0) fail("cannot rename the finished file into place", errno);
  output_detail::unregister_temporary(slot);
}

}  // namespace

void check_output_path(const std::string& path, std::string_view option) {
  if (path != "-") resolve(path, option);
}

void write_output_file(const std::string& path, std::string_view content, std::string_view option) {
  if (path == "-") return write_in_place(path, content, option);
  const Resolved target = resolve(path, option);
  if (target.kind == Target::stream) return write_in_place(target.path, content, option);
  write_replacing(target, path, content, option);
}

std::string gzip_compress(std::string_view content) {
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper rather than zlib's.
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zlib: deflateInit2 failed");
  std::string out;
  std::string buffer(std::size_t{1} << 20, '\0');
  // zlib counts in uInt: the input goes in pieces of at most 1 GiB.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  std::size_t in_pos = 0;
  int rc = Z_OK;
  do {
    const std::size_t in_now = std::min(kPiece, content.size() - in_pos);
    const bool last = in_pos + in_now == content.size();
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(content.data() + in_pos));
    z.avail_in = static_cast<uInt>(in_now);
    do {
      z.next_out = reinterpret_cast<Bytef*>(buffer.data());
      z.avail_out = static_cast<uInt>(buffer.size());
      rc = deflate(&z, last ? Z_FINISH : Z_NO_FLUSH);
      if (rc == Z_STREAM_ERROR) {
        deflateEnd(&z);
        throw std::runtime_error("zlib: deflate failed");
      }
      out.append(buffer.data(), buffer.size() - z.avail_out);
    } while (z.avail_out == 0 && rc != Z_STREAM_END);
    in_pos += in_now;
  } while (rc != Z_STREAM_END);
  deflateEnd(&z);
  return out;
}

std::string gzip_decompress(std::string_view compressed, std::uint64_t max_bytes) {
  z_stream z{};
  // windowBits 15 + 32: detect a gzip or a zlib header.
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw std::runtime_error("zlib: inflateInit2 failed");
  std::string out;
  std::string buffer(std::size_t{1} << 20, '\0');
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  std::size_t in_pos = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0) {
      if (in_pos == compressed.size()) break;
      const std::size_t in_now = std::min(kPiece, compressed.size() - in_pos);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data() + in_pos));
      z.avail_in = static_cast<uInt>(in_now);
      in_pos += in_now;
    }
    z.next_out = reinterpret_cast<Bytef*>(buffer.data());
    z.avail_out = static_cast<uInt>(buffer.size());
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && z.avail_in == 0)) {
      inflateEnd(&z);
      throw std::runtime_error("not a valid gzip stream");
    }
    out.append(buffer.data(), buffer.size() - z.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&z);
      throw std::length_error("decompressed content exceeds the limit");
    }
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("the gzip stream ends early");
  return out;
}

void write_maybe_gzipped(const std::string& path, std::string_view content, std::string_view option) {
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz)
    write_output_file(path, gzip_compress(content), option);
  else
    write_output_file(path, content, option);
}

}  // namespace fusesim
