#include "fusesim/sched/dataflow.hpp"

namespace fusesim::sched {

std::int64_t DataflowProgram::buffer_elements() const {
  std::int64_t total = 0;
  for (const BufferDecl& b : buffers) total += b.rows * b.cols;
  return total;
}

}  // namespace fusesim::sched
