// Exactness of the DP synchronisation (`fusesim verify`, docs/schedules.md "DP"): a DP piece where
// every replica computes weight gradients with its own seeded inputs through wgrad GEMMs accumulated
// over two steps (as the TPSP backward accumulates over its ring steps), then synchronises them;
// every rank must end with the sum over the replicas (ddp: the all-reduced gradients; zero1/zero2:
// reduce-scattered, then all-gathered as the updated parameters would be; zero3: the reduced own
// row part, which is all a ZeRO-3 rank keeps). Every schedule is checked twice: with its collectives,
// and in the ring P2P form (DpConfig::as_p2p) that `--symmetry p2p` and `mirror` simulate, over
// the rings it runs across nodes (one per replica a node holds) from dp 4 on.
#include <stdexcept>

#include <fmt/format.h>

#include "fusesim/sched/dp.hpp"
#include "fusesim/sched/verify.hpp"

namespace fusesim::sched {
namespace {

// Gradient shapes [rows, cols], rows >= 8 so that no DP row part is empty; 9 rows give uneven parts
// for dp 2, 4 and 8. bf16 sizes: 2 x 16 x 6 = 192, 2 x 9 x 4 = 72, 2 x 24 x 3 = 144 bytes.
struct Shape {
  std::int64_t rows, cols;
};
constexpr Shape kGrads[] = {{16, 6}, {9, 4}, {24, 3}};
constexpr std::int64_t kTokens = 6;          // token rows of each replica's micro-batch
constexpr std::int64_t kFirstStep = 3;       // rows of the first accumulation step
constexpr Bytes kBucketBytes = 200;          // buckets {g0, g1} (192 < 200, then 264), {g2}
// CommFuse pieces of at least 5 rows: gradients cut part by part (dp 2: 8- and 12-row parts; dp 4:
// 6-row parts) and gradients computed in one GEMM before their ring (the thinner parts).
constexpr std::int64_t kFuseMinRows = 5;

}  // namespace

Schedule generate_dp_piece(const DpPieceRequest& req) {
  if (req.dp < 1) throw std::logic_error("generate_dp_piece: dp must be >= 1");
  Schedule s;
  s.graph = TaskGraph(req.dp);
  s.parallelism = Parallelism::dp;
  s.kind = req.kind;
  s.gpus = req.dp;
  auto prog = std::make_shared<DataflowProgram>();
  prog->computation = "dp_grad_sum";
  const int G = static_cast<int>(std::size(kGrads));
  prog->attributes = {{"replicas", req.dp}, {"gradients", G}};
  for (int d = 0; d < req.dp; ++d)
    for (int j = 0; j < G; ++j) {
      prog->inputs.push_back(TensorDecl{fmt::format("dp{}/a{}", d, j), kTokens, kGrads[j].rows});
      prog->inputs.push_back(TensorDecl{fmt::format("dp{}/b{}", d, j), kTokens, kGrads[j].cols});
    }
  DpConfig cfg;
  cfg.dp = req.dp;
  cfg.members = 1;
  cfg.sharding = req.sharding;
  cfg.kind = req.kind;
  cfg.schedule.dp_bucket_bytes = kBucketBytes;
  cfg.schedule.dp_fuse_min_rows = kFuseMinRows;
  cfg.schedule.p2p_engine = model::CommEngine::copy_engine;
  // The baseline kind checks the serial reference; the bucketed path (the default baseline) is
  // checked by the slice kind, which runs it.
  cfg.schedule.dp_serial_baseline = req.kind == model::ScheduleKind::baseline;
  cfg.dtype = topo::Dtype::bf16;
  cfg.fault = req.fault;
  cfg.as_p2p = req.as_p2p;
  if (req.replicas_per_node > 0)
    for (int d = 0; d < req.dp; ++d) cfg.replica_nodes.push_back(d / req.replicas_per_node);
  DpSync dp(s.graph, prog.get(), cfg);
  auto task = [&](int rank, std::string name, model::Kernel k, std::int32_t data_op, const std::vector<TaskId>& deps,
                  int region = -1) {
    Task t;
    const std::string full_name = fmt::format("r{}/{}", rank, name);
    t.name = full_name;
    t.rank = rank;
    t.kind = ComputeTask{std::move(k), topo::Dtype::bf16, false};
    t.labels.region = region;
    t.labels.phase = Phase::backward;
    t.data_op = data_op;
    const TaskId id = s.graph.add(std::move(t));
    for (TaskId x : deps) s.graph.depend(x, id);
    return id;
  };
  for (int d = 0; d < req.dp; ++d) {
    std::vector<TaskId> last;
    for (int j = 0; j < G; ++j) {
      const Shape sh = kGrads[j];
      auto buffer = [&](const std::string& name, std::int64_t rows, std::int64_t cols, const std::string& tensor) {
        BufferDecl b;
        b.name = fmt::format("r{}/g{}/{}", d, j, name);
        b.rank = d;
        b.rows = rows;
        b.cols = cols;
        if (!tensor.empty()) b.init = {Piece{tensor, Rect{0, 0, rows, cols}, 0, 0}};
        return prog->add_buffer(std::move(b));
      };
      const BufferId a = buffer("a", kTokens, sh.rows, fmt::format("dp{}/a{}", d, j));
      const BufferId b = buffer("b", kTokens, sh.cols, fmt::format("dp{}/b{}", d, j));
      const BufferId c = buffer("dw", sh.rows, sh.cols, "");
      auto wgrad = [&](std::int64_t tok0, std::int64_t toks, std::int64_t row0, std::int64_t rows, bool acc) {
        WgradOp w;
        w.c = c;
        w.a_col0 = row0;
        w.a_cols = rows;
        w.b_cols = sh.cols;
        w.c_row0 = row0;
        w.accumulate = acc;
        w.blocks = {WgradBlock{a, tok0, b, tok0, toks}};
        return prog->add_op(std::move(w));
      };
      const std::string gname = fmt::format("g{}", j);
      const TaskId step0 = task(d, gname + "/wgrad0", model::GemmKernel{sh.rows, sh.cols, kFirstStep, 1},
                                wgrad(0, kFirstStep, 0, sh.rows, false), last);
      const std::int64_t rest = kTokens - kFirstStep;
      const DpGradient dg{gname, -1, sh.rows, sh.cols, c};
      if (dp.fused()) {
        last = {dp.fused_gradient(
            d, dg,
            [&](std::int64_t row0, std::int64_t rows, int step, int region, const std::vector<TaskId>& deps) {
              return task(d, fmt::format("{}/wgrad1/dp{}", gname, step), model::GemmKernel{rows, sh.cols, rest, 1},
                          wgrad(kFirstStep, rest, row0, rows, true), deps, region);
            },
            {step0})};
      } else {
        const TaskId step1 = task(d, gname + "/wgrad1", model::GemmKernel{sh.rows, sh.cols, rest, 1},
                                  wgrad(kFirstStep, rest, 0, sh.rows, true), {step0});
        dp.gradient(d, dg, step1);
        last = {step1};
      }
    }
    const std::vector<TaskId> ends = dp.finish_backward(d, last);
    // The optimizer is the identity here: the updated parameters are the reduced gradients.
    dp.gather_updated(d, ends);
    for (int j = 0; j < G; ++j) {
      const Shape sh = kGrads[j];
      const std::string ref = fmt::format("g{}", j);
      if (req.sharding == model::DpSharding::ddp || req.dp == 1) {
        prog->outputs.push_back(OutputCheck{dp.synced(d, j), {Piece{ref, Rect{0, 0, sh.rows, sh.cols}, 0, 0}}});
      } else if (req.sharding == model::DpSharding::zero3) {
        const RowPart p = row_part(sh.rows, req.dp, d);
        prog->outputs.push_back(OutputCheck{dp.synced(d, j), {Piece{ref, Rect{p.row0, 0, p.rows, sh.cols}, p.row0, 0}}});
      } else {
        prog->outputs.push_back(OutputCheck{dp.gathered(d, j), {Piece{ref, Rect{0, 0, sh.rows, sh.cols}, 0, 0}}});
      }
    }
  }
  s.dataflow = std::move(prog);
  return s;
}

void verify_dp(const VerifyOptions& o, VerifyReport& report) {
  for (bool as_p2p : {false, true})
    for (int t : o.dps)
      for (model::DpSharding sharding : {model::DpSharding::ddp, model::DpSharding::zero1, model::DpSharding::zero3})
        for (model::ScheduleKind kind : o.kinds) {
          // The P2P form over the rings NCCL builds across nodes: dp 4 as 2 nodes of 2 replicas (2
          // rings), dp 8 as 2 nodes of 4 (4 rings); dp 2 one ring.
          DpPieceRequest req{t, sharding, kind, o.dp_fault, as_p2p, as_p2p && t >= 4 ? t / 2 : 0};
          VerifyCase c;
          c.piece = "dp_grad/" + model::to_string(sharding);
          c.schedule = (kind == model::ScheduleKind::slice      ? std::string("bucketed")
                        : kind == model::ScheduleKind::baseline ? std::string("serial")
                                                                : model::to_string(kind)) +
                       (as_p2p ? "-p2p" : "");
          c.name = fmt::format("{}/{}/dp{}", c.piece, c.schedule, t);
          c.tp = 1;
          c.dp = t;
          run_verify_case(c, [&] { return generate_dp_piece(req); }, o.execute);
          report.cases.push_back(std::move(c));
        }
}

}  // namespace fusesim::sched
