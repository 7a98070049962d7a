#include "fusesim/util/output.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include <zlib.h>

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

void write_maybe_gzipped(const std::string& path, std::string_view content) {
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz)
    write_file_atomically(path, gzip_compress(content));
  else
    write_file_atomically(path, content);
}

}  // namespace fusesim
