// Reference executor. Small, plain float64 arithmetic: the point is the data movement and the order
// of a generated schedule, so every read checks that the elements it touches were written (by an
// initial piece, a task or a transfer) and every output is compared element by element with the
// unpartitioned computation.
#include "fusesim/sched/verify.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "fusesim/util/error.hpp"

namespace fusesim::sched {

std::string to_string(VisitOrder o) {
  switch (o) {
    case VisitOrder::lowest_id: return "lowest-id-first";
    case VisitOrder::highest_id: return "highest-id-first";
    case VisitOrder::seeded_random: return "seeded-random";
  }
  return "?";
}

bool VerifyReport::passed() const { return failures() == 0 && !cases.empty(); }
int VerifyReport::failures() const {
  return static_cast<int>(std::count_if(cases.begin(), cases.end(), [](const VerifyCase& c) { return !c.result.passed; }));
}

namespace {

struct ExecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// splitmix64: a fixed generator, so inputs are the same on every platform and standard library.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

Matrix zeros(std::int64_t rows, std::int64_t cols) {
  return Matrix{rows, cols, std::vector<double>(static_cast<std::size_t>(rows * cols), 0.0)};
}

Matrix matmul(const Matrix& a, const Matrix& b, bool transpose_b) {
  const std::int64_t k = a.cols, n = transpose_b ? b.rows : b.cols;
  if ((transpose_b ? b.cols : b.rows) != k) throw ExecError(fmt::format("GEMM inner dimensions {} and {} differ", k, transpose_b ? b.cols : b.rows));
  Matrix c = zeros(a.rows, n);
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::int64_t l = 0; l < k; ++l) s += a.at(i, l) * (transpose_b ? b.at(j, l) : b.at(l, j));
      c.at(i, j) = s;
    }
  return c;
}

Matrix layernorm(const Matrix& x) {
  Matrix y = zeros(x.rows, x.cols);
  for (std::int64_t i = 0; i < x.rows; ++i) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t j = 0; j < x.cols; ++j) mean += x.at(i, j);
    mean /= static_cast<double>(x.cols);
    for (std::int64_t j = 0; j < x.cols; ++j) var += (x.at(i, j) - mean) * (x.at(i, j) - mean);
    var /= static_cast<double>(x.cols);
    const double inv = 1.0 / std::sqrt(var + 1e-5);
    for (std::int64_t j = 0; j < x.cols; ++j) y.at(i, j) = (x.at(i, j) - mean) * inv;
  }
  return y;
}

Matrix activation(const std::string& kind, const Matrix& in, std::int64_t out_cols) {
  Matrix y = zeros(in.rows, out_cols);
  for (std::int64_t i = 0; i < in.rows; ++i)
    for (std::int64_t j = 0; j < out_cols; ++j) {
      if (kind == "swiglu") {
        const double g = in.at(i, j);
        y.at(i, j) = g / (1.0 + std::exp(-g)) * in.at(i, out_cols + j);
      } else {
        const double x = in.at(i, j);
        y.at(i, j) = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      }
    }
  return y;
}

// The unnormalized softmax weights of query row i, head j over the first `visible` key positions
// (written to w[0 .. visible)), and their sum: shared by attention() and attention_bwd().
double softmax_weights(const Matrix& q, const Matrix& k, std::int64_t i, std::int64_t j, std::int64_t kvh,
                       std::int64_t sample, std::int64_t batch, std::int64_t visible, std::int64_t hd, double scale,
                       std::vector<double>& w) {
  double max_score = -1e300;
  for (std::int64_t p = 0; p < visible; ++p) {
    double s = 0.0;
    for (std::int64_t d = 0; d < hd; ++d) s += q.at(i, j * hd + d) * k.at(p * batch + sample, kvh * hd + d);
    w[static_cast<std::size_t>(p)] = s * scale;
    max_score = std::max(max_score, s * scale);
  }
  double total = 0.0;
  for (std::int64_t p = 0; p < visible; ++p)
    total += (w[static_cast<std::size_t>(p)] = std::exp(w[static_cast<std::size_t>(p)] - max_score));
  return total;
}

// q: the query rows (position q_pos0 onwards, `batch` rows per position); k, v: rows [0,
// kv_positions x batch), kv heads side by side from column 0.
Matrix attention(const Matrix& q, const Matrix& k, const Matrix& v, std::int64_t kv_positions, std::int64_t batch,
                 std::int64_t heads, std::int64_t kv_heads, std::int64_t hd, std::int64_t q_pos0, bool causal) {
  Matrix out = zeros(q.rows, heads * hd);
  const std::int64_t group = heads / kv_heads;
  std::vector<double> w(static_cast<std::size_t>(kv_positions));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::int64_t i = 0; i < q.rows; ++i) {
    const std::int64_t pos = q_pos0 + i / batch, sample = i % batch;
    const std::int64_t visible = causal ? std::min(pos + 1, kv_positions) : kv_positions;
    for (std::int64_t j = 0; j < heads; ++j) {
      const std::int64_t kvh = j / group;
      const double total = softmax_weights(q, k, i, j, kvh, sample, batch, visible, hd, scale, w);
      for (std::int64_t d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (std::int64_t p = 0; p < visible; ++p) acc += w[static_cast<std::size_t>(p)] * v.at(p * batch + sample, kvh * hd + d);
        out.at(i, j * hd + d) = acc / total;
      }
    }
  }
  return out;
}

// ---- gradients ------------------------------------------------------------------------------------

// a^T b: the contraction runs over the rows (tokens) of both.
Matrix matmul_tn(const Matrix& a, const Matrix& b) {
  if (a.rows != b.rows) throw ExecError(fmt::format("wgrad over {} and {} rows", a.rows, b.rows));
  Matrix c = zeros(a.cols, b.cols);
  for (std::int64_t l = 0; l < a.rows; ++l)
    for (std::int64_t i = 0; i < a.cols; ++i) {
      const double x = a.at(l, i);
      for (std::int64_t j = 0; j < b.cols; ++j) c.at(i, j) += x * b.at(l, j);
    }
  return c;
}

