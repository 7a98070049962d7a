// `fusesim verify` for pipeline parallelism: each stage runs its pipeline_order on small seeded
// matrices, passing activations and gradients to the stages around it through first-in first-out
// channels (NCCL's send/recv between two ranks match in the order they are posted), and the outputs,
// input gradients and accumulated weight gradients must equal those of the same micro-batches run one
// after the other through the whole model.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "fusesim/model/workload.hpp"
#include "fusesim/sched/step.hpp"
#include "fusesim/sched/verify.hpp"

namespace fusesim::sched {
namespace {

struct ExecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr std::int64_t kRows = 3;  // rows of a micro-batch
constexpr std::int64_t kWidth = 4;

// C = op(A) op(B), op transposing when asked.
Matrix product(const Matrix& a, bool ta, const Matrix& b, bool tb) {
  const std::int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols, n = tb ? b.rows : b.cols;
  Matrix c{m, n, std::vector<double>(static_cast<std::size_t>(m * n), 0.0)};
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::int64_t l = 0; l < k; ++l) s += (ta ? a.at(l, i) : a.at(i, l)) * (tb ? b.at(j, l) : b.at(l, j));
      c.at(i, j) = s;
    }
  return c;
}

// A layer y = tanh(x W): forward, and backward from dL/dy (dx = g W^T, dW += x^T g, g = dy (1 - y^2)).
Matrix layer_forward(const Matrix& x, const Matrix& w) {
  Matrix y = product(x, false, w, false);
  for (double& v : y.values) v = std::tanh(v);
  return y;
}
Matrix layer_grad(const Matrix& dy, const Matrix& y) {
  Matrix g = dy;
  for (std::size_t i = 0; i < g.values.size(); ++i) g.values[i] *= 1.0 - y.values[i] * y.values[i];
  return g;
}
void add_into(Matrix& into, const Matrix& m) {
  if (into.values.empty()) {
    into = m;
    return;
  }
  for (std::size_t i = 0; i < m.values.size(); ++i) into.values[i] += m.values[i];
}
double max_abs_diff(const Matrix& a, const Matrix& b) {
  double e = 0.0;
  for (std::size_t i = 0; i < a.values.size(); ++i) e = std::max(e, std::abs(a.values[i] - b.values[i]));
  return e;
}

struct Message {
  std::int64_t micro_batch = 0, layer = 0;
  Matrix data;
};

class PipelineRun {
 public:
  PipelineRun(const PipelineShape& shape, const std::map<std::string, Matrix>& in) : sh_(shape), in_(in) {}

  // Runs every stage's order; an error names the stage and the work item.
  ExecuteResult run(const std::vector<std::vector<StepWork>>& orders) {
    ExecuteResult r;
    r.orders_run = 1;
    try {
      std::vector<std::size_t> pos(orders.size(), 0);
      for (;;) {
        bool moved = false, done = true;
        for (std::size_t s = 0; s < orders.size(); ++s) {
          while (pos[s] < orders[s].size() && step(static_cast<std::int64_t>(s), orders[s][pos[s]])) {
            ++pos[s];
            moved = true;
          }
          done = done && pos[s] == orders[s].size();
        }
        if (done) break;
        if (!moved) {
          std::string waits;
          for (std::size_t s = 0; s < orders.size(); ++s)
            if (pos[s] < orders[s].size())
              waits += fmt::format("{}stage {} at {}", waits.empty() ? "" : ", ", s, describe(orders[s][pos[s]]));
          throw ExecError("deadlock: every stage waits for a transfer that no stage will send (" + waits + ")");
        }
      }
      for (const auto& [key, queue] : channels_)
        if (!queue.empty())
          throw ExecError(fmt::format("stage {} sent {} transfer(s) to stage {} that were never received",
                                      std::get<0>(key), queue.size(), std::get<1>(key)));
      if (!saved_.empty()) throw ExecError(fmt::format("{} layer forwards were never differentiated", saved_.size()));
      if (!pending_w_.empty())
        throw ExecError(fmt::format("{} weight gradients were never computed (a B without its W)", pending_w_.size()));
      r.max_abs_error = compare();
      r.passed = r.max_abs_error < 1e-9;
      if (!r.passed) r.error = fmt::format("results differ from the unpipelined model by {:.3g}", r.max_abs_error);
    } catch (const ExecError& e) {
      r.passed = false;
      r.error = e.what();
    }
    return r;
  }

