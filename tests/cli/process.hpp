#pragma once
// Runs the built fusesim binary (FUSESIM_BINARY) in a fresh folder and captures its exit status,
// standard output and standard error.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fusesim::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q(1, '\'');
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A folder of its own for each call, removed by the destructor.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("fusesim-cli-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Files in the folder, the captured streams excluded.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      const std::string name = e.path().filename().string();
      if (name != ".stdout" && name != ".stderr") out.push_back(name);
    }
    return out;
  }

 private:
  std::filesystem::path path_;
};

// Runs `fusesim args...` with the scratch folder as working directory.
inline ProcessResult run_fusesim(const std::vector<std::string>& args, const ScratchDir& dir) {
  std::string cmd = "cd ";
  cmd.append(shell_quote(dir.path().string())).append(" && ").append(shell_quote(FUSESIM_BINARY));
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >.stdout 2>.stderr");
  const int status = std::system(cmd.c_str());
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir.path() / ".stdout");
  r.err = slurp(dir.path() / ".stderr");
  return r;
}

inline std::string source_path(const std::string& relative) { return std::string(FUSESIM_SOURCE_DIR) + "/" + relative; }

}  // namespace fusesim::testing