// y = (x - mean) r with r = 1/sqrt(var + eps) per row:
// dx = r (dy - mean(dy) - y mean(dy * y)).
Matrix layernorm_bwd(const Matrix& x, const Matrix& dy) {
  if (x.rows != dy.rows || x.cols != dy.cols) throw ExecError("layernorm backward: shapes differ");
  const Matrix y = layernorm(x);
  Matrix dx = zeros(x.rows, x.cols);
  const double n = static_cast<double>(x.cols);
  for (std::int64_t i = 0; i < x.rows; ++i) {
    double mean = 0.0, var = 0.0, mean_dy = 0.0, mean_dyy = 0.0;
    for (std::int64_t j = 0; j < x.cols; ++j) mean += x.at(i, j);
    mean /= n;
    for (std::int64_t j = 0; j < x.cols; ++j) var += (x.at(i, j) - mean) * (x.at(i, j) - mean);
    var /= n;
    const double inv = 1.0 / std::sqrt(var + 1e-5);
    for (std::int64_t j = 0; j < x.cols; ++j) {
      mean_dy += dy.at(i, j);
      mean_dyy += dy.at(i, j) * y.at(i, j);
    }
    mean_dy /= n;
    mean_dyy /= n;
    for (std::int64_t j = 0; j < x.cols; ++j) dx.at(i, j) = inv * (dy.at(i, j) - mean_dy - y.at(i, j) * mean_dyy);
  }
  return dx;
}

// SwiGLU out = silu(g) u: d g = dout u silu'(g), d u = dout silu(g), silu'(g) = s (1 + g (1 - s)),
// s = sigmoid(g). GELU (tanh form) y = x/2 (1 + th), th = tanh(c (x + a x^3)):
// y' = (1 + th)/2 + x/2 (1 - th^2) c (1 + 3 a x^2).
Matrix activation_bwd(const std::string& kind, const Matrix& in, const Matrix& dout) {
  const std::int64_t f = dout.cols;
  if (in.rows != dout.rows || in.cols != (kind == "swiglu" ? 2 : 1) * f)
    throw ExecError(fmt::format("activation backward: input {}x{} for gradient {}x{}", in.rows, in.cols, dout.rows, f));
  Matrix d = zeros(in.rows, in.cols);
  constexpr double c = 0.7978845608028654, a = 0.044715;
  for (std::int64_t i = 0; i < in.rows; ++i)
    for (std::int64_t j = 0; j < f; ++j) {
      const double x = in.at(i, j), g = dout.at(i, j);
      if (kind == "swiglu") {
        const double s = 1.0 / (1.0 + std::exp(-x)), u = in.at(i, f + j);
        d.at(i, j) = g * u * s * (1.0 + x * (1.0 - s));
        d.at(i, f + j) = g * x * s;
      } else {
        const double th = std::tanh(c * (x + a * x * x * x));
        d.at(i, j) = g * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * a * x * x));
      }
    }
  return d;
}

struct AttentionGrads {
  Matrix dq, dk, dv;
};

// Backward of attention() for the query rows of q (see there), given the forward output o and
// dout = dL/do. With P the softmax row and D = dout . o (= sum_p P_p dP_p):
// dv_p += P_p dout, dP_p = dout . v_p, ds_p = P_p (dP_p - D), dq += scale ds_p k_p, dk_p += scale ds_p q.
// Query heads of one group add into their kv head's dk, dv.
AttentionGrads attention_bwd(const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& o, const Matrix& dout,
                             std::int64_t kv_positions, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                             std::int64_t hd, std::int64_t q_pos0, bool causal) {
  AttentionGrads g{zeros(q.rows, heads * hd), zeros(kv_positions * batch, kv_heads * hd),
                   zeros(kv_positions * batch, kv_heads * hd)};
  const std::int64_t group = heads / kv_heads;
  std::vector<double> p_row(static_cast<std::size_t>(kv_positions));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::int64_t i = 0; i < q.rows; ++i) {
    const std::int64_t pos = q_pos0 + i / batch, sample = i % batch;
    const std::int64_t visible = causal ? std::min(pos + 1, kv_positions) : kv_positions;
    for (std::int64_t j = 0; j < heads; ++j) {
      const std::int64_t kvh = j / group;
      const double total = softmax_weights(q, k, i, j, kvh, sample, batch, visible, hd, scale, p_row);
      double D = 0.0;
      for (std::int64_t d = 0; d < hd; ++d) D += dout.at(i, j * hd + d) * o.at(i, j * hd + d);
      for (std::int64_t p = 0; p < visible; ++p) {
        const double P = p_row[static_cast<std::size_t>(p)] / total;
        const std::int64_t kr = p * batch + sample;
        double dP = 0.0;
        for (std::int64_t d = 0; d < hd; ++d) dP += dout.at(i, j * hd + d) * v.at(kr, kvh * hd + d);
        const double ds = P * (dP - D) * scale;
        for (std::int64_t d = 0; d < hd; ++d) {
          g.dv.at(kr, kvh * hd + d) += P * dout.at(i, j * hd + d);
          g.dq.at(i, j * hd + d) += ds * k.at(kr, kvh * hd + d);
          g.dk.at(kr, kvh * hd + d) += ds * q.at(i, j * hd + d);
        }
      }
    }
  }
  return g;
}

Matrix cols_of(const Matrix& m, std::int64_t col0, std::int64_t cols) {
  Matrix r = zeros(m.rows, cols);
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) r.at(i, j) = m.at(i, col0 + j);
  return r;
}

Matrix add(const Matrix& a, const Matrix& b) {
  if (a.rows != b.rows || a.cols != b.cols) throw ExecError(fmt::format("add of {}x{} and {}x{}", a.rows, a.cols, b.rows, b.cols));
  Matrix c = a;
  for (std::size_t i = 0; i < c.values.size(); ++i) c.values[i] += b.values[i];
  return c;
}