 private:
  using Key = std::pair<std::int64_t, std::int64_t>;  // (micro-batch, layer)
  struct Saved {
    Matrix x, y;
  };
  struct Pending {
    Matrix x, g;  // the layer's input and the gradient at its pre-activation
  };

  std::int64_t layers() const { return sh_.layers; }
  std::int64_t owner(std::int64_t layer) const { return layer / sh_.chunk_layers() % sh_.stages; }
  const Matrix& input(const std::string& name) const { return in_.at(name); }
  static std::string describe(const StepWork& w) {
    return w.layer < 0 ? fmt::format("{} of micro-batch {}", to_string(w.phase), w.micro_batch)
                       : fmt::format("{} of micro-batch {} at layer {}", to_string(w.phase), w.micro_batch, w.layer);
  }
  [[noreturn]] static void fail(std::int64_t stage, const StepWork& w, const std::string& what) {
    throw ExecError(fmt::format("stage {}, {}: {}", stage, describe(w), what));
  }
  Matrix take(std::map<Key, Matrix>& from, const Key& key, std::int64_t stage, const StepWork& w, const char* what) {
    auto it = from.find(key);
    if (it == from.end()) fail(stage, w, fmt::format("no {} to work on", what));
    Matrix m = std::move(it->second);
    from.erase(it);
    return m;
  }
  void own(std::int64_t stage, const StepWork& w, std::int64_t layer) {
    if (layer < 0 || layer >= layers() || owner(layer) != stage)
      fail(stage, w, fmt::format("layer {} is not on this stage", layer));
  }

  // Does `w` on `stage`; false when it waits for a transfer that has not been sent yet.
  bool step(std::int64_t stage, const StepWork& w) {
    const std::int64_t mb = w.micro_batch;
    if (mb < 0 || mb >= sh_.micro_batches) fail(stage, w, "no such micro-batch");
    switch (w.phase) {
      case StepPhase::forward_begin:
        own(stage, w, 0);
        if (!activations_.emplace(Key{mb, 0}, input(fmt::format("x{}", mb))).second) fail(stage, w, "its input twice");
        return true;
      case StepPhase::forward_layer: {
        own(stage, w, w.layer);
        Matrix x = take(activations_, {mb, w.layer}, stage, w, "input activation");
        Matrix y = layer_forward(x, input(fmt::format("w{}", w.layer)));
        if (!saved_.emplace(Key{mb, w.layer}, Saved{std::move(x), y}).second) fail(stage, w, "forward twice");
        if (w.layer + 1 == layers()) {
          if (!outputs_.emplace(mb, y).second) fail(stage, w, "output twice");
        }
        activations_[{mb, w.layer + 1}] = std::move(y);
        return true;
      }
      case StepPhase::forward_send:
        own(stage, w, w.layer - 1);
        send(stage, owner(w.layer), true, Message{mb, w.layer, take(activations_, {mb, w.layer}, stage, w, "output")});
        return true;
      case StepPhase::forward_recv:
        own(stage, w, w.layer);
        return receive(stage, owner(w.layer - 1), true, w, activations_);
      case StepPhase::backward_begin:
        own(stage, w, layers() - 1);
        if (outputs_.count(mb) == 0) fail(stage, w, "the loss gradient before the forward reached the loss");
        if (!gradients_.emplace(Key{mb, layers() - 1}, input(fmt::format("dy{}", mb))).second)
          fail(stage, w, "the loss gradient twice");
        return true;
      case StepPhase::backward_layer: {
        own(stage, w, w.layer);
        const Matrix dy = take(gradients_, {mb, w.layer}, stage, w, "output gradient");
        auto it = saved_.find({mb, w.layer});
        if (it == saved_.end()) fail(stage, w, "no saved forward to differentiate");
        const Matrix g = layer_grad(dy, it->second.y);
        // ZB-H1's B: the weight gradient waits for its W with what it needs, the input and g.
        if (sh_.zero_bubble)
          pending_w_.emplace(Key{mb, w.layer}, Pending{std::move(it->second.x), g});
        else
          add_into(weight_grads_[w.layer], product(it->second.x, true, g, false));
        saved_.erase(it);
        gradients_[{mb, w.layer - 1}] = product(g, false, input(fmt::format("w{}", w.layer)), true);
        return true;
      }
      case StepPhase::backward_weight: {
        own(stage, w, w.layer);
        auto it = pending_w_.find({mb, w.layer});
        if (it == pending_w_.end()) fail(stage, w, "no B whose weight gradient is pending");
        add_into(weight_grads_[w.layer], product(it->second.x, true, it->second.g, false));
        pending_w_.erase(it);
        return true;
      }
      case StepPhase::backward_send:
        own(stage, w, w.layer + 1);
        send(stage, owner(w.layer), false,
             Message{mb, w.layer, take(gradients_, {mb, w.layer}, stage, w, "input gradient")});
        return true;
      case StepPhase::backward_recv:
        own(stage, w, w.layer);
        return receive(stage, owner(w.layer + 1), false, w, gradients_);
      case StepPhase::backward_end:
        own(stage, w, 0);
        if (!input_grads_.emplace(mb, take(gradients_, {mb, -1}, stage, w, "input gradient")).second)
          fail(stage, w, "the input gradient twice");
        return true;
    }
    fail(stage, w, "unknown phase");
  }

