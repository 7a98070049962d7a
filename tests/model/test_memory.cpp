// Memory per rank (docs/memory.md): every figure below is derived by hand in the comment beside it.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "fusesim/model/memory.hpp"
#include "fusesim/model/workload.hpp"
#include "fusesim/util/error.hpp"

using namespace fusesim;
using namespace fusesim::model;

namespace {

topo::DeviceModel h100() {
  topo::DeviceModel d;
  d.name = "h100-test";
  d.vendor = "nvidia";
  d.hbm_bytes = {80e9, "test"};
  d.contention.default_comm_sms = {16, "test"};
  return d;
}

Workload llama(const std::string& name, int tp, int dp, DpSharding sharding = DpSharding::ddp,
               Recompute recompute = Recompute::none) {
  Workload w = load_workload(name);
  w.parallel.tp = tp;
  w.parallel.dp = dp;
  w.parallel.dp_sharding = sharding;
  w.recompute = recompute;
  return w;
}

const std::vector<ScheduleKind> kCommFuse{ScheduleKind::commfuse};

}  // namespace

TEST_CASE("Parameters per TP rank: TP shards the layers, replicates the norms, pads the vocabulary",
          "[model][memory]") {
  // Megatron pads the vocabulary to a multiple of 128 x tp (arguments.py --make-vocab-size-divisible-by):
  //   Llama-3 128,256 = 1002 x 128: unpadded at tp 1; at tp 8 ceil(128256 / 1024) = 126 -> 129,024.
  //   GPT-3 50,257: at tp 1 ceil(50257 / 128) = 393 -> 50,304; at tp 8 ceil(50257 / 1024) = 50 -> 51,200.
  struct Case {
    const char* name;
    std::int64_t padded1, padded8;
  };
  for (const Case& c : {Case{"llama-3-8b", 128'256, 129'024}, Case{"llama-3-70b", 128'256, 129'024},
                        Case{"gpt-3-175b", 50'304, 51'200}}) {
    const Architecture a = load_workload(c.name).arch;
    INFO(c.name);
    CHECK(a.vocab_divisible_by == 128);
    CHECK(a.padded_vocab(1) == c.padded1);
    CHECK(a.padded_vocab(8) == c.padded8);
    // TP 1 is the whole model plus the padding rows of the embedding and the LM head.
    CHECK(params_per_tp_rank(a, 1) == a.params_total() + 2 * (c.padded1 - a.vocab) * a.hidden);
    // The 8 shards add up to the model plus 7 extra copies of the replicated norms (two per layer and
    // the final one) and the padding rows at tp 8.
    const std::int64_t norms = a.layers * 2 * a.hidden + a.hidden;
    CHECK(8 * params_per_tp_rank(a, 8) == a.params_total() + 7 * norms + 2 * (c.padded8 - a.vocab) * a.hidden);
  }
  // Without padding (vocab_divisible_by 1) the vocabulary only rounds up to a multiple of tp: GPT-3's
  // 50,257 = 8 x 6,282 + 1 -> 8 x 6,283 = 50,264.
  Architecture g = load_workload("gpt-3-175b").arch;
  g.vocab_divisible_by = 1;
  CHECK(g.padded_vocab(8) == 50'264);
  CHECK(g.padded_vocab(1) == 50'257);
}

TEST_CASE("Llama-3-8B, TP 8, DP 1: parameters, training state and activations", "[model][memory]") {
  const Workload w = llama("llama-3-8b", 8, 1);
  // One layer on one of 8 ranks (h 4096, 32 heads / 8 KV heads of 128, ffn 14336 SwiGLU):
  //   QKV 4096 x (4 x 128 + 2 x 1 x 128) = 3,145,728; O 512 x 4096 = 2,097,152;
  //   MLP 4096 x 1792 x 2 + 1792 x 4096 = 22,020,096; norms 2 x 4096 = 8,192 -> 27,271,168.
  // 32 layers = 872,677,376; embedding + LM head over the padded vocabulary 129,024 / 8 = 16,128 rows:
  // 2 x 16,128 x 4096 = 132,120,576; final norm 4096. Total 1,004,802,048.
  const MemoryReport r = memory_per_rank(w, h100(), kCommFuse);
  CHECK(r.params_per_rank == 1'004'802'048);
  // ZeRO paper recipe (2 B bf16 weights, 12 B Adam state: fp32 master, m, v) with fp32 gradients, 4 B:
  // bf16 training accumulates and reduces them in fp32 (Megatron-LM's main_grad, torchtitan's reduce
  // type; model::default_grad_reduce_dtype).
  CHECK(r.parameters_bytes == 2'009'604'096);
  CHECK(r.gradients_bytes == 4'019'208'192);
  CHECK(r.optimizer_bytes == 12'057'624'576);
  // Activations of one layer, s = 8192 tokens, bf16:
  //   norm and GEMM inputs 4 x (8192 / 8) x 4096 x 2 B = 33,554,432
  //   Q, K, V, O of 4 query heads and 1 KV head: 8192 x (2 x 4 + 2 x 1) x 128 x 2 B = 20,971,520
  //   FlashAttention log-sum-exp 8192 x 4 heads x 4 B = 131,072
  //   FC1 output (2 x 1792) and SwiGLU output (1792): 8192 x 1792 x 3 x 2 B = 88,080,384
  //   -> 142,737,408 per layer, x 32 = 4,567,597,056.
  // Outside the layers: final norm input and output 2 x 1024 x 4096 x 2 B = 16,777,216, fp32 logits
  // 8192 x 16,128 x 4 B = 528,482,304 (padded vocabulary) -> 545,259,520. Total 5,112,856,576.
  CHECK(r.activations_bytes == 5'112'856'576);
  // Communication, CommFuse: NCCL 16 channels x 4 MiB = 67,108,864; gathered [8192, 4096] bf16 =
  // 67,108,864; Fuse-RS 2 x [1024, 4096] bf16 = 16,777,216 -> 150,994,944.
  CHECK(r.comm_buffers_bytes == 150'994'944);
  CHECK(r.comm_buffers_schedule == "commfuse");
  CHECK(r.total_bytes == Bytes{2'009'604'096} + 4'019'208'192 + 12'057'624'576 + 5'112'856'576 + 150'994'944);
  CHECK(r.capacity_bytes == 80'000'000'000);
  CHECK(r.fits());
  CHECK(r.breakdown.size() == 5);
}

TEST_CASE("Recomputation: selective saves nothing under FlashAttention, full keeps layer inputs", "[model][memory]") {
  const Bytes none = activation_bytes_per_rank(llama("llama-3-8b", 8, 1));
  const Bytes selective = activation_bytes_per_rank(llama("llama-3-8b", 8, 1, DpSharding::ddp, Recompute::selective));
  const Bytes full = activation_bytes_per_rank(llama("llama-3-8b", 8, 1, DpSharding::ddp, Recompute::full));
  // Korthikanti et al.'s selective recomputation drops the 5as/h score term, which FlashAttention never
  // stores: the same bytes.
  CHECK(selective == none);
  // Full: 32 layer inputs of [1024, 4096] bf16 = 32 x 8,388,608 = 268,435,456, plus one layer rebuilt
  // in the backward (142,737,408) and the head (545,259,520) -> 956,432,384.
  CHECK(full == 956'432'384);
  // Per-op (torchtitan's "op" policy) keeps of each layer: the layer input and the out-projection's
  // reduced output 2 x [1024, 4096] bf16 = 16,777,216; Q, V and O but not K: 8192 x (2 x 4 + 1) x 128
  // x 2 B = 18,874,368; the log-sum-exp 131,072; the gate half of FC1, 8192 x 1792 x 2 B = 29,360,128
  // -> 65,142,784 per layer, x 32 = 2,084,569,088, plus the head 545,259,520 -> 2,629,828,608.
  const Bytes op = activation_bytes_per_rank(llama("llama-3-8b", 8, 1, DpSharding::ddp, Recompute::op));
  CHECK(op == 2'629'828'608);
  // Eager element-wise kernels (torchtitan without torch.compile): SDPA keeps K and V repeated to the 4
  // local query heads, 8192 x (4 - 1) x 2 x 128 x 2 B = 12,582,912 more, and SwiGLU's multiply keeps
  // silu's output, 8192 x 1792 x 2 B = 29,360,128: 41,943,040 more per layer, x 32 = 1,342,177,280.
  Workload eager = llama("llama-3-8b", 8, 1);
  eager.eager_elementwise = true;
  CHECK(activation_bytes_per_rank(eager) == none + 1'342'177'280);
}

TEST_CASE("Activations match Korthikanti et al. for a GPT-style layer without dropout", "[model][memory]") {
  // Korthikanti et al. 2022, eq. (2) with TP + SP: sbh(34/t + 5as/(ht)) bytes per layer. Without dropout
  // (two 1-byte masks of sbh each) and with FlashAttention (no 5as/h term) it is 32 sbh / t, plus the
  // 4-byte log-sum-exp per query row and local head.
  Workload w = load_workload("llama-3-8b");
  w.arch.layers = 2;
  w.arch.hidden = 1024;
  w.arch.heads = 16;
  w.arch.kv_heads = 16;
  w.arch.head_dim = 64;
  w.arch.ffn_hidden = 4096;
  w.arch.gated_mlp = false;
  w.arch.vocab = 0;
  w.sequence_length = 2048;
  w.micro_batch = 2;
  w.parallel.tp = 4;
  // s b h = 4096 x 1024 = 4,194,304; 32 sbh / 4 = 33,554,432; LSE 4096 x 4 heads x 4 B = 65,536.
  // Two layers: 2 x 33,619,968 = 67,239,936 (no head without a vocabulary).
  CHECK(activation_bytes_per_rank(w) == 67'239'936);
  // Ulysses divides the same by up: tp 2 x up 2 shards the sequence 4 ways, the heads 4 ways in attention.
  w.parallel.tp = 2;
  w.parallel.up = 2;
  CHECK(activation_bytes_per_rank(w) == 67'239'936);
  // With hidden dropout, its two 1-byte masks of sbh / t make Korthikanti's 34 sbh / t exactly: 34 x
  // 4,194,304 / 4 = 35,651,584, plus the log-sum-exp 65,536, per layer; two layers 71,434,240.
  w.parallel.tp = 4;
  w.parallel.up = 1;
  w.hidden_dropout = 0.1;
  CHECK(activation_bytes_per_rank(w) == 71'434'240);
  w.hidden_dropout = 0.0;

  // Unfused attention (Megatron before FlashAttention) keeps Korthikanti's 5as/h term in place of the
  // log-sum-exp: 5 a s^2 b / t = 5 x 16 x 2048^2 x 2 / 4 = 167,772,160 bytes per layer at tp 4
  // (softmax and dropout outputs 2 B, mask 1 B per score), i.e. sbh x 5as/(ht) with s b h = 4,194,304
  // and 5as/(ht) = 5 x 16 x 2048 / (1024 x 4) = 40.
  w.parallel.tp = 4;
  w.parallel.up = 1;
  w.unfused_attention = true;
  const Bytes layer = 33'554'432 + 167'772'160;
  CHECK(activation_bytes_per_rank(w) == 2 * layer);
  // Selective recomputation drops exactly that term; full keeps it for the one layer being rebuilt.
  w.recompute = Recompute::selective;
  CHECK(activation_bytes_per_rank(w) == 2 * 33'554'432);
  w.recompute = Recompute::full;
  // Layer inputs [4096 / 4, 1024] bf16 = 2,097,152 each.
  CHECK(activation_bytes_per_rank(w) == 2 * 2'097'152 + layer);
  // Every second layer recomputed (recompute_every 2): layer 0 keeps everything, layer 1 its input,
  // plus the one layer rebuilt in the backward.
  w.recompute_every = 2;
  CHECK(activation_bytes_per_rank(w) == layer + 2'097'152 + layer);

  // Without sequence parallelism (Korthikanti et al., eq. 1 against eq. 2) each TP rank keeps the inputs
  // of the norms and of the QKV and FC1 GEMMs whole: 4 x [4096, 1024] x 2 B = 33,554,432 instead of a
  // quarter of it (8,388,608); the rest (attention, MLP, scores) is split over the heads and the FFN
  // columns as before. Full recomputation keeps each layer's input whole: [4096, 1024] bf16 = 8,388,608.
  w.recompute_every = 1;
  w.parallel.sequence_parallel = false;
  const Bytes layer_no_sp = layer + 33'554'432 - 8'388'608;
  CHECK(activation_bytes_per_rank(w) == 2 * 8'388'608 + layer_no_sp);
  w.recompute = Recompute::none;
  CHECK(activation_bytes_per_rank(w) == 2 * layer_no_sp);
}

TEST_CASE("Llama-3-70B, TP 8: ZeRO stages shard optimizer, gradients, parameters over DP", "[model][memory]") {
  // One layer on one of 8 ranks (h 8192, 64 heads / 8 KV of 128, ffn 28672 SwiGLU):
  //   QKV 8192 x (1024 + 256) = 10,485,760; O 1024 x 8192 = 8,388,608;
  //   MLP 8192 x 3584 x 3 = 88,080,384; norms 16,384 -> 106,971,136; x 80 = 8,557,690,880;
  //   embedding + LM head (padded vocabulary 129,024 / 8) 2 x 16,128 x 8192 = 264,241,152; final norm
  //   8192 -> 8,821,940,224.
  const std::int64_t p = 8'821'940'224;
  const std::int64_t quarter = p / 4;  // 2,205,485,056 exactly
  struct Case {
    DpSharding s;
    Bytes params, grads, optimizer;
  };
  // Gradients in fp32 (4 B), the bf16 default.
  for (const Case& c : {Case{DpSharding::ddp, 2 * p, 4 * p, 12 * p}, Case{DpSharding::zero1, 2 * p, 4 * p, 12 * quarter},
                        Case{DpSharding::zero2, 2 * p, 4 * quarter, 12 * quarter},
                        Case{DpSharding::zero3, 2 * quarter, 4 * quarter, 12 * quarter}}) {
    const MemoryReport r = memory_per_rank(llama("llama-3-70b", 8, 4, c.s), h100(), kCommFuse);
    INFO(to_string(c.s));
    CHECK(r.params_per_rank == p);
    CHECK(r.parameters_bytes == c.params);
    CHECK(r.gradients_bytes == c.grads);
    CHECK(r.optimizer_bytes == c.optimizer);
  }
  // The default job: DP 1, 18 B x 8,821,940,224 = 158,794,924,032 B of training state alone: more than
  // an 80 GB H100 holds, whatever the schedule.
  const MemoryReport d = memory_per_rank(llama("llama-3-70b", 8, 1), h100(), kCommFuse);
  CHECK(d.parameters_bytes + d.gradients_bytes + d.optimizer_bytes == 158'794'924'032);
  // Gradients reduced in bf16 ($.training.grad_reduce_dtype) are 2 B: 16 B x 8,821,940,224.
  Workload bf16_grads = llama("llama-3-70b", 8, 1);
  bf16_grads.grad_reduce_dtype = topo::Dtype::bf16;
  const MemoryReport b = memory_per_rank(bf16_grads, h100(), kCommFuse);
  CHECK(b.parameters_bytes + b.gradients_bytes + b.optimizer_bytes == 141'151'043'584);
  CHECK(!d.fits());
}

TEST_CASE("Communication buffers per schedule", "[model][memory]") {
  const Bytes nccl = 16 * 4 * 1024 * 1024;  // 67,108,864
  const Workload tp8 = llama("llama-3-70b", 8, 1);
  // TPSP: gathered [8192, 8192] bf16 = 134,217,728 in every schedule; the row-parallel partial sums
  // [8192, 8192] (baseline, slice) or 2 x [1024, 8192] = 33,554,432 (CommFuse).
  CHECK(comm_buffer_bytes_per_rank(tp8, ScheduleKind::baseline, nccl) == nccl + 2 * 134'217'728);
  CHECK(comm_buffer_bytes_per_rank(tp8, ScheduleKind::slice, nccl) == nccl + 2 * 134'217'728);
  CHECK(comm_buffer_bytes_per_rank(tp8, ScheduleKind::commfuse, nccl) == nccl + 134'217'728 + 33'554'432);
  // The report counts the largest of the schedules run.
  const MemoryReport all =
      memory_per_rank(tp8, h100(), {ScheduleKind::commfuse, ScheduleKind::baseline, ScheduleKind::slice});
  CHECK(all.comm_buffers_bytes == nccl + 2 * 134'217'728);
  CHECK(all.comm_buffers_schedule == "baseline");

  // DP 4 on top: one more communicator; slice (bucketed) 2 x 25 MB buckets; CommFuse 2 chunks of one
  // layer's fp32 gradient / 4: 2 x 26,742,784 x 4 B = 213,942,272; ZeRO-3 adds 2 gathered layers
  // 2 x 106,971,136 x 2 B = 427,884,544 and the gathered root module, kept through the micro-batch:
  // embedding and LM head rows 2 x 16,128 x 8192 plus the final norm 8192, x 2 B = 528,498,688.
  const Workload dp4 = llama("llama-3-70b", 8, 4);
  const Bytes tp_part = nccl + 134'217'728;
  CHECK(comm_buffer_bytes_per_rank(dp4, ScheduleKind::baseline, nccl) == tp_part + 134'217'728 + nccl);
  CHECK(comm_buffer_bytes_per_rank(dp4, ScheduleKind::slice, nccl) == tp_part + 134'217'728 + nccl + 50'000'000);
  CHECK(comm_buffer_bytes_per_rank(dp4, ScheduleKind::commfuse, nccl) ==
        tp_part + 33'554'432 + nccl + 213'942'272);
  const Workload z3 = llama("llama-3-70b", 8, 4, DpSharding::zero3);
  CHECK(comm_buffer_bytes_per_rank(z3, ScheduleKind::baseline, nccl) ==
        tp_part + 134'217'728 + nccl + 427'884'544 + 528'498'688);
  // Not resharded after forward, all 80 layers stay gathered until their backward: 80 x 106,971,136
  // x 2 B = 17,115,381,760 in place of the 2 layers'.
  Workload z3_kept = z3;
  z3_kept.parallel.reshard_after_forward = ReshardAfterForward::never;
  CHECK(comm_buffer_bytes_per_rank(z3_kept, ScheduleKind::baseline, nccl) ==
        tp_part + 134'217'728 + nccl + 17'115'381'760 + 528'498'688);

  // Ulysses (tp 8, up 2 on Llama-3-70B): each TP group holds s/up = 4096 tokens: gathered [4096, 8192]
  // bf16 = 67,108,864, Fuse-RS 2 x [512, 8192] bf16 = 16,777,216; the Q, K, V all-to-all receive buffer
  // [4096, (8 + 2) x 128] bf16 = 10,485,760, and the Ulysses communicator. The two UP ranks of a
  // TP position hold the same weights, so their gradients are synced (sched/tpsp.cpp) as DP 2 would
  // be: one more communicator, and CommFuse's 2 chunks of one layer's gradient / 2:
  // 2 x 53,485,568 x 4 B (fp32 gradients) = 427,884,544.
  Workload up2 = llama("llama-3-70b", 8, 1);
  up2.parallel.up = 2;
  CHECK(comm_buffer_bytes_per_rank(up2, ScheduleKind::commfuse, nccl) ==
        nccl + 67'108'864 + 16'777'216 + nccl + 10'485'760 + nccl + 427'884'544);

  // HCCL: one 200 MiB buffer per communicator; NCCL with comm_sms given: that many channels.
  topo::DeviceModel ascend = h100();
  ascend.vendor = "huawei";
  CHECK(communicator_buffer_bytes(tp8, ascend) == 200 * 1024 * 1024);
  Workload sms = tp8;
  sms.schedule.comm_sms = 8;
  CHECK(communicator_buffer_bytes(sms, h100()) == 8 * 4 * 1024 * 1024);
}

TEST_CASE("Optimizer and data type change the bytes per parameter", "[model][memory]") {
  Workload w = llama("llama-3-8b", 8, 1);
  const std::int64_t p = 1'004'802'048;
  w.optimizer = Optimizer::sgd;  // fp32 master + momentum: 8 B
  CHECK(memory_per_rank(w, h100(), kCommFuse).optimizer_bytes == 8 * p);
  w.dtype = topo::Dtype::fp32;  // the weights are the master copy: momentum only, 4 B; weights 4 B
  const MemoryReport sgd32 = memory_per_rank(w, h100(), kCommFuse);
  CHECK(sgd32.optimizer_bytes == 4 * p);
  CHECK(sgd32.parameters_bytes == 4 * p);
  w.optimizer = Optimizer::adam;  // m and v: 8 B
  CHECK(memory_per_rank(w, h100(), kCommFuse).optimizer_bytes == 8 * p);
  w.dtype = topo::Dtype::fp8;  // weights kept in 16-bit: as bf16
  const MemoryReport fp8 = memory_per_rank(w, h100(), kCommFuse);
  CHECK(fp8.parameters_bytes == 2 * p);
  CHECK(fp8.optimizer_bytes == 12 * p);
}

TEST_CASE("check_memory refuses with the breakdown, the file and $.parallel", "[model][memory][errors]") {
  const Workload w = llama("llama-3-70b", 8, 1);
  const MemoryReport r = memory_per_rank(w, h100(), kCommFuse);
  try {
    check_memory(r, w, "my.json");
    FAIL("accepted a workload that needs more than 80 GB per rank");
  } catch (const InputError& e) {
    CHECK(e.file() == "my.json");
    CHECK(e.json_path() == "$.parallel");
    const std::string m = e.message();
    INFO(m);
    // 8,821,940,224 parameters per rank (padded vocabulary): x 2 B = 17.6 GB; gradients in fp32 (bf16
    // training reduces them in fp32), x 4 B = 35.3 GB; x 12 B = 105.9 GB.
    CHECK(m.find("per rank (parameters 17.6, gradients 35.3, optimizer state 105.9") != std::string::npos);
    CHECK(m.find("device 'h100-test' has 80.0 GB") != std::string::npos);
    CHECK(m.find("--force-memory") != std::string::npos);
  }
  // A fitting one passes.
  const Workload small = llama("llama-3-8b", 8, 1);
  CHECK_NOTHROW(check_memory(memory_per_rank(small, h100(), kCommFuse), small, "s.json"));
}

TEST_CASE("Extreme shapes saturate instead of wrapping", "[model][memory]") {
  // 1000 layers of 2^24 x 2^16 = 2^40 tokens: one layer's FC1 output alone is 2^40 x 14336 x 3 x 2 B,
  // about 9.5e16, x 1000 layers beyond int64: the sum saturates at its maximum, never wraps to a
  // small or negative size.
  Workload w = llama("llama-3-8b", 1, 1);
  w.arch.layers = 1000;
  w.sequence_length = 16 * 1024 * 1024;
  w.micro_batch = 65536;
  const MemoryReport r = memory_per_rank(w, h100(), kCommFuse);
  CHECK(r.activations_bytes == std::numeric_limits<Bytes>::max());
  CHECK(r.total_bytes == std::numeric_limits<Bytes>::max());
  CHECK(!r.fits());
}

TEST_CASE("Pipeline stages: each holds its layers' parameters and the micro-batches it has in flight",
          "[model][memory][pipeline]") {
  // Llama-3-8B (32 layers), TP 8, PP 4, 8 micro-batches: 8 layers per stage.
  Workload w = llama("llama-3-8b", 8, 1);
  w.parallel.pp = 4;
  w.grad_accumulation = 8;
  const Architecture& a = w.arch;
  // The stages' parameters add up to the unpipelined rank's: the embedding rows on stage 0, the final
  // norm and the LM head rows on stage 3, a quarter of the layers on each.
  std::int64_t sum = 0;
  for (int s = 0; s < 4; ++s) sum += stage_params_per_tp_rank(a, w.parallel, s);
  CHECK(sum == params_per_tp_rank(a, 8));
  CHECK(stage_params_per_tp_rank(a, w.parallel, 1) == stage_params_per_tp_rank(a, w.parallel, 2));
  CHECK(stage_params_per_tp_rank(a, w.parallel, 3) - stage_params_per_tp_rank(a, w.parallel, 0) == a.hidden);
  // 1F1B: stage s has min(4 - s, 8) micro-batches in flight, 8 layers each: 32, 24, 16, 8 layers' worth.
  CHECK(stage_layers_in_flight(w, 0) == 32);
  CHECK(stage_layers_in_flight(w, 1) == 24);
  CHECK(stage_layers_in_flight(w, 3) == 8);
  // Interleaved, v 2 (4 layers a chunk): stage 0 runs (4 - 0 - 1) 2 + (2 - 1) 4 = 10 warm-up chunk
  // forwards and one more before its first backward: 11 chunks, 44 layers; stage 3: 4 + 1 = 5, 20.
  w.parallel.pp_schedule = PipelineSchedule::interleaved;
  w.parallel.virtual_stages = 2;
  CHECK(stage_layers_in_flight(w, 0) == 44);
  CHECK(stage_layers_in_flight(w, 3) == 20);
  // m = pp: every forward first, all 4 x 2 chunks of 4 layers.
  w.grad_accumulation = 4;
  CHECK(stage_layers_in_flight(w, 3) == 32);
  // The report is the fullest stage's: 1F1B stage 0 holds as many activations as the unpipelined rank
  // (without the head's) and a quarter of the training state.
  w.parallel.pp_schedule = PipelineSchedule::one_f_one_b;
  w.parallel.virtual_stages = 1;
  w.grad_accumulation = 8;
  const MemoryReport r = memory_per_rank(w, h100(), kCommFuse);
  CHECK(r.stages == 4);
  CHECK(r.stage == 0);
  CHECK(r.params_per_rank == stage_params_per_tp_rank(a, w.parallel, 0));
  // Without recomputation a layer's activations are one amount x: stage 0 keeps 32 x, stage 1 24 x,
  // stage 3 8 x and the LM head's; the unpipelined rank 32 x and the head's.
  const Bytes act0 = stage_memory(w, h100(), kCommFuse, 0).activations_bytes;
  const Bytes act1 = stage_memory(w, h100(), kCommFuse, 1).activations_bytes;
  const Bytes act3 = stage_memory(w, h100(), kCommFuse, 3).activations_bytes;
  CHECK(r.activations_bytes == act0);
  CHECK(act0 == 4 * (act0 - act1));
  Workload flat = w;
  flat.parallel.pp = 1;
  CHECK(activation_bytes_per_rank(flat) == act0 + act3 - (act0 - act1));
}

TEST_CASE("ZB-H1 keeps 1F1B's micro-batches in flight and, per held-back W, what the W reads",
          "[model][memory][pipeline]") {
  // zb_h1_passes, p 4, m 8: stage s runs 3 - s warm-up forwards, then s x (F, B), then F, B, W. Counting
  // (F done and B not, B done and W not) after every pass, with a forward unit of 3 and a W unit of 2:
  // stage 0 peaks after the F of each F B W, (4, 0) = 12 bytes (after its B, (3, 1) = 11); stage 3
  // after the F of its first F B W, (1, 3) = 9 (F B F B F B leave (0, 3); every later F, B, W returns
  // there). A W heavier than the forward: stage 0 peaks after a B, (3, 1), 3 x 3 + 10 = 19 > 4 x 3.
  CHECK(zb_h1_peak(4, 8, 0, 3, 2).forwards == 4);
  CHECK(zb_h1_peak(4, 8, 0, 3, 2).weights == 0);
  CHECK(zb_h1_peak(4, 8, 3, 3, 2).forwards == 1);
  CHECK(zb_h1_peak(4, 8, 3, 3, 2).weights == 3);
  CHECK(zb_h1_peak(4, 8, 0, 3, 10).forwards == 3);
  CHECK(zb_h1_peak(4, 8, 0, 3, 10).weights == 1);
  // m 2 < p on stage 3: F B F B then W W: (1, 1) after the second F is the peak, 3 + 2.
  CHECK(zb_h1_peak(4, 2, 3, 3, 2).forwards == 1);
  CHECK(zb_h1_peak(4, 2, 3, 3, 2).weights == 1);

  // What a W reads, Llama-3-8B at TP 8 (h 4096, 4 query heads and 1 kv head of 128 per rank, ffn
  // 1792 gated per rank), S tokens a micro-batch, 2 B each: the QKV and FC1 input shards 2 x S/8 x 4096,
  // the attention output S x 512 and the activation's output S x 1792; the output gradients of QKV
  // S x (512 + 2 x 128), FC1 S x 3584, and of the out-projection and FC2 gathered, 2 x S x 4096:
  // S (1024 + 2304 + 768 + 3584 + 8192) x 2 = 31,744 S bytes. More than the layer's activations at TP 8
  // (17,424 S: the gathered gradients are whole, the activations sharded).
  Workload w = llama("llama-3-8b", 8, 1);
  const std::int64_t S = w.tokens_per_microbatch();
  CHECK(weight_pass_bytes(w) == 31'744 * S);
  // At TP 1 with Korthikanti's layer (MHA, ffn 4h, no gate) it is the paper's M_W = 32 s b h: inputs
  // 2 sh (norm outputs) + sh (attention output) + 4 sh (FC2 input), output gradients 3 sh (QKV) + 4 sh
  // (FC1) + 2 sh (out-projection and FC2), 16 sh elements of 2 B.
  Workload k = w;
  k.parallel.tp = 1;
  k.arch.kv_heads = k.arch.heads;
  k.arch.ffn_hidden = 4 * k.arch.hidden;
  k.arch.gated_mlp = false;
  CHECK(weight_pass_bytes(k) == 32 * S * k.arch.hidden);

  // PP 4, 8 micro-batches, 8 layers a stage: stage s of ZB-H1 at its peak, M_W > M_B here. Stage 0 runs
  // each W right after its B: its largest state is the one after a B, 3 micro-batches in flight and 1 W
  // pending (3 M_B + M_W > 4 M_B per layer). Stage 3's is after the B of an F B W: none in flight, its 3
  // held-back Ws and the new one pending (4 M_W > M_B + 3 M_W), and the head's activations.
  w.parallel.pp = 4;
  w.grad_accumulation = 8;
  const Bytes one_f_one_b0 = stage_memory(w, h100(), kCommFuse, 0).activations_bytes;
  const Bytes one_f_one_b3 = stage_memory(w, h100(), kCommFuse, 3).activations_bytes;
  w.parallel.pp_schedule = PipelineSchedule::zb_h1;
  const Bytes mb_layer = one_f_one_b0 / 32;  // 1F1B stage 0: 32 layers' worth, no head
  const Bytes mw_layer = weight_pass_bytes(w);
  CHECK(stage_memory(w, h100(), kCommFuse, 0).activations_bytes == 3 * 8 * mb_layer + 8 * mw_layer);
  CHECK(stage_memory(w, h100(), kCommFuse, 3).activations_bytes == one_f_one_b3 - 8 * mb_layer + 4 * 8 * mw_layer);
  const std::string formula = stage_memory(w, h100(), kCommFuse, 3).breakdown[3].formula;
  INFO(formula);
  CHECK(formula.find("0 layers x micro-batches in flight (zb-h1 stage 3 of pp 4) + 32 layers' W inputs") == 0);
}