std::int64_t attr(const DataflowProgram& p, const std::string& key) {
  auto it = p.attributes.find(key);
  if (it == p.attributes.end()) throw ExecError(fmt::format("dataflow program lacks attribute '{}'", key));
  return it->second;
}

const Matrix& tensor(const std::map<std::string, Matrix>& t, const std::string& name) {
  auto it = t.find(name);
  if (it == t.end()) throw ExecError(fmt::format("no tensor '{}'", name));
  return it->second;
}

// ---- the executor ---------------------------------------------------------------------------------

struct Buf {
  Matrix m;
  std::vector<char> valid;
};

class Run {
 public:
  Run(const Schedule& s, const std::map<std::string, Matrix>& tensors)
      : g_(s.graph), p_(*s.dataflow), tensors_(tensors) {
    for (const BufferDecl& d : p_.buffers) {
      Buf b{zeros(d.rows, d.cols), std::vector<char>(static_cast<std::size_t>(d.rows * d.cols), 0)};
      for (const Piece& piece : d.init) {
        const Matrix& src = tensor(tensors_, piece.tensor);
        check_rect(piece.from, src.rows, src.cols, "piece of " + piece.tensor);
        check_rect(Rect{piece.to_row, piece.to_col, piece.from.rows, piece.from.cols}, d.rows, d.cols, "buffer " + d.name);
        for (std::int64_t i = 0; i < piece.from.rows; ++i)
          for (std::int64_t j = 0; j < piece.from.cols; ++j) {
            b.m.at(piece.to_row + i, piece.to_col + j) = src.at(piece.from.row0 + i, piece.from.col0 + j);
            b.valid[static_cast<std::size_t>((piece.to_row + i) * d.cols + piece.to_col + j)] = 1;
          }
      }
      bufs_.push_back(std::move(b));
    }
  }

  void run(VisitOrder order, std::uint64_t seed);
  double compare() const;

 private:
  const TaskGraph& g_;
  const DataflowProgram& p_;
  const std::map<std::string, Matrix>& tensors_;
  std::vector<Buf> bufs_;
  // (sender, receiver, tag): the parts of the message (one for SendOp, any number for SendPartsOp).
  std::map<std::tuple<int, int, std::int64_t>, std::vector<Matrix>> mailbox_;

  static void check_rect(const Rect& r, std::int64_t rows, std::int64_t cols, const std::string& what) {
    if (r.row0 < 0 || r.col0 < 0 || r.rows < 0 || r.cols < 0 || r.row0 + r.rows > rows || r.col0 + r.cols > cols)
      throw ExecError(fmt::format("rows [{}, {}) cols [{}, {}) lie outside {} ({}x{})", r.row0, r.row0 + r.rows, r.col0,
                                  r.col0 + r.cols, what, rows, cols));
  }
  Buf& buffer(BufferId id, const Task& task) {
    if (id < 0 || static_cast<std::size_t>(id) >= bufs_.size())
      throw ExecError(fmt::format("task {} names buffer {} that does not exist", task.name, id));
    if (p_.buffers[static_cast<std::size_t>(id)].rank != task.rank)
      throw ExecError(fmt::format("task {} on rank {} touches buffer {} of rank {}", task.name, task.rank,
                                  p_.buffers[static_cast<std::size_t>(id)].name, p_.buffers[static_cast<std::size_t>(id)].rank));
    return bufs_[static_cast<std::size_t>(id)];
  }
  Matrix read(const Ref& r, const Task& task) {
    Buf& b = buffer(r.buffer, task);
    const std::string& name = p_.buffers[static_cast<std::size_t>(r.buffer)].name;
    check_rect(r.rect, b.m.rows, b.m.cols, "buffer " + name + " read by " + task.name);
    Matrix out = zeros(r.rect.rows, r.rect.cols);
    for (std::int64_t i = 0; i < r.rect.rows; ++i)
      for (std::int64_t j = 0; j < r.rect.cols; ++j) {
        const std::int64_t row = r.rect.row0 + i, col = r.rect.col0 + j;
        if (!b.valid[static_cast<std::size_t>(row * b.m.cols + col)])
          throw ExecError(fmt::format("task {} reads row {} (col {}) of {}, which holds no data yet", task.name, row, col, name));
        out.at(i, j) = b.m.at(row, col);
      }
    return out;
  }
  Matrix read_whole(BufferId id, const Task& task) {
    Buf& b = buffer(id, task);
    return read(Ref{id, Rect{0, 0, b.m.rows, b.m.cols}}, task);
  }
  void write(const Ref& r, const Matrix& m, const Task& task) {
    Buf& b = buffer(r.buffer, task);
    const std::string& name = p_.buffers[static_cast<std::size_t>(r.buffer)].name;
    check_rect(r.rect, b.m.rows, b.m.cols, "buffer " + name + " written by " + task.name);
    if (m.rows != r.rect.rows || m.cols != r.rect.cols)
      throw ExecError(fmt::format("task {} writes a {}x{} result into a {}x{} place of {}", task.name, m.rows, m.cols,
                                  r.rect.rows, r.rect.cols, name));
    for (std::int64_t i = 0; i < m.rows; ++i)
      for (std::int64_t j = 0; j < m.cols; ++j) {
        b.m.at(r.rect.row0 + i, r.rect.col0 + j) = m.at(i, j);
        b.valid[static_cast<std::size_t>((r.rect.row0 + i) * b.m.cols + r.rect.col0 + j)] = 1;
      }
  }
  const DataOp* data_op(const Task& task) const {
    if (task.data_op < 0) return nullptr;
    if (static_cast<std::size_t>(task.data_op) >= p_.ops.size())
      throw ExecError(fmt::format("task {} names data op {} of {}", task.name, task.data_op, p_.ops.size()));
    return &p_.ops[static_cast<std::size_t>(task.data_op)];
  }

  void exec_compute(const Task& task, const DataOp& op);
  void exec_task(TaskId id);
  void exec_collective(const std::vector<TaskId>& members);
};