  void send(std::int64_t from, std::int64_t to, bool forward, Message m) {
    channels_[{from, to, forward}].push_back(std::move(m));
  }
  bool receive(std::int64_t stage, std::int64_t from, bool forward, const StepWork& w, std::map<Key, Matrix>& into) {
    auto& queue = channels_[{from, stage, forward}];
    if (queue.empty()) return false;
    Message& m = queue.front();
    if (m.micro_batch != w.micro_batch || m.layer != w.layer)
      fail(stage, w,
           fmt::format("the next transfer from stage {} is micro-batch {}'s at layer {}: the two stages' orders "
                       "disagree",
                       from, m.micro_batch, m.layer));
    if (!into.emplace(Key{w.micro_batch, w.layer}, std::move(m.data)).second) fail(stage, w, "received twice");
    queue.pop_front();
    return true;
  }

  // The same micro-batches one after the other through every layer, gradients summed over them.
  double compare() const {
    double err = 0.0;
    std::map<std::int64_t, Matrix> weight_grads;
    for (std::int64_t mb = 0; mb < sh_.micro_batches; ++mb) {
      std::vector<Saved> saved;
      Matrix x = input(fmt::format("x{}", mb));
      for (std::int64_t l = 0; l < layers(); ++l) {
        Matrix y = layer_forward(x, input(fmt::format("w{}", l)));
        saved.push_back(Saved{std::move(x), y});
        x = std::move(y);
      }
      if (outputs_.count(mb) == 0 || input_grads_.count(mb) == 0)
        throw ExecError(fmt::format("micro-batch {} never went through the whole pipeline", mb));
      err = std::max(err, max_abs_diff(outputs_.at(mb), x));
      Matrix dy = input(fmt::format("dy{}", mb));
      for (std::int64_t l = layers() - 1; l >= 0; --l) {
        const Matrix g = layer_grad(dy, saved[static_cast<std::size_t>(l)].y);
        add_into(weight_grads[l], product(saved[static_cast<std::size_t>(l)].x, true, g, false));
        dy = product(g, false, input(fmt::format("w{}", l)), true);
      }
      err = std::max(err, max_abs_diff(input_grads_.at(mb), dy));
    }
    for (std::int64_t l = 0; l < layers(); ++l) {
      if (weight_grads_.count(l) == 0) throw ExecError(fmt::format("layer {} has no weight gradient", l));
      err = std::max(err, max_abs_diff(weight_grads_.at(l), weight_grads.at(l)));
    }
    return err;
  }

  const PipelineShape& sh_;
  const std::map<std::string, Matrix>& in_;
  std::map<std::tuple<std::int64_t, std::int64_t, bool>, std::deque<Message>> channels_;
  std::map<Key, Matrix> activations_, gradients_;  // what a layer (or a send) may take, by (mb, layer)
  std::map<Key, Saved> saved_;                     // forwards awaiting their backward
  std::map<Key, Pending> pending_w_;               // ZB-H1: Bs awaiting their W
  std::map<std::int64_t, Matrix> outputs_, input_grads_, weight_grads_;
};

