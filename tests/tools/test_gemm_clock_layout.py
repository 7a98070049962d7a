#!/usr/bin/env python3
"""The figures BENCHMARKS.md ("Kernel models") and docs/microbench.md ("Power") quote from the lent
H100's clock and layout studies, recomputed from the committed raw files, and the two scripts' plan
reading (no torch needed): a shape list that drifts from the plans, or a figure that no longer
follows from the data, fails here."""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RAW = os.path.join(ROOT, "tools", "calibration", "raw", "microbench")
PLANS = [os.path.join(RAW, "plan-train-steps.json"), os.path.join(RAW, "plan-mpt-3b.json")]
sys.path.insert(0, os.path.join(ROOT, "tools", "microbench"))
import gemm_clock  # noqa: E402
import gemm_layout  # noqa: E402


def median(x):
    return sorted(x)[len(x) // 2]


def main():
    clock = json.load(open(os.path.join(RAW, "h100-sxm-2026-11-27-gemm-clock.json")))
    shapes = [(r["m"], r["n"], r["k"]) for r in clock["shapes"]]
    # 50 train-step shapes and MPT-3B's 9, in plan order, none twice.
    assert shapes == gemm_clock.read_shapes(PLANS), "the clock study's shapes are not the plans'"
    assert len(shapes) == 59
    for r in clock["shapes"]:
        assert r["burst_us"] == median(r["burst"]) * 1e6 and r["sustained_us"] == median(r["sustained"]) * 1e6
    ratio = [r["sustained_us"] / r["burst_us"] for r in clock["shapes"]]
    assert round(statistics.mean(ratio), 2) == 1.19, statistics.mean(ratio)
    assert round(min(ratio), 2) == 1.11 and round(max(ratio), 2) == 1.35, (min(ratio), max(ratio))
    loaded = [c for r in clock["shapes"] for c in r["clk_sustained"]]
    assert min(loaded) >= 1095 and max(loaded) <= 1560 and max(r["clk_idle"] for r in clock["shapes"]) == 1980

    # The second run (another lease, the committed script): the same shapes, the same picture.
    again = json.load(open(os.path.join(RAW, "h100-sxm-2026-11-27-gemm-clock-2.json")))
    assert [(r["m"], r["n"], r["k"]) for r in again["shapes"]] == shapes
    ratio2 = [r["sustained_us"] / r["burst_us"] for r in again["shapes"]]
    assert round(statistics.mean(ratio2), 2) == 1.20, statistics.mean(ratio2)
    burst = [b["burst_us"] / a["burst_us"] for a, b in zip(clock["shapes"], again["shapes"])]
    assert round(min(burst) - 1, 3) == -0.021 and round(max(burst) - 1, 3) == 0.030, (min(burst), max(burst))

    # The H200: the same shapes, sustained 1.22x burst (1.15-1.39).
    h200 = json.load(open(os.path.join(RAW, "h200-sxm-2026-11-27-gemm-clock.json")))
    assert [(r["m"], r["n"], r["k"]) for r in h200["shapes"]] == shapes
    ratio3 = [r["sustained_us"] / r["burst_us"] for r in h200["shapes"]]
    assert round(statistics.mean(ratio3), 2) == 1.22, statistics.mean(ratio3)
    assert round(min(ratio3), 2) == 1.15 and round(max(ratio3), 2) == 1.39, (min(ratio3), max(ratio3))

    layout = json.load(open(os.path.join(RAW, "h100-sxm-2026-11-27-gemm-layout.json")))
    rows = layout["shapes"]
    assert len(rows) == 176
    assert set(gemm_layout.VARIANTS) == set(rows[0]["times_s"])
    # Every plan shape and microbench's default shapes were timed.
    import microbench
    wanted = set(shapes) | {(m, n, k) for (m, n, k, b) in microbench.default_gemm_shapes(False)}
    assert wanted == {(r["m"], r["n"], r["k"]) for r in rows}

    def mean_ratio(variant, base="nn"):
        return statistics.mean(median(r["times_s"][variant]) / median(r["times_s"][base]) for r in rows)

    assert round(mean_ratio("nt") - 1, 3) == 0.009, mean_ratio("nt")
    assert round(mean_ratio("tn") - 1, 3) == 0.008, mean_ratio("tn")
    assert round(mean_ratio("nn_w002") - 1, 3) == -0.001, mean_ratio("nn_w002")

    # The scripts start without torch (it is imported only to measure).
    for script in ("gemm_clock.py", "gemm_layout.py"):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "microbench", script), "--help"],
                             capture_output=True, text=True, check=True).stdout
        assert "--plan" in out
    print("ok: 59 clock shapes, 176 layout shapes, the quoted figures follow from the raw files")


if __name__ == "__main__":
    main()
