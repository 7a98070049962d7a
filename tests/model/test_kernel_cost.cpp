// RooflineCostModel against values derived by hand on a hand-made H100 (docs/kernel-model.md).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "fusesim/model/kernel.hpp"

using namespace fusesim;
using namespace fusesim::model;

namespace {

// H100 SXM5 as in measurements.md: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM, 132 SMs; 128 x 256 GEMM
// tiles. Efficiencies chosen by the test (gemm 0.8, attention 0.5, hbm 0.9), so that
//   effective GEMM peak      = 989e12 x 0.8 = 791.2e12 FLOP/s
//   effective attention peak = 989e12 x 0.5 = 494.5e12 FLOP/s
//   effective HBM bandwidth  = 3.35e12 x 0.9 = 3.015e12 B/s
topo::DeviceModel h100() {
  topo::DeviceModel d;
  d.name = "h100-test";
  d.vendor = "nvidia";
  d.peak_flops_per_s[topo::Dtype::bf16] = {989e12, "test"};
  d.hbm_bytes = {80e9, "test"};
  d.hbm_bandwidth_bytes_per_s = {3.35e12, "test"};
  d.sm_count = 132;
  d.gemm_tile_m = 128;
  d.gemm_tile_n = 256;
  d.efficiency.gemm = {0.8, "test"};
  d.efficiency.attention = {0.5, "test"};
  d.efficiency.hbm = {0.9, "test"};
  return d;
}

const RooflineCostModel roofline;

KernelCost cost_of(const Kernel& k) { return roofline.cost(k, topo::Dtype::bf16, h100()); }

AttentionKernel attention(std::int64_t seq_q, std::int64_t seq_kv, bool causal, std::int64_t q_offset = 0) {
  AttentionKernel a;
  a.batch = 1;
  a.heads = 4;
  a.kv_heads = 1;
  a.seq_q = seq_q;
  a.seq_kv = seq_kv;
  a.head_dim = 128;
  a.causal = causal;
  a.q_offset = q_offset;
  return a;
}

}  // namespace

TEST_CASE("kernel_kind names each kernel", "[model][kernel]") {
  CHECK(kernel_kind(GemmKernel{}) == "gemm");
  CHECK(kernel_kind(AttentionKernel{}) == "attention");
  CHECK(kernel_kind(ElementwiseKernel{}) == "elementwise");
}

