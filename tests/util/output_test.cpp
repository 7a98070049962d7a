// write_output_file: what each kind of path gets (include/fusesim/util/output.hpp). Runnable as an
// ordinary user; a case whose fixture cannot exist here (no /dev/null, root ignoring a read-only
// folder) is skipped with a message.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

namespace fs = std::filesystem;
using fusesim::InputError;
using fusesim::write_output_file;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("fusesim-output-test-" + std::to_string(::getpid()) + "-" +
                                       std::to_string(counter()++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  // Nothing but `expected` in the folder: no temporary file was left behind.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("output: a new file and an existing regular file are written whole, permissions kept", "[util][output]") {
  Scratch s;
  write_output_file(s.file("r.json"), "first\n");
  CHECK(read(s.file("r.json")) == "first\n");
  ::chmod(s.file("r.json").c_str(), 0640);
  write_output_file(s.file("r.json"), "second\n");
  CHECK(read(s.file("r.json")) == "second\n");
  struct stat st {};
  REQUIRE(::stat(s.file("r.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  CHECK(s.names() == std::vector<std::string>{"r.json"});  // no r.json.tmp.<pid> left
}

TEST_CASE("output: a symbolic link stays a link and its target gets the report", "[util][output]") {
  Scratch s;
  write_output_file(s.file("target.json"), "old\n");
  fs::create_symlink("target.json", s.file("link.json"));  // relative, as users make them
  write_output_file(s.file("link.json"), "new\n");
  CHECK(fs::is_symlink(s.file("link.json")));
  CHECK(read(s.file("target.json")) == "new\n");
  // A link to a file that does not exist yet: the file is created where the link points.
  fs::create_symlink(s.file("later.json"), s.file("dangling.json"));
  write_output_file(s.file("dangling.json"), "made\n");
  CHECK(fs::is_symlink(s.file("dangling.json")));
  CHECK(read(s.file("later.json")) == "made\n");
  CHECK(s.names() == std::vector<std::string>{"dangling.json", "later.json", "link.json", "target.json"});
}

TEST_CASE("output: /dev/null is written in place and stays a device", "[util][output]") {
  struct stat before {};
  if (::stat("/dev/null", &before) != 0 || !S_ISCHR(before.st_mode)) {
    WARN("skipped: no /dev/null character device here");
    return;
  }
  write_output_file("/dev/null", "a report nobody reads\n");
  struct stat after {};
  REQUIRE(::lstat("/dev/null", &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_rdev == before.st_rdev);
  CHECK_FALSE(fs::exists("/dev/null.tmp." + std::to_string(::getpid())));
}

TEST_CASE("output: a FIFO is written in place, to the reader at its other end", "[util][output]") {
  Scratch s;
  const std::string fifo = s.file("pipe");
  if (::mkfifo(fifo.c_str(), 0600) != 0) {
    WARN("skipped: cannot make a FIFO here");
    return;
  }
  std::string got;
  std::thread reader([&] { got = read(fifo); });
  write_output_file(fifo, "through the pipe\n");
  reader.join();
  CHECK(got == "through the pipe\n");
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(s.names() == std::vector<std::string>{"pipe"});
}

TEST_CASE("output: a folder, a missing folder and a read-only folder are refused, nothing written", "[util][output]") {
  Scratch s;
  try {
    write_output_file(s.dir.string(), "x", "--output");
    FAIL("a folder was accepted");
  } catch (const InputError& e) {
    CHECK(e.file() == s.dir.string());
    CHECK(e.json_path() == "--output");
    CHECK_THAT(e.message(), Catch::Contains("is a directory"));
  }
  try {
    write_output_file(s.file("missing/r.json"), "x", "--trace");
    FAIL("a missing folder was accepted");
  } catch (const InputError& e) {
    CHECK(e.json_path() == "--trace");
    CHECK_THAT(e.message(), Catch::Contains("the folder '" + s.file("missing") + "' does not exist"));
  }
  CHECK_THROWS_AS(fusesim::check_output_path(s.file("missing/r.json")), InputError);
  CHECK(s.names().empty());

  fs::create_directories(s.file("ro"));
  ::chmod(s.file("ro").c_str(), 0555);
  if (::access(s.file("ro").c_str(), W_OK) == 0) {
    WARN("skipped the read-only folder: this user (root?) may write in it anyway");
  } else {
    try {
      write_output_file(s.file("ro/r.json"), "x");
      FAIL("a read-only folder was written");
    } catch (const InputError& e) {
      CHECK_THAT(e.message(), Catch::Contains("cannot create"));
    }
    CHECK(fs::is_empty(s.file("ro")));
  }
}

TEST_CASE("output: SIGTERM while a report is being written removes its temporary file", "[util][output]") {
  // A child stands in for a fusesim killed midway through a write: it installs the handlers as main()
  // does, registers and creates a temporary file as write_output_file does before it renames, then is
  // terminated. The file must be gone and the child ended by the signal, as without the handler.
  Scratch s;
  const std::string tmp = s.file("report.json.tmp.12345");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    fusesim::remove_temporary_files_on_interrupt();
    if (fusesim::output_detail::register_temporary(tmp) < 0) ::_exit(3);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT, 0600);
    if (fd < 0 || ::write(fd, "half", 4) != 4) ::_exit(4);
    ::raise(SIGTERM);
    ::_exit(5);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK_FALSE(fs::exists(tmp));
  CHECK(s.names().empty());
}