void Run::exec_compute(const Task& task, const DataOp& op) {
  if (const auto* g = std::get_if<GemmOp>(&op)) {
    const Matrix b = g->b_cols > 0 ? read(Ref{g->b, Rect{0, g->b_col0, buffer(g->b, task).m.rows, g->b_cols}}, task)
                                   : read_whole(g->b, task);
    for (const RowBlock& blk : g->blocks) {
      const Matrix a = read(Ref{g->a, Rect{blk.a_row0, g->a_col0, blk.rows, g->a_cols}}, task);
      Matrix c = matmul(a, b, g->transpose_b);
      const Ref cref{g->c, Rect{blk.c_row0, g->c_col0, blk.rows, g->c_cols}};
      if (g->accumulate) c = add(c, read(cref, task));
      write(cref, c, task);
    }
  } else if (const auto* cp = std::get_if<CopyOp>(&op)) {
    write(cp->out, read(cp->in, task), task);
  } else if (const auto* a = std::get_if<AddOp>(&op)) {
    write(a->out, add(read(a->a, task), read(a->b, task)), task);
  } else if (const auto* nrm = std::get_if<NormOp>(&op)) {
    write(nrm->out, layernorm(read(nrm->in, task)), task);
  } else if (const auto* act = std::get_if<ActivationOp>(&op)) {
    if (act->kind != "swiglu" && act->kind != "gelu") throw ExecError("unknown activation " + act->kind);
    const Matrix in = read(act->in, task);
    if (in.cols != (act->kind == "swiglu" ? 2 : 1) * act->out.rect.cols)
      throw ExecError(fmt::format("task {}: activation input width {} for output width {}", task.name, in.cols, act->out.rect.cols));
    write(act->out, activation(act->kind, in, act->out.rect.cols), task);
  } else if (const auto* at = std::get_if<AttentionOp>(&op)) {
    if (at->batch < 1 || at->kv_heads < 1 || at->heads % at->kv_heads != 0 || at->q.rect.row0 % at->batch != 0)
      throw ExecError(fmt::format("task {}: malformed attention", task.name));
    const Matrix q = read(at->q, task);
    const std::int64_t kv_rows = at->kv_positions * at->batch, kv_cols = at->kv_heads * at->head_dim;
    const Matrix k = read(Ref{at->k, Rect{0, at->k_col0, kv_rows, kv_cols}}, task);
    const Matrix v = read(Ref{at->v, Rect{0, at->v_col0, kv_rows, kv_cols}}, task);
    write(at->out,
          attention(q, k, v, at->kv_positions, at->batch, at->heads, at->kv_heads, at->head_dim, at->q_position0, at->causal),
          task);
  } else if (const auto* w = std::get_if<WgradOp>(&op)) {
    Matrix sum = zeros(w->a_cols, w->b_cols);
    for (const WgradBlock& blk : w->blocks) {
      const Matrix a = read(Ref{blk.a, Rect{blk.a_row0, w->a_col0, blk.rows, w->a_cols}}, task);
      const Matrix b = read(Ref{blk.b, Rect{blk.b_row0, w->b_col0, blk.rows, w->b_cols}}, task);
      sum = add(sum, matmul_tn(a, b));
    }
    const Ref cref{w->c, Rect{w->c_row0, w->c_col0, w->a_cols, w->b_cols}};
    if (w->accumulate) sum = add(read(cref, task), sum);
    write(cref, sum, task);
  } else if (const auto* nb = std::get_if<NormBwdOp>(&op)) {
    write(nb->out, layernorm_bwd(read(nb->in, task), read(nb->grad, task)), task);
  } else if (const auto* ab = std::get_if<ActivationBwdOp>(&op)) {
    if (ab->kind != "swiglu" && ab->kind != "gelu") throw ExecError("unknown activation " + ab->kind);
    write(ab->out, activation_bwd(ab->kind, read(ab->in, task), read(ab->grad, task)), task);
  } else if (const auto* atb = std::get_if<AttentionBwdOp>(&op)) {
    const AttentionOp& f = atb->fwd;
    if (f.batch < 1 || f.kv_heads < 1 || f.heads % f.kv_heads != 0 || f.q.rect.row0 % f.batch != 0)
      throw ExecError(fmt::format("task {}: malformed attention backward", task.name));
    const std::int64_t kv_rows = f.kv_positions * f.batch, kv_cols = f.kv_heads * f.head_dim;
    const Matrix k = read(Ref{f.k, Rect{0, f.k_col0, kv_rows, kv_cols}}, task);
    const Matrix v = read(Ref{f.v, Rect{0, f.v_col0, kv_rows, kv_cols}}, task);
    AttentionGrads g = attention_bwd(read(f.q, task), k, v, read(f.out, task), read(atb->dout, task), f.kv_positions,
                                     f.batch, f.heads, f.kv_heads, f.head_dim, f.q_position0, f.causal);
    write(atb->dq, g.dq, task);
    write(atb->dk, g.dk, task);
    write(atb->dv, g.dv, task);
  } else {
    throw ExecError(fmt::format("compute task {} carries a communication data op", task.name));
  }
}