TEST_CASE("GEMM cost of the Llama-3-8B TP8 QKV projection", "[model][kernel]") {
  // m = 8192 tokens, n = (4096 + 2 x 1024) / 8 = 768 local QKV columns, k = 4096.
  //   flops = 2 x 8192 x 768 x 4096 = 51,539,607,552
  //   bytes = (8192x4096 + 4096x768 + 8192x768) x 2 = (33,554,432 + 3,145,728 + 6,291,456) x 2 = 85,983,232
  //   tiles = ceil(8192/128) x ceil(768/256) = 64 x 3 = 192 -> waves = ceil(192/132) = 2
  //   quantization = 2 x 132 / 192 = 1.375
  //   compute_s = 51,539,607,552 / 791.2e12 x 1.375 = 8.956895902932e-5
  //   memory_s  = 85,983,232 / 3.015e12 = 2.851848490879e-5
  //   duration  = compute_s -> 89,568,959.03 ps -> 89,568,959 ps
  const KernelCost c = cost_of(GemmKernel{8192, 768, 4096, 1});
  CHECK(c.flops == 51'539'607'552.0);
  CHECK(c.hbm_bytes == 85'983'232.0);
  CHECK(c.tiles == 192);
  CHECK(c.compute_s == Approx(8.956895902932e-5).epsilon(1e-12));
  CHECK(c.memory_s == Approx(2.851848490879e-5).epsilon(1e-12));
  CHECK(c.duration_ps == 89'568'959);
}

TEST_CASE("GEMM batch multiplies FLOPs, bytes and tiles", "[model][kernel]") {
  const KernelCost one = cost_of(GemmKernel{1024, 1024, 1024, 1});
  const KernelCost four = cost_of(GemmKernel{1024, 1024, 1024, 4});
  // 1024x1024 output = 8 x 4 = 32 tiles; 4 of them = 128 tiles, still one wave of 132 SMs.
  CHECK(one.tiles == 32);
  CHECK(four.tiles == 128);
  CHECK(four.flops == 4.0 * one.flops);
  CHECK(four.hbm_bytes == 4.0 * one.hbm_bytes);
  // One wave each: quantization 132/32 and 132/128, so 4x the FLOPs take exactly as long.
  CHECK(four.compute_s == Approx(one.compute_s).epsilon(1e-12));
}

TEST_CASE("GEMM wave quantization: tiles just above a multiple of the SM count", "[model][kernel]") {
  // 1408 x 3072: ceil(1408/128) x ceil(3072/256) = 11 x 12 = 132 tiles, exactly one wave.
  //   compute_s = 2 x 1408 x 3072 x 8192 / 791.2e12 = 70,866,960,384 / 791.2e12 = 8.956895902932e-5
  const KernelCost full = cost_of(GemmKernel{1408, 3072, 8192, 1});
  CHECK(full.tiles == 132);
  CHECK(full.compute_s == Approx(8.956895902932e-5).epsilon(1e-12));
  CHECK(full.duration_ps == 89'568'959);
  // One more row: ceil(1409/128) = 12 -> 144 tiles -> 2 waves, quantization 264/144 = 11/6.
  //   compute_s = 2 x 1409 x 3072 x 8192 / 791.2e12 x 11/6 = 70,917,292,032 / 791.2e12 x 11/6 = 1.6432638446916e-4
  const KernelCost over = cost_of(GemmKernel{1409, 3072, 8192, 1});
  CHECK(over.tiles == 144);
  CHECK(over.compute_s == Approx(1.6432638446916e-4).epsilon(1e-12));
  // 0.07% more FLOPs, 83% more time: the second wave is nearly empty but costs a full wave.
  CHECK(over.duration_ps > full.duration_ps * 18 / 10);
}

TEST_CASE("GEMM that streams more than it computes is memory-bound", "[model][kernel]") {
  // m = 65536, n = 128, k = 128 (a skinny GEMM):
  //   flops = 2 x 65536 x 128 x 128 = 2,147,483,648
  //   bytes = (65536x128 + 128x128 + 65536x128) x 2 = (8,388,608 + 16,384 + 8,388,608) x 2 = 33,587,200
  //   tiles = 512 x 1 = 512 -> waves 4, quantization 528/512
  //   compute_s = 2,147,483,648 / 791.2e12 x 528/512 = 2.7990299... e-6
  //   memory_s = 33,587,200 / 3.015e12 = 1.1140033...e-5 > compute_s
  const KernelCost c = cost_of(GemmKernel{65536, 128, 128, 1});
  CHECK(c.hbm_bytes == 33'587'200.0);
  CHECK(c.memory_s == Approx(33'587'200.0 / 3.015e12).epsilon(1e-12));
  CHECK(c.compute_s == Approx(2'147'483'648.0 / 791.2e12 * 528.0 / 512.0).epsilon(1e-12));
  CHECK(c.memory_s > c.compute_s);
  CHECK(c.duration_ps == seconds_to_ps(c.memory_s));
  CHECK(c.duration_ps == 11'140'033);  // 33,587,200 / 3.015e12 s = 11,140,033.17 ps
}

TEST_CASE("GEMM of fp32 moves twice the bytes of bf16", "[model][kernel]") {
  topo::DeviceModel d = h100();
  d.peak_flops_per_s[topo::Dtype::fp32] = {67e12, "test"};
  const GemmKernel g{1024, 1024, 1024, 1};
  const KernelCost half = roofline.cost(g, topo::Dtype::bf16, d);
  const KernelCost single = roofline.cost(g, topo::Dtype::fp32, d);
  CHECK(single.hbm_bytes == 2.0 * half.hbm_bytes);
  // 67 vs 989 TFLOP/s peak: compute time scales by 989/67.
  CHECK(single.compute_s == Approx(half.compute_s * 989.0 / 67.0).epsilon(1e-12));
}

TEST_CASE("A wgrad GEMM accumulating into fp32 reads and writes C at 4 bytes", "[model][kernel]") {
  // Llama-3-70B's QKV weight gradient on one TP-8 rank, one of 16 sequence chunks of 8K tokens (what
  // a CommFuse wgrad accumulates per ring step): m = 8192 (h), n = 1280, k = 512 tokens.
  //   flops = 2 x 8192 x 1280 x 512 = 10,737,418,240
  //   tiles = 64 x 5 = 320 -> 3 waves, quantization 396/320
  //   compute_s = 10,737,418,240 / 791.2e12 x 396/320 = 16,794,179.8 ps
  //   plain:      bytes = (8192x512 + 512x1280) x 2 + 8192x1280 x 2 = 9,699,328 + 20,971,520 = 30,670,848
  //               memory_s = 10,172,752.2 ps < compute: duration = compute = 16,794,180 ps
  //   fp32 accumulate: C read + written at 4 + 4 bytes: 9,699,328 + 8192x1280 x 8 = 93,585,408 bytes
  //               memory_s = 93,585,408 / 3.015e12 = 31,039,936.3 ps > compute: memory-bound,
  //               1.85x the plain GEMM; a wgrad split into t chunks pays this t times
  GemmKernel g{8192, 1280, 512, 1};
  const KernelCost plain = cost_of(g);
  g.accumulate_fp32 = true;
  const KernelCost acc = cost_of(g);
  CHECK(plain.hbm_bytes == 30'670'848.0);
  CHECK(acc.hbm_bytes == 93'585'408.0);
  CHECK(acc.flops == plain.flops);
  CHECK(acc.compute_s == plain.compute_s);
  CHECK(plain.duration_ps == 16'794'180);
  CHECK(acc.duration_ps == 31'039'936);
}

TEST_CASE("Every kernel pays the device's launch time once: t chunks pay it t times", "[model][kernel]") {
  // kernel_launch_s 2 us. An element-wise add of 96 MB: 96e6 / 3.015e12 = 31.84 us of HBM + 2 us.
  // Split into t = 8 adds of 12 MB: 8 x (3.98 us + 2 us) = 31.84 + 16 us: (t - 1) x 2 us = 14 us more.
  // A compute-bound GEMM of 8 x 132 tiles (whole waves, no quantization), 11264 x 3072 x 4096, against
  // 8 chunks of 1408 rows (11 x 12 = 132 tiles each, one wave): compute 358.28 us whole and 8 x 44.78 us
  // in chunks (the same FLOPs, waves full either way; HBM 61.9 and 15.0 us, below);
  // launches add 2 us and 16 us.
  topo::DeviceModel d = h100();
  d.kernel_launch_s = {2e-6, "test"};
  const ElementwiseKernel whole_add{"add", 96'000'000, 0.0, 0};
  const ElementwiseKernel chunk_add{"add", 12'000'000, 0.0, 0};
  const KernelCost a = roofline.cost(whole_add, topo::Dtype::bf16, d);
  const KernelCost a8 = roofline.cost(chunk_add, topo::Dtype::bf16, d);
  CHECK(a.launch_s == 2e-6);
  CHECK(a.duration_ps == seconds_to_ps(96e6 / 3.015e12 + 2e-6));
  CHECK(8 * a8.duration_ps - a.duration_ps == Approx(14'000'000).margin(8));  // picoseconds, rounding of 9 terms
  const KernelCost g = roofline.cost(GemmKernel{11264, 3072, 4096, 1}, topo::Dtype::bf16, d);
  const KernelCost g8 = roofline.cost(GemmKernel{1408, 3072, 4096, 1}, topo::Dtype::bf16, d);
  CHECK(g.tiles == 132 * 8);
  CHECK(g8.tiles == 132);
  CHECK(g.compute_s == Approx(8 * g8.compute_s).epsilon(1e-12));
  CHECK(8 * g8.duration_ps - g.duration_ps == Approx(14'000'000).margin(8));
  // Contention stretches the roofline part, not the launch: 66 SMs held leave a one-wave chunk two
  // waves, compute 2 x 44.78 us: rate = (44.78 + 2) / (89.57 + 2).
  const double rate = roofline.rate(g8, d, DeviceLoad{66, 0.0});
  CHECK(rate == Approx((g8.compute_s + 2e-6) / (2 * g8.compute_s + 2e-6)).epsilon(1e-12));
  // Without the key (0) nothing is added: the roofline of the tests above.
  CHECK(roofline.cost(whole_add, topo::Dtype::bf16, h100()).launch_s == 0.0);
}

TEST_CASE("Empty GEMM costs nothing", "[model][kernel]") {
  const KernelCost c = cost_of(GemmKernel{0, 4096, 4096, 1});
  CHECK(c.flops == 0.0);
  CHECK(c.tiles == 0);
  CHECK(c.compute_s == 0.0);
  // The weight is still read: k x n x 2 bytes.
  CHECK(c.hbm_bytes == 4096.0 * 4096.0 * 2.0);
}

TEST_CASE("Attention FLOPs and bytes, full mask", "[model][kernel]") {
  // 4 query heads, 1 key/value head, 1024 x 1024 positions, head_dim 128:
  //   flops = 4 x 1 x 4 x 1024 x 1024 x 128 = 2,147,483,648
  //   Q and O: 1024 x 4 x 128 = 524,288 elements each; K and V: 1024 x 1 x 128 = 131,072 each
  //   bytes = (2 x 524,288 + 2 x 131,072) x 2 = 2,621,440
  //   compute_s = 2,147,483,648 / 494.5e12 = 4.342737407482e-6
  const KernelCost f = cost_of(attention(1024, 1024, false));
  CHECK(f.flops == 2'147'483'648.0);
  CHECK(f.hbm_bytes == 2'621'440.0);
  CHECK(f.tiles == 0);
  CHECK(f.compute_s == Approx(4.342737407482e-6).epsilon(1e-12));
  CHECK(f.memory_s == Approx(2'621'440.0 / 3.015e12).epsilon(1e-12));
  CHECK(f.duration_ps == 4'342'737);

  // Backward: 2.5x the FLOPs; Q, K, V, O, dO, dQ, dK, dV = twice the bytes.
  AttentionKernel b = attention(1024, 1024, false);
  b.pass = Pass::backward;
  const KernelCost bc = cost_of(b);
  CHECK(bc.flops == 2.5 * 2'147'483'648.0);
  CHECK(bc.hbm_bytes == 2.0 * 2'621'440.0);
  CHECK(bc.compute_s == Approx(2.5 * 4.342737407482e-6).epsilon(1e-12));
}

TEST_CASE("Attention FLOPs, causal mask counts exactly the unmasked pairs", "[model][kernel]") {
  // Query i sees keys 0..i: 1 + 2 + ... + 1024 = 1024 x 1025 / 2 = 524,800 pairs.
  //   flops = 4 x 4 heads x 128 x 524,800 = 1,074,790,400 (a bit more than half of the full 2,147,483,648)
  const KernelCost c = cost_of(attention(1024, 1024, true));
  CHECK(c.flops == 1'074'790'400.0);
  // The bytes do not depend on the mask.
  CHECK(c.hbm_bytes == 2'621'440.0);

  // Queries beyond the keys see all of them: seq_q 10, seq_kv 5 -> 1+2+3+4+5 + 5 x 5 = 40 pairs.
  AttentionKernel clipped = attention(10, 5, true);
  CHECK(cost_of(clipped).flops == 4.0 * 4 * 128 * 40);
  // A chunk starting at 300 over 1024 keys: sum_{i<100} (301 + i) = 100 x 301 + 4950 = 35,050 pairs.
  CHECK(cost_of(attention(100, 1024, true, 300)).flops == 4.0 * 4 * 128 * 35'050);
  // A chunk past the end of the keys sees them all: 3 queries x 5 keys.
  CHECK(cost_of(attention(3, 5, true, 7)).flops == 4.0 * 4 * 128 * 15);
}

TEST_CASE("Causal attention split into query chunks adds up exactly to the whole", "[model][kernel]") {
  const double whole = cost_of(attention(1024, 1024, true)).flops;
  SECTION("four equal chunks over the whole key sequence") {
    // Chunk j covers queries 256j .. 256j+255: 65,536 j + 32,896 pairs:
    // 32,896 + 98,432 + 163,968 + 229,504 = 524,800.
    double sum = 0.0;
    for (int j = 0; j < 4; ++j) sum += cost_of(attention(256, 1024, true, 256 * j)).flops;
    CHECK(sum == whole);
    CHECK(cost_of(attention(256, 1024, true, 0)).flops == 4.0 * 4 * 128 * 32'896);
  }
  SECTION("uneven chunks, each over only the keys up to its end") {
    const std::vector<std::int64_t> sizes = {100, 300, 1, 623};
    std::int64_t offset = 0;
    double sum = 0.0;
    for (std::int64_t s : sizes) {
      sum += cost_of(attention(s, offset + s, true, offset)).flops;
      offset += s;
    }
    REQUIRE(offset == 1024);
    CHECK(sum == whole);
  }
  SECTION("backward chunks too") {
    AttentionKernel all = attention(1024, 1024, true);
    all.pass = Pass::backward;
    double sum = 0.0;
    for (int j = 0; j < 8; ++j) {
      AttentionKernel part = attention(128, 1024, true, 128 * j);
      part.pass = Pass::backward;
      sum += cost_of(part).flops;
    }
    CHECK(sum == cost_of(all).flops);
  }
}

TEST_CASE("an attention kernel's time factor scales its time, not its FLOPs or bytes", "[model][kernel]") {
  // Causal, seq 4096 x 4096, 4 heads of 128: compute-bound at the roofline (0.5 of the bf16 peak),
  // so the duration is the compute time; a kernel at twice FlashAttention-2's time (time_factor 2)
  // takes twice as long for the same FLOPs (MFU counts the work, not the kernel).
  const AttentionKernel fa2 = attention(4096, 4096, true);
  AttentionKernel slow = fa2;
  slow.time_factor = 2.0;
  const KernelCost a = cost_of(fa2), b = cost_of(slow);
  REQUIRE(a.compute_s > a.memory_s);
  CHECK(b.flops == a.flops);
  CHECK(b.hbm_bytes == a.hbm_bytes);
  CHECK(b.compute_s == 2.0 * a.compute_s);
  CHECK(b.duration_ps == seconds_to_ps(2.0 * a.compute_s));
}

TEST_CASE("Unfused attention: Megatron's kernels over the scores, priced one after another", "[model][kernel]") {
  // 1 sample, 4 heads (1 key/value head, expanded), seq 1024, head_dim 128, causal, bf16:
  // E = 4 x 1024 x 1024 = 4,194,304 scores of 2 bytes.
  AttentionKernel a = attention(1024, 1024, true);
  a.unfused = true;
  const std::vector<Kernel> fwd = unfused_attention_parts(a, topo::Dtype::bf16);
  REQUIRE(fwd.size() == 4);
  // Q K^T: 4 products [1024 x 128] x [128 x 1024], every pair computed (the mask comes after).
  const auto& qk = std::get<GemmKernel>(fwd[0]);
  CHECK((qk.m == 1024 && qk.n == 1024 && qk.k == 128 && qk.batch == 4));
  // softmax reads and writes E: 2 x 4,194,304 x 2 = 16,777,216 B; dropout also writes a 1-byte mask:
  // 16,777,216 + 4,194,304 = 20,971,520 B.
  CHECK(std::get<ElementwiseKernel>(fwd[1]).op == "softmax");
  CHECK(std::get<ElementwiseKernel>(fwd[1]).bytes == 16'777'216);
  CHECK(std::get<ElementwiseKernel>(fwd[2]).op == "dropout");
  CHECK(std::get<ElementwiseKernel>(fwd[2]).bytes == 20'971'520);
  // P V: [1024 x 1024] x [1024 x 128] per head.
  const auto& pv = std::get<GemmKernel>(fwd[3]);
  CHECK((pv.m == 1024 && pv.n == 128 && pv.k == 1024 && pv.batch == 4));

  // The cost is the parts' in sequence, exactly; the FLOPs are the fused kernel's (the 524,800
  // unmasked pairs), not the 2 x 2 x 4 x 1024 x 1024 x 128 the two products compute.
  KernelCost sum;
  for (const Kernel& k : fwd) {
    const KernelCost c = cost_of(k);
    sum.duration_ps += c.duration_ps;
    sum.hbm_bytes += c.hbm_bytes;
    sum.memory_s += c.memory_s;
  }
  const KernelCost u = cost_of(a);
  CHECK(u.duration_ps == sum.duration_ps);
  CHECK(u.hbm_bytes == sum.hbm_bytes);
  CHECK(u.memory_s == sum.memory_s);
  CHECK(u.flops == 1'074'790'400.0);
  CHECK(u.flops == attention_flops(attention(1024, 1024, true)));
  // The scores through HBM make it slower than the fused kernel on the same device.
  CHECK(u.duration_ps > cost_of(attention(1024, 1024, true)).duration_ps);

  // Backward: dV, dP, dropout and softmax backward (2E x 2 + E and 3E x 2 bytes), dQ, dK.
  a.pass = Pass::backward;
  const std::vector<Kernel> bwd = unfused_attention_parts(a, topo::Dtype::bf16);
  REQUIRE(bwd.size() == 6);
  CHECK(std::get<ElementwiseKernel>(bwd[2]).bytes == 20'971'520);
  CHECK(std::get<ElementwiseKernel>(bwd[3]).bytes == 25'165'824);
  CHECK(cost_of(a).flops == 2.5 * 1'074'790'400.0);
  // Unfused, the scores of every head are one tensor: the size check sees them. 2^21 samples x 2^10
  // heads x 1024 x 1024 = 2^51 scores, above the 2^50 elements of one operand; fused, the largest
  // operand is 2^21 x 1024 x 1024 x head_dim 1 = 2^41 elements, and the FLOPs 10 x 2^51 are allowed.
  AttentionKernel huge = a;
  huge.batch = std::int64_t{1} << 21;
  huge.heads = 1 << 10;
  huge.kv_heads = 1 << 10;
  huge.head_dim = 1;
  CHECK(kernel_size_error(huge).has_value());
  huge.unfused = false;
  CHECK(!kernel_size_error(huge).has_value());
}

TEST_CASE("Element-wise kernels are priced by their HBM traffic", "[model][kernel]") {
  // 3,015,000,000 bytes at 3.015e12 B/s = 1 ms.
  const KernelCost c = cost_of(ElementwiseKernel{"add", 3'015'000'000, 1.0e9});
  CHECK(c.flops == 1.0e9);
  CHECK(c.hbm_bytes == 3'015'000'000.0);
  CHECK(c.compute_s == 0.0);
  CHECK(c.memory_s == Approx(1.0e-3).epsilon(1e-14));
  CHECK(c.duration_ps == 1'000'000'000);
}

TEST_CASE("rate is exactly 1 with no load", "[model][kernel][contention]") {
  const topo::DeviceModel d = h100();
  for (const Kernel& k : std::vector<Kernel>{GemmKernel{1409, 3072, 8192, 1}, GemmKernel{65536, 128, 128, 1},
                                             attention(1024, 1024, true), ElementwiseKernel{"norm", 1 << 20, 0.0},
                                             GemmKernel{0, 0, 0, 1}}) {
    CHECK(roofline.rate(cost_of(k), d, DeviceLoad{}) == 1.0);
  }
}

TEST_CASE("A one-wave GEMM beside a 24-SM collective runs at half speed", "[model][kernel][contention]") {
  // measurements.md: a 132-CTA GEMM beside a 24-CTA NCCL all-gather on H100 takes nearly twice as long.
  // 132 tiles on 132 - 24 = 108 SMs: ceil(132/108) = 2 waves instead of 1 -> compute 2x; memory_s
  // (2.72e-5 s) stays below the doubled compute (1.79e-4 s), so rate = 1/2.
  const topo::DeviceModel d = h100();
  const KernelCost c = cost_of(GemmKernel{1408, 3072, 8192, 1});
  REQUIRE(c.tiles == 132);
  CHECK(roofline.rate(c, d, DeviceLoad{24, 0.0}) == 0.5);
  // Holding 1 SM already forces the second wave.
  CHECK(roofline.rate(c, d, DeviceLoad{1, 0.0}) == 0.5);
  // The 144-tile GEMM already needs 2 waves; on 108 SMs still 2: no slowdown.
  CHECK(roofline.rate(cost_of(GemmKernel{1409, 3072, 8192, 1}), d, DeviceLoad{24, 0.0}) == 1.0);
  // 66 SMs left: ceil(132/66) = 2; 65 left: ceil(132/65) = 3 waves -> rate 1/3.
  CHECK(roofline.rate(c, d, DeviceLoad{66, 0.0}) == 0.5);
  CHECK(roofline.rate(c, d, DeviceLoad{67, 0.0}) == Approx(1.0 / 3.0).epsilon(1e-15));
  // Communication holding every SM still leaves one: 132 waves.
  CHECK(roofline.rate(c, d, DeviceLoad{500, 0.0}) == Approx(1.0 / 132.0).epsilon(1e-15));
}

TEST_CASE("Non-tiled compute slows by sm_count / sms_left", "[model][kernel][contention]") {
  // Attention is compute-bound here (4.34e-6 s vs 8.7e-7 s of HBM): 24 SMs held -> 132/108 slower.
  const KernelCost c = cost_of(attention(1024, 1024, false));
  CHECK(roofline.rate(c, h100(), DeviceLoad{24, 0.0}) == Approx(108.0 / 132.0).epsilon(1e-14));
}

TEST_CASE("HBM traffic of transfers slows a memory-bound kernel", "[model][kernel][contention]") {
  const topo::DeviceModel d = h100();
  const KernelCost c = cost_of(ElementwiseKernel{"add", 3'015'000'000, 0.0});
  // 3.015e12 - 1.005e12 = 2.01e12 B/s left: time 1 ms -> 1.5 ms, rate = 2.01 / 3.015 = 2/3.
  CHECK(roofline.rate(c, d, DeviceLoad{0, 1.005e12}) == Approx(2.0 / 3.0).epsilon(1e-14));
  // More traffic than the bandwidth: the kernel keeps its 5% floor, 0.05 x 3.015e12 -> rate 0.05.
  CHECK(roofline.rate(c, d, DeviceLoad{0, 10e12}) == Approx(0.05).epsilon(1e-14));
  // SMs held do not slow a pure stream.
  CHECK(roofline.rate(c, d, DeviceLoad{24, 0.0}) == 1.0);
  // Both at once: the larger slowdown wins (max of the two times).
  const KernelCost g = cost_of(GemmKernel{65536, 128, 128, 1});
  // Skinny GEMM: memory 1.1140033e-5 s; with 1.005e12 taken: x 1.5 = 1.6710050e-5 s. Compute on 108 SMs:
  // 512 tiles -> ceil(512/108) = 5 waves vs 4 -> 2.7990e-6 x 5/4 = 3.4988e-6 s. rate = 1/1.5.
  CHECK(roofline.rate(g, d, DeviceLoad{24, 1.005e12}) == Approx(2.0 / 3.0).epsilon(1e-14));
}

TEST_CASE("A compute-bound GEMM shrugs off moderate HBM traffic", "[model][kernel][contention]") {
  // 1408 x 3072 x 8192: memory 82,051,072 B / (3.015e12 - 1e12) = 4.072e-5 s < compute 8.957e-5 s.
  const KernelCost c = cost_of(GemmKernel{1408, 3072, 8192, 1});
  CHECK(roofline.rate(c, h100(), DeviceLoad{0, 1e12}) == 1.0);
  // 2.8e12 taken leaves 0.215e12 (above the 5% floor of 0.15075e12): memory 82,051,072 / 0.215e12 =
  // 3.8163e-4 s now exceeds compute -> rate = 8.956895902932e-5 / 3.8163e-4 = 0.2347.
  CHECK(roofline.rate(c, h100(), DeviceLoad{0, 2.8e12}) ==
        Approx(8.956895902932e-5 / (82'051'072.0 / 0.215e12)).epsilon(1e-10));
}

TEST_CASE("rate stays above 0 and at most 1", "[model][kernel][contention]") {
  const topo::DeviceModel d = h100();
  const std::vector<Kernel> kernels = {GemmKernel{8192, 768, 4096, 1}, GemmKernel{1, 1, 1, 1},
                                       attention(4096, 4096, true), ElementwiseKernel{"x", 1, 0.0}};
  for (const Kernel& k : kernels)
    for (int sms : {0, 1, 16, 24, 131, 132, 1000})
      for (double hbm : {0.0, 1.0, 1e9, 3e12, 1e15}) {
        const double r = roofline.rate(cost_of(k), d, DeviceLoad{sms, hbm});
        CHECK(r > 0.0);
        CHECK(r <= 1.0);
      }
}

TEST_CASE("Bad kernels and devices are programming errors", "[model][kernel]") {
  CHECK_THROWS_AS(cost_of(GemmKernel{-1, 1, 1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(cost_of(attention(1, 1, true, -1)), std::invalid_argument);
  CHECK_THROWS_AS(cost_of(ElementwiseKernel{"add", -5, 0.0}), std::invalid_argument);
  // No fp8 peak on this device.
  CHECK_THROWS_AS(roofline.cost(GemmKernel{1, 1, 1, 1}, topo::Dtype::fp8, h100()), std::invalid_argument);
}
