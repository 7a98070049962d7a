#pragma once
// What a generated schedule computes, as opposed to what it costs: a DataflowProgram gives every task
// of a TaskGraph the data it reads and writes (Task::data_op indexes DataflowProgram::ops). Buffers
// are named 2-D float64 matrices owned by one rank; a task touches row blocks and column ranges of
// its rank's buffers; Send/Recv move rows between ranks; a collective task names this rank's part of
// the collective. The reference executor (sched/verify.hpp) runs the program on small seeded
// matrices in several valid orders of the DAG and compares the outputs with the unpartitioned
// computation, so a wrong chunk index or a missing dependency in a generator shows up as a wrong
// number or as a read of data that never arrived.
//
// The program only declares shapes: generating it for a 70B model costs a few records per task, and
// nothing is allocated until the executor runs it (which it refuses above a size limit).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace fusesim::sched {

using BufferId = std::int32_t;

// rows [row0, row0 + rows) x cols [col0, col0 + cols) of a matrix.
struct Rect {
  std::int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
};

// A copy of a rectangle of a named logical tensor (an input of the computation, or a result of the
// unpartitioned reference) to a place in a buffer: how buffers start (inputs and weight shards) and
// what they must hold at the end (outputs).
struct Piece {
  std::string tensor;              // "x", "w_qkv", "y", ...
  Rect from;                       // in the tensor
  std::int64_t to_row = 0, to_col = 0;  // in the buffer
};

struct BufferDecl {
  std::string name;                // "L0/fwd/qkv/in"
  int rank = 0;
  std::int64_t rows = 0, cols = 0;
  std::vector<Piece> init;         // the rest starts invalid (never written)
};

// A rectangle of one buffer. Every reference a task makes is on the task's own rank, except the
// destination of a Recv (on the receiving rank, which is also the Recv task's rank).
struct Ref {
  BufferId buffer = -1;
  Rect rect;
};

// Rows [row0, row0 + rows) of a sequence-long operand, as the generators hand them to their work.
struct RowSpan {
  std::int64_t row0 = 0, rows = 0;
};

// C[c_rows, c_cols] (+)= A[a_rows, a_cols] x op(B), for each row block: the rows of A in a block
// land in the rows of C in the same block. B is used whole (op(B) = B or B^T).
struct RowBlock {
  std::int64_t a_row0 = 0, c_row0 = 0, rows = 0;
};
struct GemmOp {
  BufferId a = -1, b = -1, c = -1;
  std::int64_t a_col0 = 0, a_cols = 0;  // columns of A read: the contraction dimension
  std::int64_t c_col0 = 0, c_cols = 0;  // columns of C written
  // Columns of B read (b_cols 0: all of B): a column block of a weight, e.g. one Ulysses head group's
  // block of the QKV weight in a dgrad (transpose_b) that consumes dQKV one block at a time.
  std::int64_t b_col0 = 0, b_cols = 0;
  bool transpose_b = false;
  bool accumulate = false;              // C += (C must be valid) instead of C =
  std::vector<RowBlock> blocks;
};

// out = a + b, element-wise (shapes equal).
struct AddOp {
  Ref a, b, out;
};

// Row-wise LayerNorm without affine parameters (scale and shift fold into the next GEMM's weights).
struct NormOp {
  Ref in, out;
};

// SwiGLU: out = silu(in[:, :f]) * in[:, f:2f] (f = out.cols); GELU (tanh form): out = gelu(in).
struct ActivationOp {
  std::string kind;  // "swiglu" or "gelu"
  Ref in, out;
};

// Softmax attention of the query rows of `q` against key/value rows [0, kv_positions x batch) of
// `k` and `v`, heads laid side by side in the columns. Rows are [position, sample] flattened
// (row = position x batch + sample). Query head j uses kv head j / (heads / kv_heads). Causal: a
// query at position p (q_position0 + its row's position within q) sees keys at positions <= p.
struct AttentionOp {
  Ref q;                              // rows: the query chunk; cols: heads x head_dim
  BufferId k = -1, v = -1;
  std::int64_t k_col0 = 0, v_col0 = 0;
  std::int64_t kv_positions = 0;
  Ref out;                            // same rows as q
  std::int64_t batch = 1, heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t q_position0 = 0;
  bool causal = true;
};