void Run::exec_task(TaskId id) {
  const Task& task = g_.task(id);
  const DataOp* op = data_op(task);
  if (op == nullptr) return;
  if (std::holds_alternative<ComputeTask>(task.kind)) {
    exec_compute(task, *op);
  } else if (const auto* send = std::get_if<SendTask>(&task.kind)) {
    std::vector<Matrix> parts;
    if (const auto* d = std::get_if<SendOp>(op)) {
      parts.push_back(read(d->data, task));
    } else if (const auto* dp = std::get_if<SendPartsOp>(op)) {
      for (const Ref& r : dp->data) parts.push_back(read(r, task));
    } else {
      throw ExecError(fmt::format("send task {} carries no send data op", task.name));
    }
    mailbox_[{task.rank, send->peer, send->tag}] = std::move(parts);
  } else if (const auto* recv = std::get_if<RecvTask>(&task.kind)) {
    std::vector<Ref> dst, reduce;
    if (const auto* d = std::get_if<RecvOp>(op)) {
      dst = {d->data};
    } else if (const auto* dp = std::get_if<RecvPartsOp>(op)) {
      dst = dp->data;
      reduce = dp->add;
      if (!reduce.empty() && reduce.size() != dst.size())
        throw ExecError(fmt::format("recv task {} reduces {} parts into {}", task.name, reduce.size(), dst.size()));
    } else {
      throw ExecError(fmt::format("recv task {} carries no recv data op", task.name));
    }
    auto it = mailbox_.find({recv->peer, task.rank, recv->tag});
    if (it == mailbox_.end())
      throw ExecError(fmt::format("recv task {} completes but its send carried no data", task.name));
    if (it->second.size() != dst.size())
      throw ExecError(fmt::format("recv task {} expects {} parts, its send carried {}", task.name, dst.size(),
                                  it->second.size()));
    for (std::size_t k = 0; k < dst.size(); ++k)
      write(dst[k], reduce.empty() ? it->second[k] : add(it->second[k], read(reduce[k], task)), task);
    mailbox_.erase(it);
  } else {
    throw ExecError(fmt::format("collective task {} executed alone", task.name));
  }
}

void Run::exec_collective(const std::vector<TaskId>& members) {
  const auto& first = std::get<CollectiveTask>(g_.task(members.front()).kind);
  const std::size_t t = first.group.size();
  // members[p] is the task of group position p.
  std::vector<const CollectiveOp*> ops(t, nullptr);
  for (std::size_t p = 0; p < t; ++p) {
    const Task& task = g_.task(members[p]);
    const DataOp* op = data_op(task);
    if (op == nullptr) {
      if (p > 0 && ops[0] != nullptr) throw ExecError(fmt::format("collective task {} has no data op but its peers do", task.name));
      continue;
    }
    ops[p] = std::get_if<CollectiveOp>(op);
    if (ops[p] == nullptr) throw ExecError(fmt::format("collective task {} carries no collective data op", task.name));
  }
  if (ops[0] == nullptr) return;
  // Every input is read before any output is written (the collective's buffers may overlap in place).
  std::vector<std::vector<Matrix>> in(t);
  for (std::size_t p = 0; p < t; ++p)
    for (const Ref& r : ops[p]->in) in[p].push_back(read(r, g_.task(members[p])));
  auto want = [&](std::size_t p, std::size_t nin, std::size_t nout) {
    if (ops[p]->in.size() != nin || ops[p]->out.size() != nout)
      throw ExecError(fmt::format("collective task {} has {} inputs and {} outputs, expected {} and {}",
                                  g_.task(members[p]).name, ops[p]->in.size(), ops[p]->out.size(), nin, nout));
  };
  for (std::size_t p = 0; p < t; ++p) {
    const Task& task = g_.task(members[p]);
    switch (first.kind) {
      // A collective may move G tensors at once (a DP bucket): G parts per member, member-major.
      case CollectiveKind::all_gather: {
        const std::size_t G = std::max<std::size_t>(1, ops[0]->in.size());
        want(p, G, t * G);
        for (std::size_t q = 0; q < t; ++q)
          for (std::size_t j = 0; j < G; ++j) write(ops[p]->out[q * G + j], in[q][j], task);
        break;
      }
      case CollectiveKind::reduce_scatter: {
        const std::size_t G = std::max<std::size_t>(1, ops[0]->out.size());
        want(p, t * G, G);
        // Ring order: the reduction of part p starts at member p+1 and ends at p.
        for (std::size_t j = 0; j < G; ++j) {
          Matrix sum = in[(p + 1) % t][p * G + j];
          for (std::size_t s = 2; s <= t; ++s) sum = add(sum, in[(p + s) % t][p * G + j]);
          write(ops[p]->out[j], sum, task);
        }
        break;
      }
      case CollectiveKind::all_reduce: {
        const std::size_t G = std::max<std::size_t>(1, ops[0]->in.size());
        want(p, G, G);
        for (std::size_t j = 0; j < G; ++j) {
          Matrix sum = in[0][j];
          for (std::size_t q = 1; q < t; ++q) sum = add(sum, in[q][j]);
          write(ops[p]->out[j], sum, task);
        }
        break;
      }
      case CollectiveKind::all_to_all:
        want(p, t, t);
        for (std::size_t q = 0; q < t; ++q) write(ops[p]->out[q], in[q][p], task);
        break;
    }
  }
}

