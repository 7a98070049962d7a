#include <string>

#include "fusesim/topo/cluster.hpp"

namespace fusesim::topo {

std::string to_string(Dtype d) {
  switch (d) {
    case Dtype::fp32: return "fp32";
    case Dtype::tf32: return "tf32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
  }
  return "?";
}

Dtype parse_dtype(const JsonValue& v) {
  const std::string s = v.as_string();
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8})
    if (to_string(d) == s) return d;
  v.fail("'" + s + "' is not a data type (fp32, tf32, bf16, fp16, fp8)");
}

int bytes_per_element(Dtype d) {
  switch (d) {
    case Dtype::fp32:
    case Dtype::tf32: return 4;
    case Dtype::bf16:
    case Dtype::fp16: return 2;
    case Dtype::fp8: return 1;
  }
  return 0;
}

}  // namespace fusesim::topo
