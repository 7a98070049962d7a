#include "fusesim/util/output.hpp"

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "fusesim/util/error.hpp"

namespace fusesim {

void write_file_atomically(const std::string& path, std::string_view content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "$", "cannot open for writing");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw InputError(path, "$", "write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(path, "$", "cannot rename the finished file into place");
  }
}

}  // namespace fusesim
