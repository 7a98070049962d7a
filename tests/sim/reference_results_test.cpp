// Regression lock on the engine's results: 130 graphs (random DAGs mixing compute on several
// streams, copy-engine and SM-kernel P2P with and without explicit SMs, all four collective kinds
// over random groups, zero-time kernels, on a star and on a two-level tree with shared uplinks, with
// and without HBM contention; and ring pipelines with a contending all-reduce) must give exactly the
// SimResult recorded before the speed work of BENCHMARKS.md: every TaskTiming, every TransferRecord
// field, the makespan and the event count, folded into a 64-bit FNV-1a hash. The reference values
// were produced by the engine of commit bd730e4 (binary heap with lazy deletion), so any change to
// the event order, the tie-breaking or the rate arithmetic shows up here. A deliberate change of
// semantics must regenerate the table (and say why in its commit). The graphs come from
// std::uniform_int_distribution and from function arguments evaluated in GCC's order, so the table
// holds for this project's toolchain (GCC, libstdc++); another one would build other graphs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sim_test_util.hpp"

namespace {

using namespace sim_test;

// 64-bit FNV-1a over the bytes of each value, low byte first.
struct Fnv1a {
  std::uint64_t h = 1469598103934665603ULL;
  void add(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  }
};

inline std::uint64_t hash_result(const sim::SimResult& r) {
  Fnv1a h;
  for (auto& t : r.tasks) {
    h.add(t.ready_ps);
    h.add(t.start_ps);
    h.add(t.end_ps);
  }
  for (auto& x : r.transfers) {
    h.add(x.task);
    h.add(x.peer_task);
    h.add(x.src_rank);
    h.add(x.dst_rank);
    h.add(x.bytes);
    h.add(x.step);
    h.add((int)x.engine);
    h.add(x.start_ps);
    h.add(x.end_ps);
  }
  h.add(r.makespan_ps);
  h.add(r.events_processed);
  h.add(r.tasks.size());
  h.add(r.transfers.size());
  return h.h;
}

// Two-level: pairs of GPUs on leaf switches, leaves on a spine with thinner uplinks (shared links).
topo::Cluster tree(int n, double hbm) {
  ClusterBuilder b(hbm, 0.9, 0.95);
  std::vector<topo::VertexId> g;
  for (int i = 0; i < n; ++i) g.push_back(b.gpu());
  auto spine = b.sw("spine");
  for (int i = 0; i < n; i += 2) {
    auto leaf = b.sw("leaf" + std::to_string(i));
    b.cable(g[i], leaf, 2e11, 300000);
    if (i + 1 < n) b.cable(g[i + 1], leaf, 2e11, 300000);
    b.cable(leaf, spine, 1.3e11, 700000);
  }
  return b.done();
}

sched::TaskGraph random_graph(std::mt19937_64& rng, int R, int n) {
  sched::TaskGraph g(R);
  std::int64_t tag = 0, inst = 0;
  int k = 0;
  auto U = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  std::vector<sched::TaskId> ids;
  std::size_t floor_ids = 0;
  auto deps = [&](sched::TaskId id) {
    int d = U(0, 2);
    for (int i = 0; i < d && floor_ids > 0; ++i) {
      auto p = ids[U(0, (int)floor_ids - 1)];
      g.depend(p, id);
    }
  };
  while ((int)g.size() < n) {
    int what = U(0, 9);
    floor_ids = ids.size();
    std::string nm = "t" + std::to_string(k++);
    if (what <= 4) {
      auto id = g.add(compute(nm, U(0, R - 1), U(0, 9) == 0 ? 0.4 : 1e6 * U(1, 400), U(0, 2)));
      deps(id);
      ids.push_back(id);
    } else if (what <= 7) {
      int a = U(0, R - 1), b = U(0, R - 2);
      if (b >= a) ++b;
      auto eng = U(0, 1) ? model::CommEngine::copy_engine : model::CommEngine::sm_kernel;
      Bytes by = (Bytes)U(1, 64) << U(10, 20);
      auto s = g.add(send(nm + "s", a, b, by, tag, eng, U(0, 2) == 0 ? U(0, 30) : -1, U(0, 1)));
      auto r = g.add(recv(nm + "r", b, a, by, tag));
      ++tag;
      deps(s);
      deps(r);
      ids.push_back(s);
      ids.push_back(r);
    } else {
      int t = U(1, R);
      std::vector<int> grp;
      std::vector<int> all = iota_ranks(R);
      std::shuffle(all.begin(), all.end(), rng);
      grp.assign(all.begin(), all.begin() + t);
      auto kind = (sched::CollectiveKind)U(0, 3);
      auto eng = U(0, 3) ? model::CommEngine::sm_kernel : model::CommEngine::copy_engine;
      auto m = collective(g, nm, kind, grp, (Bytes)U(1, 64) << U(12, 22), inst++, eng, U(0, 2) == 0 ? U(0, 30) : -1);
      for (auto id : m) {
        deps(id);
        ids.push_back(id);
      }
    }
  }
  return g;
}

sched::TaskGraph pipeline_graph(int ranks, int layers, int chunks, int collective_every) {
  sched::TaskGraph g(ranks);
  std::vector<sched::TaskId> last(ranks);
  bool first = true;
  std::int64_t tag = 0, instance = 0;
  for (int l = 0; l < layers; ++l) {
    for (int c = 0; c < chunks; ++c) {
      std::vector<sched::TaskId> k(ranks), recv_on(ranks);
      const std::string p = "L" + std::to_string(l) + "/c" + std::to_string(c) + "/r";
      for (int r = 0; r < ranks; ++r) {
        k[r] = g.add(compute(p + std::to_string(r) + "/gemm", r, 4e6 + 1e4 * ((r * 7 + c) % 5)));
        if (!first) g.depend(last[r], k[r]);
      }
      for (int r = 0; r < ranks; ++r) {
        const int to = (r + 1) % ranks;
        auto sid = g.add(send(p + std::to_string(r) + "/send", r, to, 8 << 20, tag));
        recv_on[to] = g.add(recv(p + std::to_string(to) + "/recv", to, r, 8 << 20, tag));
        ++tag;
        if (!first) g.depend(last[r], sid);
      }
      for (int r = 0; r < ranks; ++r) {
        auto e = g.add(compute(p + std::to_string(r) + "/add", r, 2e5, 1));
        g.depend(k[r], e);
        g.depend(recv_on[r], e);
        last[r] = e;
      }
      first = false;
    }
    if (collective_every > 0 && l % collective_every == collective_every - 1) {
      auto ids = collective(g, "L" + std::to_string(l) + "/ar", sched::CollectiveKind::all_reduce, iota_ranks(ranks),
                            64 << 20, instance++);
      for (int r = 0; r < ranks; ++r) g.depend(last[r], ids[r]);
    }
  }
  return g;
}

struct Expected {
  const char* name;
  long long makespan_ps;
  unsigned long long events;
  unsigned long long hash;
};

const Expected kExpected[] = {{"random/1/3", 11423207289, 455, 0x50c49fa94ba8818cULL},
                              {"random/2/4", 15607875502, 669, 0x1f2ce7e09882d72fULL},
                              {"random/3/5", 22200821936, 1247, 0x333cb70c22d3f8ccULL},
                              {"random/4/6", 13256220791, 1772, 0x8d066b40d6680522ULL},
                              {"random/5/7", 15102285379, 2068, 0x8120806413eea4bcULL},
                              {"random/6/8", 18054645275, 3294, 0xd0530e3cad579f9eULL},
                              {"random/7/9", 21140102907, 3983, 0x7cf90166dcc2903eULL},
                              {"random/8/10", 22633375757, 5431, 0x7d26f22b583d70bbULL},
                              {"random/9/11", 28507781899, 6951, 0x19d4cdbefdd7e0a2ULL},
                              {"random/10/12", 36153290741, 9000, 0x97186eaf2f6c383bULL},
                              {"random/11/13", 20613491176, 9292, 0xeea3098e89af4156ULL},
                              {"random/12/14", 21780330446, 12783, 0x6536c8b8ccb3aa27ULL},
                              {"random/13/15", 33919344992, 13810, 0xcea5594c2273df75ULL},
                              {"random/14/16", 29066014905, 16464, 0x5f6517e07e015193ULL},
                              {"random/15/2", 41021233186, 1408, 0x1e278ac4e6e1a162ULL},
                              {"random/16/3", 35748331583, 1977, 0x12f6b3eca943a291ULL},
                              {"random/17/4", 29593597984, 2939, 0x97d94dac49d4391eULL},
                              {"random/18/5", 46712409268, 3773, 0x371a31e111f64ddbULL},
                              {"random/19/6", 34092674050, 5484, 0x873c1333bcc17c5dULL},
                              {"random/20/7", 46721756389, 6833, 0x47ebcb6a0b2c7565ULL},
                              {"random/21/8", 41291332974, 8136, 0x9c7cbea93ca9b94bULL},
                              {"random/22/9", 47093907805, 10199, 0xdabe46eb81c419c4ULL},
                              {"random/23/10", 52921558401, 11682, 0x7287ba9f7fe13659ULL},
                              {"random/24/11", 53246384514, 16073, 0x31ac9a5846bf39aeULL},
                              {"random/25/12", 49302191221, 16801, 0x9fb17673412bc99eULL},
                              {"random/26/13", 41153911363, 18725, 0x34e094eb3adf2f8cULL},
                              {"random/27/14", 68629613299, 22838, 0xdc9dd1b18d3e4734ULL},
                              {"random/28/15", 52055184830, 26969, 0xd59e9d116f1d6dd0ULL},
                              {"random/29/16", 42175958717, 30055, 0x247b43e0966d9b44ULL},
                              {"random/30/2", 76943689896, 2588, 0x2fb0272141f403a3ULL},
                              {"random/31/3", 63953586546, 3542, 0xfd9c17cd8994b732ULL},
                              {"random/32/4", 70360089592, 5273, 0x0329c8f33b45c036ULL},
                              {"random/33/5", 55643106339, 7002, 0xd97e9e9496783290ULL},
                              {"random/34/6", 57931333446, 8243, 0xf682d771ac05d45dULL},
                              {"random/35/7", 70613617748, 12401, 0xa9687044a6d42440ULL},
                              {"random/36/8", 68462793849, 14238, 0x117fb3a562e60a35ULL},
                              {"random/37/9", 115993912935, 16950, 0xc3456c8ef0da8b0bULL},
                              {"random/38/10", 75205705328, 21582, 0x50f558145e8faf5bULL},
                              {"random/39/11", 94028588571, 23611, 0xfbb1d3aafff16942ULL},
                              {"random/40/12", 10024363152, 1763, 0xd4509528a71383b0ULL},
                              {"random/41/13", 3841386077, 2715, 0xb481dfa6c6f00269ULL},
                              {"random/42/14", 10085721173, 3802, 0xb23d6b122934f1dbULL},
                              {"random/43/15", 15700886541, 5936, 0x7eaf1aff062a3419ULL},
                              {"random/44/16", 12054424915, 7937, 0x3ba58a7ae1e15970ULL},
                              {"random/45/2", 18504834095, 596, 0xe316e1641c0426e9ULL},
                              {"random/46/3", 23262654606, 1001, 0xaf68b71c7debc942ULL},
                              {"random/47/4", 21126039277, 1384, 0x3b0dc5e8bffedd2dULL},
                              {"random/48/5", 25689427808, 2208, 0x664553b3ec742ff7ULL},
                              {"random/49/6", 20701478277, 2948, 0x683f7e729c8acc4cULL},
                              {"random/50/7", 23779431187, 3992, 0x9154cd16a4d2fe74ULL},
                              {"random/51/8", 21093042850, 5105, 0x09def9f9b338cd64ULL},
                              {"random/52/9", 37411412986, 7384, 0x39f79d3804b14ca5ULL},
                              {"random/53/10", 32334855235, 8317, 0xe8ffbcbe523bcf05ULL},
                              {"random/54/11", 29994279410, 8793, 0x1e88a575811fa445ULL},
                              {"random/55/12", 41026498095, 10894, 0x808346efe5d99a46ULL},
                              {"random/56/13", 35111152913, 11610, 0x8d158fdec6abd101ULL},
                              {"random/57/14", 32159096347, 15392, 0xeca4c5556aa38a2cULL},
                              {"random/58/15", 33147204946, 18586, 0xf9401a29cd1f64faULL},
                              {"random/59/16", 33920613512, 21533, 0xb38f0e388c62d84cULL},
                              {"random/60/2", 53552900526, 1815, 0x2c0243551233d731ULL},
                              {"random/61/3", 38611273291, 2580, 0xf1697632e9127c7dULL},
                              {"random/62/4", 47432149302, 3625, 0x7b9615bad155b363ULL},
                              {"random/63/5", 40122365170, 4665, 0x7a20a2d600c49e70ULL},
                              {"random/64/6", 70648102583, 6805, 0xb70d602afbd9b7abULL},
                              {"random/65/7", 56078981581, 7628, 0x494087814b1f707aULL},
                              {"random/66/8", 54232824968, 10289, 0xe4162b81657e63ecULL},
                              {"random/67/9", 47000837773, 13073, 0x927b60f30ab1c3cbULL},
                              {"random/68/10", 48559198910, 14435, 0xbb50c377f8334a9dULL},
                              {"random/69/11", 79831212002, 19328, 0x72d405e3ac7894aaULL},
                              {"random/70/12", 61766997786, 24068, 0x4ef4846893229db6ULL},
                              {"random/71/13", 53904684376, 24626, 0x6fa765a32f901acbULL},
                              {"random/72/14", 58251673180, 26279, 0x51ab4f56183e51d4ULL},
                              {"random/73/15", 46947850257, 32433, 0x7004394ca5d04412ULL},
                              {"random/74/16", 58413555915, 36954, 0x34d48c0467ed2c53ULL},
                              {"random/75/2", 81952819441, 2956, 0xb55ce26763d2b993ULL},
                              {"random/76/3", 80338688641, 4026, 0x1f92b0ae664df92fULL},
                              {"random/77/4", 74496545052, 6267, 0x80fd0407174fbd2bULL},
                              {"random/78/5", 78426244978, 7510, 0xc917eda6f7681561ULL},
                              {"random/79/6", 78524899120, 9773, 0xe5ce71a04a51752bULL},
                              {"random/80/7", 4891415933, 993, 0x2412219b31bf324dULL},
                              {"random/81/8", 6116657822, 2081, 0x78e484a2c43974deULL},
                              {"random/82/9", 10609358557, 2060, 0x81b9771e45d686aaULL},
                              {"random/83/10", 18347421893, 3414, 0xb83adc2c9d4c95f3ULL},
                              {"random/84/11", 14641501899, 3819, 0x99d419f83f2f82ccULL},
                              {"random/85/12", 21182501918, 4630, 0xea31364d37f6af02ULL},
                              {"random/86/13", 11159554319, 6106, 0xd21a68dc340e8661ULL},
                              {"random/87/14", 22177086829, 7224, 0x23d7e2a3e04d1637ULL},
                              {"random/88/15", 32238945169, 11298, 0x9c969edf97d3bb9aULL},
                              {"random/89/16", 26545977555, 10120, 0x731cc05b7b8160edULL},
                              {"random/90/2", 27802361713, 1031, 0x645bebbd648ee1c6ULL},
                              {"random/91/3", 22465749074, 1713, 0x653ebd98bcc865b8ULL},
                              {"random/92/4", 24055292801, 2278, 0x0bf1e806e4a1c467ULL},
                              {"random/93/5", 23643214350, 3242, 0xfd91854d0b601865ULL},
                              {"random/94/6", 40091679859, 4385, 0x2f624ef4c61473a1ULL},
                              {"random/95/7", 25434276984, 5115, 0xf0cf8a455f409e7bULL},
                              {"random/96/8", 27406507904, 7029, 0xd8c6a5ff145d1e99ULL},
                              {"random/97/9", 39300291704, 9179, 0x78f6018ce2606e59ULL},
                              {"random/98/10", 39383526532, 9071, 0xe9efcc4a372aef79ULL},
                              {"random/99/11", 43362906852, 13447, 0x7723eaa6a1270fc9ULL},
                              {"random/100/12", 44105281227, 16403, 0x0bbdb4c6535cd42dULL},
                              {"random/101/13", 33948548227, 19145, 0x2c476b2a92389193ULL},
                              {"random/102/14", 47921588708, 19114, 0x67f1965d7a661a0aULL},
                              {"random/103/15", 36954131946, 21696, 0xfc95abfd21e28e05ULL},
                              {"random/104/16", 39849834811, 23426, 0x7fdc1b512c8369acULL},
                              {"random/105/2", 59761347835, 2168, 0x4408bae2d0bfb44eULL},
                              {"random/106/3", 56337438802, 3177, 0x56f088d65a970a8fULL},
                              {"random/107/4", 43092217825, 4645, 0xc3b3dd4a77bf98e4ULL},
                              {"random/108/5", 63869481873, 6423, 0x0d6209ba35d81b62ULL},
                              {"random/109/6", 75506551556, 7994, 0x1be55cc11c913a27ULL},
                              {"random/110/7", 66952130548, 9160, 0xb231da274a27cea5ULL},
                              {"random/111/8", 78659045781, 12693, 0x99ba8b9a2fe05567ULL},
                              {"random/112/9", 58346259802, 12850, 0xf5cdf0ac2d8d5adcULL},
                              {"random/113/10", 82889453214, 17965, 0x4c0461cc8c86d77aULL},
                              {"random/114/11", 78728451535, 20639, 0x4d5074a8521d2d72ULL},
                              {"random/115/12", 109984033317, 23241, 0xc78a33f7b083365eULL},
                              {"random/116/13", 73891985787, 28031, 0xa4c978a631653220ULL},
                              {"random/117/14", 63473508990, 31818, 0x14ad3c5bdd1b3664ULL},
                              {"random/118/15", 83567001807, 33003, 0x4250a899d31eb775ULL},
                              {"random/119/16", 91640229432, 41350, 0x3b9543c1893ebfaeULL},
                              {"random/120/2", 10174277891, 278, 0x028706f0a22fc96aULL},
                              {"pipeline/8/40/0", 4956544030, 6245, 0xf5285595eb2f0b7bULL},
                              {"pipeline/8/40/1", 5034711842, 6245, 0x683d83c4107cb52fULL},
                              {"pipeline/64/16/0", 2329029123, 48642, 0x24289059dc73e057ULL},
                              {"pipeline/64/16/1", 2340085804, 48642, 0xbfb16da375410c61ULL},
                              {"pipeline/256/4/0", 365159600, 16384, 0x69b1beb085f3f566ULL},
                              {"pipeline/256/4/1", 365159600, 16384, 0x61116ffcd3895371ULL},
                              {"pipeline/3/100/0", 11396204384, 5100, 0x4b11b47cc4055c21ULL},
                              {"pipeline/3/100/1", 11458604384, 5100, 0x919bd73e60459608ULL},
                              {"pipeline/16/24/0", 3099904098, 9027, 0xa9f19f6d1b43452dULL},
                              {"pipeline/16/24/1", 3106289976, 9027, 0x96cb21356703871dULL}};

}  // namespace

