#!/usr/bin/env python3
"""tools/calibration/train_step_compare.py: kernel classes by name (hand-picked names from the
committed H100 traces), every measured kernel counted once, and fusesim's one-GPU step equal to the
sum of its kernels (one compute stream, nothing overlaps), for the H100's eager steps and the H200's
torchtitan float8 and bf16 steps (compiled, per-op recomputation)."""

import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (measured steps, the topology of their GPU)
MEASURED = [(os.path.join(ROOT, "tools/calibration/raw/microbench/" + name), topology)
            for name, topology in (("h100-sxm-2026-11-26-train-steps.json", "dgx-h100"),
                                   ("h200-sxm-2026-11-28-train-steps-torchtitan.json", "hgx-h200"))]


def load():
    spec = importlib.util.spec_from_file_location("cmp", os.path.join(ROOT, "tools/calibration/train_step_compare.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    fusesim = sys.argv[1]
    cmp = load()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    # Names as they appear in the committed traces.
    cases = [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT", "gemm"),
        ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, "
         "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t", "attention"),  # cutlass inside: still attention
        ("void at::native::vectorized_elementwise_kernel<8, at::native::GeluBackwardCUDAKernelImpl", "activation"),
        ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>", "residual"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float", "loss"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>", "norm"),
        ("void at::native::(anonymous namespace)::compute_grad_weight<c10::BFloat16, long>", "embedding"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized", "other"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
         "FusedOptimizerTensorListMetadata<4>", "optimizer"),
    ]
    for name, want in cases:
        got = cmp.measured_class(name)
        check(got == want, "measured_class(%s...) = %s, want %s" % (name[:40], got, want))

    spec = importlib.util.spec_from_file_location("ts", os.path.join(ROOT, "tools/microbench/train_step.py"))
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)  # the module imports torch only inside main()
    for measured, topology in MEASURED:
        with open(measured) as f:
            doc = json.load(f)
        for name, case in doc["cases"].items():
            total = sum(r["total_us"] for r in case["profiled_step"]["by_name"]) / 1e3
            m = cmp.measured_summary(case)
            check(abs(sum(m["by_class_ms"].values()) - total) < 1e-6,
                  "%s: classes sum to %.6f ms, the kernels to %.6f" % (name, sum(m["by_class_ms"].values()), total))
            check(all(v >= 0 for v in m["by_class_ms"].values()), "%s: a negative class" % name)

        # The measured configurations are what train_step.py builds from the workload files today: a
        # workload edited since the measurement would make the comparison price another model.
        for name, case in doc["cases"].items():
            want = ts.model_config(ROOT, ts.CASES[name])
            got = dict(case["config"])
            check(got == want, "%s: measured with %s, train_step.py builds %s" % (name, got, want))

        out = subprocess.run([sys.executable, os.path.join(ROOT, "tools/calibration/train_step_compare.py"), measured,
                              "--fusesim", fusesim, "--topology", topology, "--format", "json"],
                             capture_output=True, text=True)
        check(out.returncode == 0, "compare failed: " + out.stderr)
        if out.returncode == 0:
            rows = json.loads(out.stdout)["cases"]
            check(len(rows) == len(doc["cases"]), "a case missing from the comparison")
            for r in rows:
                p = r["predicted"]
                # One GPU, one compute stream: the step is its kernels back to back (trace durations are
                # rounded to the nanosecond, so 1 us over a few thousand tasks).
                classes = sum(p["by_class_ms"].values())
                check(abs(classes - p["step_ms"]) < 1e-3,
                      "%s: predicted classes %.6f ms, step %.6f" % (r["case"], classes, p["step_ms"]))
                check(p["by_class_ms"]["optimizer"] > 0 and p["by_class_ms"]["loss"] > 0,
                      "%s: no optimizer or loss" % r["case"])
    for f in failures:
        print("FAIL: " + f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