void Run::run(VisitOrder order, std::uint64_t seed) {
  const std::size_t n = g_.size();
  std::vector<std::vector<TaskId>> succ(n);
  std::vector<int> waiting(n, 0);
  auto edge = [&](TaskId a, TaskId b) {
    succ[a].push_back(b);
    ++waiting[b];
  };
  std::map<std::tuple<int, int, int>, TaskId> last_on_stream;
  std::map<std::tuple<int, int, std::int64_t>, TaskId> sends;
  std::map<std::int64_t, std::vector<TaskId>> collectives;
  std::map<std::pair<std::int64_t, std::vector<int>>, std::int64_t> collective_ids;
  const PredecessorIndex before = g_.predecessor_index();
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = g_.task(id);
    for (TaskId p : before.of(id)) edge(p, id);
    if (const auto* c = std::get_if<CollectiveTask>(&t.kind)) {
      // A collective is its instance number over its set of ranks (as in sched/dag.hpp's analyze()):
      // the TP groups of different Ulysses ranks reuse instance numbers.
      std::vector<int> set = c->group;
      std::sort(set.begin(), set.end());
      const auto found = collective_ids.emplace(std::make_pair(c->instance, std::move(set)),
                                                static_cast<std::int64_t>(collective_ids.size()));
      collectives[found.first->second].push_back(id);
    }
    if (const auto* s = std::get_if<SendTask>(&t.kind)) sends[{t.rank, s->peer, s->tag}] = id;
    if (std::holds_alternative<RecvTask>(t.kind)) continue;  // a Recv holds no stream
    const auto key = std::make_tuple(t.rank, static_cast<int>(t.stream.kind), t.stream.index);
    auto it = last_on_stream.find(key);
    if (it != last_on_stream.end()) edge(it->second, id);
    last_on_stream[key] = id;
  }
  for (TaskId id = 0; id < n; ++id)
    if (const auto* r = std::get_if<RecvTask>(&g_.task(id).kind)) {
      auto it = sends.find({r->peer, g_.task(id).rank, r->tag});
      if (it == sends.end()) throw ExecError(fmt::format("recv task {} has no send", g_.task(id).name));
      edge(it->second, id);
    }
  // Members of a collective in group order; the instance runs when all of them are ready.
  std::map<TaskId, std::int64_t> instance_of;
  std::map<std::int64_t, std::vector<TaskId>> members;
  std::map<std::int64_t, std::size_t> members_ready;
  for (auto& [inst, ids] : collectives) {
    const auto& group = std::get<CollectiveTask>(g_.task(ids.front()).kind).group;
    std::vector<TaskId> ordered;
    for (int rank : group) {
      auto it = std::find_if(ids.begin(), ids.end(), [&](TaskId id) { return g_.task(id).rank == rank; });
      if (it == ids.end()) throw ExecError(fmt::format("collective {} lacks rank {}", inst, rank));
      ordered.push_back(*it);
    }
    if (ordered.size() != ids.size()) throw ExecError(fmt::format("collective {} has tasks outside its group", inst));
    for (TaskId id : ids) instance_of[id] = inst;
    members[inst] = ordered;
  }

  std::set<TaskId> ready;  // tasks, and collectives by their first member
  auto make_ready = [&](TaskId id) {
    auto it = instance_of.find(id);
    if (it == instance_of.end()) {
      ready.insert(id);
      return;
    }
    const auto& m = members[it->second];
    if (++members_ready[it->second] == m.size()) ready.insert(*std::min_element(m.begin(), m.end()));
  };
  for (TaskId id = 0; id < n; ++id)
    if (waiting[id] == 0) make_ready(id);
  std::uint64_t state = seed;
  std::size_t done = 0;
  while (!ready.empty()) {
    auto pick = ready.begin();
    if (order == VisitOrder::highest_id) pick = std::prev(ready.end());
    if (order == VisitOrder::seeded_random)
      std::advance(pick, static_cast<std::ptrdiff_t>(next_random(state) % ready.size()));
    const TaskId id = *pick;
    ready.erase(pick);
    std::vector<TaskId> unit{id};
    if (auto it = instance_of.find(id); it != instance_of.end()) {
      unit = members[it->second];
      exec_collective(unit);
    } else {
      exec_task(id);
    }
    for (TaskId u : unit) {
      ++done;
      for (TaskId s : succ[u])
        if (--waiting[s] == 0) make_ready(s);
    }
  }
  if (done != n) {
    for (TaskId id = 0; id < n; ++id)
      if (waiting[id] > 0)
        throw ExecError(fmt::format("the DAG cannot complete: {} of {} tasks never become ready (e.g. {})", n - done, n,
                                    g_.task(id).name));
    throw ExecError(fmt::format("the DAG cannot complete: {} of {} tasks never ran (a collective never gathers all members)",
                                n - done, n));
  }
}

double Run::compare() const {
  double worst = 0.0;
  for (const OutputCheck& out : p_.outputs) {
    const BufferDecl& d = p_.buffers.at(static_cast<std::size_t>(out.buffer));
    const Buf& b = bufs_.at(static_cast<std::size_t>(out.buffer));
    for (const Piece& piece : out.expect) {
      const Matrix& ref = tensor(tensors_, piece.tensor);
      check_rect(piece.from, ref.rows, ref.cols, "reference " + piece.tensor);
      check_rect(Rect{piece.to_row, piece.to_col, piece.from.rows, piece.from.cols}, d.rows, d.cols, "output " + d.name);
      for (std::int64_t i = 0; i < piece.from.rows; ++i)
        for (std::int64_t j = 0; j < piece.from.cols; ++j) {
          const std::int64_t row = piece.to_row + i, col = piece.to_col + j;
          if (!b.valid[static_cast<std::size_t>(row * d.cols + col)])
            throw ExecError(fmt::format("output {} row {} col {} was never written", d.name, row, col));
          const double e = std::abs(b.m.at(row, col) - ref.at(piece.from.row0 + i, piece.from.col0 + j));
          if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
        }
    }
  }
  return worst;
}

}  // namespace

std::map<std::string, Matrix> make_inputs(const DataflowProgram& program, std::uint64_t seed) {
  std::map<std::string, Matrix> out;
  for (const TensorDecl& t : program.inputs) {
    Matrix m = zeros(t.rows, t.cols);
    std::uint64_t state = seed ^ fnv1a(t.name);
    // Activations and the output gradient in [-1, 1); weights scaled by 1/sqrt(fan-in) so that values stay of order one
    // through the layers and an absolute tolerance means the same everywhere.
    const double scale = t.name == "x" || t.name == "dy" ? 1.0 : 1.0 / std::sqrt(static_cast<double>(t.rows));
    for (double& v : m.values) v = scale * (static_cast<double>(next_random(state) >> 11) * 0x1.0p-52 - 1.0);
    out.emplace(t.name, std::move(m));
  }
  return out;
}