// Backward ops. The gradient of a weight contracts over token rows, which the row blocks of GemmOp
// cannot express:
//   C[0.., 0..] (+)= sum over blocks of A[rows, a_cols]^T x B[rows, b_cols]  (C is a_cols x b_cols).
// Each block names its own A and B buffers: CommFuse reads the own chunk of a gathered operand from
// the saved local shard and the other chunks from the gathered buffer.
struct WgradBlock {
  BufferId a = -1;
  std::int64_t a_row0 = 0;
  BufferId b = -1;
  std::int64_t b_row0 = 0;
  std::int64_t rows = 0;
};
struct WgradOp {
  BufferId c = -1;
  std::int64_t a_col0 = 0, a_cols = 0;
  std::int64_t b_col0 = 0, b_cols = 0;
  std::int64_t c_row0 = 0;  // C's rows start here (a DP row piece of a gradient)
  std::int64_t c_col0 = 0;  // C's columns start here (a Ulysses head group's column block)
  bool accumulate = false;  // C += (C must be valid) instead of C =
  std::vector<WgradBlock> blocks;
};

// Gradient of NormOp: out = d LayerNorm(in) / d in applied to grad (in: the forward input).
struct NormBwdOp {
  Ref in, grad, out;
};

// Gradient of ActivationOp: in is the forward input ([rows, 2f] for SwiGLU: gate then up), grad the
// gradient of the forward output [rows, f]; out has the shape of in.
struct ActivationBwdOp {
  std::string kind;  // "swiglu" or "gelu"
  Ref in, grad, out;
};

// Gradient of AttentionOp `fwd` (whose `out` is the saved forward output O, read as FlashAttention's
// backward does), given dout = dL/dO on the same rows: writes dq (rows and columns of fwd.q), and dk,
// dv (rows [0, kv_positions x batch), kv heads side by side). Computed over the query rows of fwd.q
// only: dk and dv are complete when fwd.q holds every query that sees those keys.
struct AttentionBwdOp {
  AttentionOp fwd;
  Ref dout;
  Ref dq, dk, dv;
};

// Point to point: the Send reads `data` on the sender when it runs, the matching Recv (same tag)
// writes it to `data` on the receiver when it completes. Shapes must agree.
struct SendOp {
  Ref data;
};
struct RecvOp {
  Ref data;
};

// This rank's part of a collective (all members with the same CollectiveTask::instance run
// together). Indices are positions in CollectiveTask::group.
//   all_gather:     in = {own part};   out[p] receives member p's in[0].
//   reduce_scatter: in[p] = this rank's partial of member p's part; out = {sum over members of their in[own position]}.
//   all_reduce:     in = {buffer part}; out = {sum over members}.
//   all_to_all:     in[p] goes to member p; out[p] receives member p's in[own position].
struct CollectiveOp {
  std::vector<Ref> in;
  std::vector<Ref> out;
};

// out = in (shapes equal): a rank's own part of an exchange that is not sent (Ulysses' Fuse-A2A
// after the attention backward, whose one op writes every row).
struct CopyOp {
  Ref in, out;
};

// One P2P message of several rectangles (a ring step of a DP collective over a bucket of gradients,
// one row part of each): the Send reads `data` in order; the matching Recv writes received part k to
// its data[k], reduced with its add[k] first (data[k] = received + add[k], on the receiver) when `add`
// is not empty, as the receive of a ring reduce-scatter step reduces into the local partial sum.
struct SendPartsOp {
  std::vector<Ref> data;
};
struct RecvPartsOp {
  std::vector<Ref> data;
  std::vector<Ref> add;  // empty, or one per data part with its shape
};

using DataOp = std::variant<GemmOp, AddOp, NormOp, ActivationOp, AttentionOp, SendOp, RecvOp, CollectiveOp, WgradOp,
                            NormBwdOp, ActivationBwdOp, AttentionBwdOp, CopyOp, SendPartsOp, RecvPartsOp>;

struct TensorDecl {
  std::string name;
  std::int64_t rows = 0, cols = 0;
};

// What a buffer must hold at the end: each piece of a reference tensor compared at its place.
struct OutputCheck {
  BufferId buffer = -1;
  std::vector<Piece> expect;
};

struct DataflowProgram {
  // Which unpartitioned reference computes the results: "gemm", "tpsp_forward", "tpsp_train" (forward,
  // then backward from the seeded output gradient "dy").
  std::string computation;
  // Dimensions the reference needs besides the tensor shapes ("batch", "heads", "kv_heads",
  // "head_dim", "ffn", "gated", "causal", "layers").
  std::map<std::string, std::int64_t> attributes;
  std::vector<TensorDecl> inputs;      // seeded random inputs and weights
  std::vector<BufferDecl> buffers;
  std::vector<DataOp> ops;
  std::vector<OutputCheck> outputs;

  BufferId add_buffer(BufferDecl decl) {
    buffers.push_back(std::move(decl));
    return static_cast<BufferId>(buffers.size() - 1);
  }
  std::int32_t add_op(DataOp op) {
    ops.push_back(std::move(op));
    return static_cast<std::int32_t>(ops.size() - 1);
  }
  // Elements the executor would allocate (buffers only).
  std::int64_t buffer_elements() const;
};

}  // namespace fusesim::sched
