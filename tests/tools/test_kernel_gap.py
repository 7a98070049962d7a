#!/usr/bin/env python3
"""The h100-sxm profile's device.kernel_gap_s, recomputed from the two profiled H100 steps it cites
(tests/data/kineto/): the idle time between consecutive GPU activities of each step, the gaps at the
step's start (the host's lead building up: over 100 us each) left out. Reads the raw Kineto JSON
itself, not through fusesim, so that a change in either side shows."""
import gzip
import json
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRACES = {"h100-train-step-mpt-1b-plain.json.gz": (1360, 1.624),
          "h100-train-step-llama3-8b-4l.json.gz": (770, 1.592)}
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
START_GAP_US = 20.0  # the step's start: 150-261 us in both traces; every gap inside a step is under 3 us


def gaps_us(path):
    events = json.load(gzip.open(path))["traceEvents"]
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES), key=lambda e: e["ts"])
    assert len({e["args"]["stream"] for e in gpu}) == 1, "one stream: every gap is between consecutive kernels"
    out, end = [], gpu[0]["ts"] + gpu[0]["dur"]
    for e in gpu[1:]:
        out.append(e["ts"] - end)
        end = max(end, e["ts"] + e["dur"])
    return out


def main():
    total_n, total_us = 0, 0.0
    for name, (want_n, want_mean) in TRACES.items():
        g = gaps_us(os.path.join(ROOT, "tests", "data", "kineto", name))
        assert min(g) >= 0, name
        start = [x for x in g if x >= START_GAP_US]
        inside = [x for x in g if x < START_GAP_US]
        assert len(start) == 2 and all(x > 100 for x in start), (name, start)
        assert len(inside) == want_n, (name, len(inside))
        mean = sum(inside) / len(inside)
        assert round(mean, 3) == want_mean, (name, mean)
        total_n += len(inside)
        total_us += sum(inside)
    mean_s = total_us / total_n * 1e-6
    for rel in ("profiles/h100-sxm.json", "profiles/alternatives/h100-sxm-cuda13.json"):
        gap = json.load(open(os.path.join(ROOT, rel)))["device"]["kernel_gap_s"]
        # 1.61 us over both steps, shipped to two significant digits.
        assert gap["value"] == float(f"{mean_s:.2g}"), (rel, gap["value"], mean_s)
        assert "tests/data/kineto/h100-train-step-mpt-1b-plain.json.gz" in gap["source"], rel
    print(f"kernel gap: {total_n} gaps, mean {mean_s * 1e6:.3f} us; the profiles say {gap['value'] * 1e6:.2g} us")


if __name__ == "__main__":
    main()