std::map<std::string, Matrix> reference(const DataflowProgram& p, std::map<std::string, Matrix> t) {
  if (p.computation == "gemm") {
    t["y"] = matmul(tensor(t, "x"), tensor(t, "w"), false);
    return t;
  }
  if (p.computation == "dp_grad_sum") {
    // g{j} = sum over replicas d of dp{d}/a{j}^T dp{d}/b{j} (sched/verify.hpp, generate_dp_piece).
    for (std::int64_t j = 0; j < attr(p, "gradients"); ++j) {
      Matrix sum;
      for (std::int64_t d = 0; d < attr(p, "replicas"); ++d) {
        const Matrix g = matmul_tn(tensor(t, fmt::format("dp{}/a{}", d, j)), tensor(t, fmt::format("dp{}/b{}", d, j)));
        sum = d == 0 ? g : add(sum, g);
      }
      t[fmt::format("g{}", j)] = std::move(sum);
    }
    return t;
  }
  if (p.computation != "tpsp_forward" && p.computation != "tpsp_train")
    throw ExecError("unknown reference computation '" + p.computation + "'");
  const std::int64_t batch = attr(p, "batch"), heads = attr(p, "heads"), kv_heads = attr(p, "kv_heads");
  const std::int64_t hd = attr(p, "head_dim"), ffn = attr(p, "ffn"), layers = attr(p, "layers");
  const bool gated = attr(p, "gated") != 0, causal = attr(p, "causal") != 0;
  Matrix x = tensor(t, "x");
  const std::int64_t Q = heads * hd, KV = kv_heads * hd;
  const std::string act = gated ? "swiglu" : "gelu";
  struct Saved {
    Matrix x, a1, qkv, attn, h1, a2, f, g;
  };
  std::vector<Saved> saved;
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string wp = fmt::format("L{}/", l);
    Saved s;
    s.x = x;
    s.a1 = layernorm(x);
    s.qkv = matmul(s.a1, tensor(t, wp + "w_qkv"), false);
    s.attn = attention(cols_of(s.qkv, 0, Q), cols_of(s.qkv, Q, KV), cols_of(s.qkv, Q + KV, KV), x.rows / batch, batch,
                       heads, kv_heads, hd, 0, causal);
    s.h1 = add(x, matmul(s.attn, tensor(t, wp + "w_o"), false));
    s.a2 = layernorm(s.h1);
    s.f = matmul(s.a2, tensor(t, wp + "w1"), false);
    s.g = activation(act, s.f, ffn);
    const Matrix y = add(s.h1, matmul(s.g, tensor(t, wp + "w2"), false));
    t[wp + "y"] = y;
    x = y;
    saved.push_back(std::move(s));
  }
  if (p.computation == "tpsp_forward") return t;
  // Backward from dy = dL/d(last y), layer by layer (the unpartitioned chain rule).
  Matrix dy = tensor(t, "dy");
  for (std::int64_t l = layers - 1; l >= 0; --l) {
    const std::string wp = fmt::format("L{}/", l);
    const Saved& s = saved[static_cast<std::size_t>(l)];
    t[wp + "dw2"] = matmul_tn(s.g, dy);
    const Matrix df = activation_bwd(act, s.f, matmul(dy, tensor(t, wp + "w2"), true));
    t[wp + "dw1"] = matmul_tn(s.a2, df);
    const Matrix dh1 = add(dy, layernorm_bwd(s.h1, matmul(df, tensor(t, wp + "w1"), true)));
    t[wp + "dw_o"] = matmul_tn(s.attn, dh1);
    const Matrix dattn = matmul(dh1, tensor(t, wp + "w_o"), true);
    const AttentionGrads ag = attention_bwd(cols_of(s.qkv, 0, Q), cols_of(s.qkv, Q, KV), cols_of(s.qkv, Q + KV, KV),
                                            s.attn, dattn, s.x.rows / batch, batch, heads, kv_heads, hd, 0, causal);
    Matrix dqkv = zeros(s.qkv.rows, s.qkv.cols);
    for (std::int64_t i = 0; i < dqkv.rows; ++i) {
      for (std::int64_t j = 0; j < Q; ++j) dqkv.at(i, j) = ag.dq.at(i, j);
      for (std::int64_t j = 0; j < KV; ++j) {
        dqkv.at(i, Q + j) = ag.dk.at(i, j);
        dqkv.at(i, Q + KV + j) = ag.dv.at(i, j);
      }
    }
    t[wp + "dw_qkv"] = matmul_tn(s.a1, dqkv);
    const Matrix dx = add(dh1, layernorm_bwd(s.x, matmul(dqkv, tensor(t, wp + "w_qkv"), true)));
    t[wp + "dx"] = dx;
    dy = dx;
  }
  return t;
}

ExecuteResult execute(const Schedule& schedule, const ExecuteOptions& options) {
  ExecuteResult r;
  try {
    if (!schedule.dataflow) throw ExecError("the schedule carries no dataflow program");
    const DataflowProgram& p = *schedule.dataflow;
    std::int64_t elements = p.buffer_elements();
    for (const TensorDecl& t : p.inputs) elements += t.rows * t.cols;
    if (elements > options.max_elements)
      throw ExecError(fmt::format("the dataflow program needs {} elements, more than the limit {}: verify small shapes",
                                  elements, options.max_elements));
    if (p.outputs.empty()) throw ExecError("the dataflow program checks no output");
    const auto tensors = reference(p, make_inputs(p, options.seed));
    for (VisitOrder order : options.orders) {
      try {
        Run run(schedule, tensors);
        run.run(order, options.seed);
        r.max_abs_error = std::max(r.max_abs_error, run.compare());
        ++r.orders_run;
        if (!(r.max_abs_error < options.tolerance))
          throw ExecError(fmt::format("max abs error {:.3g} exceeds {:.1g}", r.max_abs_error, options.tolerance));
      } catch (const ExecError& e) {
        throw ExecError(fmt::format("order {}: {}", to_string(order), e.what()));
      }
    }
    r.passed = true;
  } catch (const ExecError& e) {
    r.passed = false;
    r.error = e.what();
  }
  return r;
}

void run_verify_case(VerifyCase& c, const std::function<Schedule()>& make, const ExecuteOptions& options) {
  try {
    const Schedule s = make();
    validate(s.graph);
    c.tasks = s.graph.size();
    c.result = execute(s, options);
  } catch (const std::exception& e) {
    c.result.passed = false;
    c.result.error = e.what();
  }
}