TEST_CASE("engine results equal the recorded reference, bit for bit", "[sim][determinism][reference]") {
  TestCostModel costs;
  std::vector<std::string> got;
  std::size_t i = 0;
  auto check = [&](const std::string& name, const sim::SimResult& r) {
    REQUIRE(i < std::size(kExpected));
    INFO(name);
    REQUIRE(name == kExpected[i].name);
    CHECK(r.makespan_ps == kExpected[i].makespan_ps);
    CHECK(r.events_processed == kExpected[i].events);
    CHECK(hash_result(r) == kExpected[i].hash);
    ++i;
  };
  for (int seed = 1; seed <= 120; ++seed) {
    std::mt19937_64 rng(seed);
    const int R = 2 + seed % 15;
    const int n = 200 + 60 * (seed % 40);
    const double hbm = (seed % 3) * 0.7;
    const auto cl = (seed % 2) ? tree(R, hbm) : star(R, 1e11, 500000, hbm, 0.85, 0.9);
    const auto g = random_graph(rng, R, n);
    sim::Simulator s(cl, costs);
    check("random/" + std::to_string(seed) + "/" + std::to_string(R), s.run(g));
  }
  const int shapes[][2] = {{8, 40}, {64, 16}, {256, 4}, {3, 100}, {16, 24}};
  for (auto [R, L] : shapes) {
    for (double hbm : {0.0, 1.0}) {
      const auto cl = star(R, 4.5e11, 500000, hbm, 0.9, 0.95);
      const auto g = pipeline_graph(R, L, 4, 8);
      sim::Simulator s(cl, costs);
      check("pipeline/" + std::to_string(R) + "/" + std::to_string(L) + "/" + (hbm == 0.0 ? "0" : "1"), s.run(g));
    }
  }
  REQUIRE(i == std::size(kExpected));
}
