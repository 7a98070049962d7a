"""`fusesim trace import` against an independent reading of the same traces (docs/traces.md).

This script reads the Kineto traces of tests/data/kineto with Python's json and its own interval
arithmetic (integer nanoseconds), assigns each GPU activity to the ProfilerStep during which the CPU
launched it (correlation ids; an activity without a launch record by its own start), and requires
fusesim's per-step span, compute, communication, overlapped and exposed communication, memory, idle
and activity count to equal its own to the nanosecond. The two HTA traces carry NCCL kernels running
beside compute, so overlap and exposure are not zero there.
"""
import gzip
import json
import subprocess
import sys

TRACES = [
    "tests/data/kineto/hta-sampled-rank-0.json.gz",
    "tests/data/kineto/hta-sampled-rank-1.json.gz",
    "tests/data/kineto/h100-train-step-llama3-8b-4l.json.gz",
]


def union(intervals):
    out = []
    for b, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def measure(u):
    return sum(e - b for b, e in u)


def intersect(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append([lo, hi])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def reference(path, position):
    doc = json.load(gzip.open(path))
    events = doc["traceEvents"]
    rank = doc.get("distributedInfo", {}).get("rank", position)
    acts, launches, steps = [], {}, []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat", "").lower(), e.get("name", "")
        corr = e.get("args", {}).get("correlation")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kind = "memory" if cat != "kernel" else ("comm" if "nccl" in name.lower() else "compute")
            acts.append((e["ts"], e["dur"], kind, corr))
        elif cat in ("cuda_runtime", "cuda_driver"):
            if corr is not None:
                launches[corr] = e["ts"]
        elif name.startswith("ProfilerStep#") and cat != "gpu_user_annotation":
            steps.append((int(name[13:]), e["ts"], e["ts"] + e["dur"]))
    origin = min(a[0] for a in acts)
    ns = lambda us: round((us - origin) * 1e3)
    by_step = {}
    for ts, dur, kind, corr in acts:
        step = -1
        if steps:
            at = launches.get(corr, ts) if corr is not None else ts
            step = next((s for s, b, e in steps if b <= at < e), None)
            if step is None:
                continue
        by_step.setdefault(step, []).append((ns(ts), ns(ts + dur), kind))
    out = {}
    for step, xs in by_step.items():
        c = union([(b, e) for b, e, k in xs if k == "compute"])
        m = union([(b, e) for b, e, k in xs if k == "comm"])
        mem = union([(b, e) for b, e, k in xs if k == "memory"])
        busy = union([(b, e) for b, e, k in xs])
        span = max(e for b, e, k in xs) - min(b for b, e, k in xs)
        ov = measure(intersect(c, m))
        out[step] = {"span": span, "compute": measure(c), "comm": measure(m), "overlapped": ov,
                     "exposed": measure(m) - ov, "memory": measure(mem), "idle": span - measure(busy),
                     "kernels": len(xs)}
    return rank, out


def main(fusesim):
    got = json.loads(subprocess.run([fusesim, "trace", "import", *TRACES, "--format", "json"], check=True,
                                    capture_output=True, text=True).stdout)
    assert len(got) == len(TRACES)
    overlapped_somewhere = False
    for position, (path, trace) in enumerate(zip(TRACES, got)):
        rank, ref = reference(path, position)
        assert trace["rank"] == rank, (path, trace["rank"], rank)
        assert sorted(s["step"] for s in trace["steps"]) == sorted(ref), (path, list(ref))
        for s in trace["steps"]:
            r = ref[s["step"]]
            for key, field in [("span", "span_s"), ("compute", "compute_s"), ("comm", "comm_s"),
                               ("overlapped", "overlapped_comm_s"), ("exposed", "exposed_comm_s"),
                               ("memory", "memory_s"), ("idle", "idle_s")]:
                assert round(s[field] * 1e9) == r[key], (path, s["step"], key, s[field], r[key])
            assert s["kernels"] == r["kernels"], (path, s["step"], s["kernels"], r["kernels"])
            overlapped_somewhere |= r["overlapped"] > 0 and r["exposed"] > 0
            print(f"{path} rank {rank} step {s['step']}: compute {r['compute'] / 1e6:.3f} ms, comm "
                  f"{r['comm'] / 1e6:.3f} ms, overlapped {r['overlapped'] / 1e6:.3f} ms, exposed "
                  f"{r['exposed'] / 1e6:.3f} ms, idle {r['idle'] / 1e6:.3f} ms: equal")
    assert overlapped_somewhere, "the NCCL traces should overlap communication with compute"


if __name__ == "__main__":
    main(sys.argv[1])