namespace {

TpspShape verify_shape(int t, bool gqa) {
  TpspShape s;
  s.tp = t;
  s.seq = 4 * t;  // four positions per chunk: room for up to 4 slices
  s.batch = 2;    // rows of a position interleave samples
  s.hidden = 16;
  s.heads = 2 * t;
  s.kv_heads = gqa ? std::max(1, t / 2) : t;  // gqa: fewer kv heads than ranks (replicated)
  s.head_dim = 4;
  s.ffn = 4 * t;
  s.gated = gqa;
  s.causal = gqa;
  s.layers = gqa ? 2 : 1;
  return s;
}

}  // namespace

namespace {

// Ulysses layers: the QKV projection fused with the all-to-all before attention, attention with the
// all-to-all after it, and their backward, in one layer checked forward (y) and backward (dx; the
// weight gradients of a UP rank cover its share of the sequence only, see tpsp.cpp). Four positions
// per rank leave room for 4 slices.
void verify_ulysses(const VerifyOptions& o, VerifyReport& report) {
  struct Shape {
    std::string name;
    int tp;
    bool gqa;
  };
  for (int u : o.ups) {
    if (u < 2) continue;
    std::vector<Shape> shapes{{"up-gqa-swiglu-causal", 1, true}, {"up-mha-gelu-full", 1, false}};
    if (u == 2 || u == 4) shapes.push_back({"tpxup-gqa-swiglu-causal", 2, true});
    std::vector<std::pair<std::string, std::pair<model::ScheduleKind, int>>> variants;
    for (model::ScheduleKind kind : o.kinds) {
      if (kind == model::ScheduleKind::slice) {
        for (int k : o.slices) variants.push_back({fmt::format("slice-k{}", k), {kind, k}});
      } else {
        variants.push_back({model::to_string(kind), {kind, 1}});
      }
    }
    for (const Shape& sh : shapes)
      for (const auto& [vname, v] : variants) {
        TpspRequest req;
        TpspShape& s = req.shape;
        s.tp = sh.tp;
        s.up = u;
        const int ranks = sh.tp * u;
        s.seq = 4 * ranks;
        s.batch = 2;
        s.hidden = 16;
        s.heads = 2 * ranks;
        // gqa: fewer kv heads than ranks, so kv heads are replicated over the UP ranks (and over TP
        // with tp 2); mha: two kv heads per rank after the all-to-all.
        s.kv_heads = sh.gqa ? std::max(1, u / 2) : 2 * ranks;
        s.head_dim = 4;
        s.ffn = 4 * ranks;
        s.gated = sh.gqa;
        s.causal = sh.gqa;
        s.layers = 1;
        req.kind = v.first;  // the TP regions (tp 2) run the same schedule
        req.up_kind = v.first;
        req.schedule.kind = v.first;
        req.schedule.slices = v.second;
        req.options.scope = Scope::layer;
        req.fault = o.fault;
        req.label = "<verify>";
        VerifyCase c;
        c.name = fmt::format("{}/{}/t{}u{}", sh.name, vname, sh.tp, u);
        c.piece = sh.name;
        c.schedule = vname;
        c.tp = sh.tp;
        c.up = u;
        c.slices = v.first == model::ScheduleKind::slice ? v.second : 0;
        run_verify_case(c, [&] { return generate_tpsp(req); }, o.execute);
        report.cases.push_back(std::move(c));
      }
  }
}

}  // namespace

VerifyReport verify_tpsp(const VerifyOptions& o) {
  VerifyReport report;
  struct Variant {
    std::string schedule;
    model::ScheduleKind kind;
    int k;
    bool qs;
  };
  for (int t : o.tps) {
    std::vector<Variant> variants;
    for (model::ScheduleKind kind : o.kinds) {
      if (kind == model::ScheduleKind::slice) {
        for (int k : o.slices) variants.push_back({fmt::format("slice-k{}", k), kind, k, false});
      } else if (kind == model::ScheduleKind::commfuse) {
        variants.push_back({"commfuse", kind, 1, false});
        variants.push_back({"commfuse-qsplit", kind, 1, true});
      } else {
        variants.push_back({"baseline", kind, 1, false});
      }
    }
    struct PieceCase {
      std::string name;
      TpspPiece piece;
      bool gqa;
    };
    std::vector<PieceCase> pieces;
    if (o.pieces) pieces = {{"ag_gemm", TpspPiece::ag_gemm, false}, {"gemm_rs", TpspPiece::gemm_rs, false}};
    if (o.layers) {
      pieces.push_back({"stack2-gqa-swiglu-causal", TpspPiece::layers, true});
      pieces.push_back({"layer-mha-gelu-full", TpspPiece::layers, false});
    }
    for (const PieceCase& pc : pieces)
      for (const Variant& v : variants) {
        if (v.qs && pc.piece != TpspPiece::layers) continue;  // query-split changes only the attention
        TpspRequest req;
        req.shape = verify_shape(t, pc.gqa);
        req.kind = v.kind;
        req.schedule.kind = v.kind;
        req.schedule.slices = v.k;
        req.schedule.query_split_attention = v.qs;
        req.options.scope = pc.gqa ? Scope::stack : Scope::layer;
        req.options.backward = pc.piece == TpspPiece::layers;  // layers are checked forward and backward
        req.piece = pc.piece;
        req.piece_k = 12;  // K and N multiples of every t in {2, 3, 4}; 8 handled below
        req.piece_n = 24;
        if (t % 3 != 0) req.piece_k = req.piece_n = 8 * t;
        req.fault = o.fault;
        req.label = "<verify>";
        VerifyCase c;
        c.name = fmt::format("{}/{}/t{}", pc.name, v.schedule, t);
        c.piece = pc.name;
        c.schedule = v.schedule;
        c.tp = t;
        c.slices = v.kind == model::ScheduleKind::slice ? v.k : 0;
        run_verify_case(c, [&] { return generate_tpsp(req); }, o.execute);
        report.cases.push_back(std::move(c));
      }
  }
  if (o.up_layers) verify_ulysses(o, report);
  verify_dp(o, report);
  verify_pipeline(o, report);
  return report;
}

}  // namespace fusesim::sched