// Swaps the micro-batches of the first two items of `phase` in `order` (none when it has fewer).
void swap_first_two(std::vector<StepWork>& order, StepPhase phase) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < order.size() && at.size() < 2; ++i)
    if (order[i].phase == phase) at.push_back(i);
  if (at.size() == 2) std::swap(order[at[0]].micro_batch, order[at[1]].micro_batch);
}

}  // namespace

ExecuteResult verify_pipeline_order(const PipelineShape& shape, std::uint64_t seed, PipelineFault fault) {
  if (shape.stages < 1 || shape.virtual_stages < 1 || shape.micro_batches < 1 || shape.layers < 1 ||
      shape.layers % (shape.stages * shape.virtual_stages) != 0)
    throw std::invalid_argument("verify_pipeline_order: layers must split into stages x virtual stages");
  DataflowProgram inputs;
  for (std::int64_t mb = 0; mb < shape.micro_batches; ++mb) {
    inputs.inputs.push_back(TensorDecl{fmt::format("x{}", mb), kRows, kWidth});
    inputs.inputs.push_back(TensorDecl{fmt::format("dy{}", mb), kRows, kWidth});
  }
  for (std::int64_t l = 0; l < shape.layers; ++l) inputs.inputs.push_back(TensorDecl{fmt::format("w{}", l), kWidth, kWidth});
  const std::map<std::string, Matrix> in = make_inputs(inputs, seed);
  std::vector<std::vector<StepWork>> orders;
  for (std::int64_t s = 0; s < shape.stages; ++s) orders.push_back(pipeline_order(shape, s));
  if (fault == PipelineFault::loss_first) {
    // The last stage starts with its first backward's loss gradient.
    auto& last = orders.back();
    const auto it = std::find_if(last.begin(), last.end(),
                                 [](const StepWork& w) { return w.phase == StepPhase::backward_begin; });
    if (it != last.end()) std::rotate(last.begin(), it, it + 1);
  } else if (fault == PipelineFault::swap_receives && orders.size() > 1) {
    // Stage 1 expects its first two activations in the other order.
    swap_first_two(orders[1], StepPhase::forward_recv);
  } else if (fault == PipelineFault::weight_first) {
    // The last stage runs its first W before anything else: before the B it belongs to.
    auto& last = orders.back();
    const auto it = std::find_if(last.begin(), last.end(),
                                 [](const StepWork& w) { return w.phase == StepPhase::backward_weight; });
    if (it != last.end()) std::rotate(last.begin(), it, it + 1);
  }
  PipelineRun run(shape, in);
  ExecuteResult r = run.run(orders);
  return r;
}

void verify_pipeline(const VerifyOptions& o, VerifyReport& report) {
  for (int p : o.pps) {
    // 1F1B with fewer micro-batches than stages, as many, and more (an odd count); interleaved with
    // 2 and 3 chunks per stage, at m = p and 2p (it runs micro-batches in groups of p).
    // ZB-H1 (v 1, Ws deferred) at the 1F1B counts.
    struct Form {
      std::int64_t v, m;
      bool zero_bubble = false;
    };
    std::vector<Form> forms{{1, 1}, {1, p}, {1, 2 * p + 1}, {2, p}, {2, 2 * p}, {3, 2 * p},
                            {1, 1, true}, {1, p, true}, {1, 2 * p + 1, true}};
    if (p > 2) forms.insert(forms.begin() + 1, Form{1, p - 1});
    if (p > 2) forms.push_back(Form{1, p - 1, true});
    for (const Form& f : forms) {
      const PipelineShape shape{p, f.v, f.m, p * f.v * 2, f.zero_bubble};
      VerifyCase c;
      c.schedule = f.zero_bubble ? "zb-h1" : f.v == 1 ? "1f1b" : fmt::format("interleaved-v{}", f.v);
      c.name = fmt::format("pipeline/{}/p{}/m{}", c.schedule, p, f.m);
      c.piece = "pipeline";
      c.tp = 1;
      for (std::int64_t s = 0; s < p; ++s) c.tasks += pipeline_order(shape, s).size();
      c.result = verify_pipeline_order(shape, o.execute.seed, o.pp_fault);
      report.cases.push_back(std::move(c));
    }
  }
}

}  // namespace fusesim::sched
