// The GEMM plan search of RooflineCostModel: the fastest of the device's tiles and K splits.
#include <catch2/catch.hpp>

#include "fusesim/model/kernel.hpp"

using namespace fusesim;
using namespace fusesim::model;

namespace {

// H100 as in test_kernel_cost.cpp (effective GEMM peak 791.2e12 FLOP/s, HBM 3.015e12 B/s, 132 SMs),
// with the plans the shipped topologies offer: 128x256, then 128x128 and 64x128, split-K up to 16.
topo::DeviceModel h100_with_plans(int max_split_k) {
  topo::DeviceModel d;
  d.name = "h100-test";
  d.peak_flops_per_s[topo::Dtype::bf16] = {989e12, "test"};
  d.hbm_bandwidth_bytes_per_s = {3.35e12, "test"};
  d.sm_count = 132;
  d.gemm_tile_m = 128;
  d.gemm_tile_n = 256;
  d.gemm_tile_alternatives = {{128, 128}, {64, 128}};
  d.gemm_max_split_k = max_split_k;
  d.efficiency.gemm = {0.8, "test"};
  d.efficiency.attention = {0.5, "test"};
  d.efficiency.hbm = {0.9, "test"};
  return d;
}

const RooflineCostModel roofline;

}  // namespace

TEST_CASE("A CommFuse chunk GEMM takes the plan that fills the SMs", "[model][kernel][plans]") {
  // Llama-3-70B QKV at TP 8 on one of 8 sequence chunks: 1024 x 1280 x 8192.
  //   flops = 2 x 1024 x 1280 x 8192 = 21,474,836,480; ideal = flops / 791.2e12 = 2.714210e-5 s
  //   bytes = (1024x8192 + 8192x1280 + 1024x1280) x 2 = 40,370,176
  // Main tile alone: 8 x 5 = 40 CTAs, one wave on 132 SMs -> x 132/40 = 3.3 -> 8.95689e-5 s.
  // Best plan: 64 x 128 tiles (16 x 10 = 160) split 4 ways -> 640 CTAs = 5 waves of 132 ->
  //   x 660/640 = 1.03125 -> compute 2.799030e-5 s; split-K partials add 2 x 4 B x 4 x 1024 x 1280 =
  //   41,943,040 B -> memory (40,370,176 + 41,943,040) / 3.015e12 = 2.730123e-5 s < compute.
  //   duration = 27,990,299.7 ps -> 27,990,300 ps.
  // (The others: 128x256 split 3 = 120 CTAs, x 1.1 = 2.98563e-5 s; 128x128 split 8 = 640 CTAs but
  //  memory (40,370,176 + 83,886,080) / 3.015e12 = 4.1213e-5 s.)
  const GemmKernel g{1024, 1280, 8192, 1};
  const KernelCost best = roofline.cost(g, topo::Dtype::bf16, h100_with_plans(16));
  CHECK(best.flops == 21'474'836'480.0);
  CHECK(best.tiles == 640);
  CHECK(best.hbm_bytes == 40'370'176.0 + 41'943'040.0);
  CHECK(best.duration_ps == 27'990'300);

  // Without alternatives or split-K the main tile's single, 40/132-full wave is all there is.
  const KernelCost main_only = roofline.cost(g, topo::Dtype::bf16, h100_with_plans(1));
  // With max_split_k 1 the alternatives still apply: 128x128 gives 80 CTAs (x 1.65), 64x128 gives
  // 160 CTAs = 2 waves (x 264/160 = 1.65): 2.714210e-5 x 1.65 = 4.4784480e-5 s
  // (44,784,479.5 ps, rounded to 44,784,480); the first found wins.
  CHECK(main_only.tiles == 80);
  CHECK(main_only.duration_ps == 44'784'480);
}

TEST_CASE("A shape that fills the SMs keeps the main tile", "[model][kernel][plans]") {
  // 1408 x 3072: 11 x 12 = 132 tiles of 128x256, exactly one wave, quantization 1: no plan beats
  // the ideal compute time 8.956896e-5 s, and ties go to the main tile without split.
  const KernelCost c = roofline.cost(GemmKernel{1408, 3072, 8192, 1}, topo::Dtype::bf16, h100_with_plans(16));
  CHECK(c.tiles == 132);
  CHECK(c.hbm_bytes == (1408.0 * 8192 + 8192.0 * 3072 + 1408.0 * 3072) * 2);
  CHECK(c.duration_ps == 89'568'959);
}

TEST_CASE("Split-K never leaves a CTA less than 256 of K", "[model][kernel][plans]") {
  // k = 512: at most 2 splits (512 / 2 = 256). 256 x 256 output: 2 x 1 = 2 tiles of 128x256,
  // 4 of 128x128, 8 of 64x128 -> with split 2: 16 CTAs, one wave, the best of them (x 132/16).
  //   flops = 2 x 256 x 256 x 512 = 67,108,864 -> compute = 67,108,864 / 791.2e12 x 8.25 = 6.9975749e-7 s
  //   bytes = (256x512 x 2 + 256x256) x 2 + 2 x 4 x 2 x 256 x 256 = 655,360 + 1,048,576 = 1,703,936
  //   memory = 1,703,936 / 3.015e12 = 5.65153e-7 s < compute -> 699,757 ps (699,757.49)
  const KernelCost c = roofline.cost(GemmKernel{256, 256, 512, 1}, topo::Dtype::bf16, h100_with_plans(16));
  CHECK(c.tiles == 16);
  CHECK(c.duration_ps == 699'757);
}
