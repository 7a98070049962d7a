#!/usr/bin/env python3
"""Measures what fusesim's calibrated cost model needs on one GPU node and writes one calibration
document (schema "fusesim.calibration", version 1; docs/calibration.md, docs/microbench.md).

Sections: GEMM (bf16, fp16) over the shapes the workloads produce, fused attention forward and
backward (FlashAttention backend of scaled_dot_product_attention), element-wise / norm kernels,
device-to-device copies, a GEMM's slowdown beside communication, and with several GPUs (torchrun)
all-gather, reduce-scatter, all-reduce, all-to-all and point-to-point send/recv over message sizes.

  python3 microbench.py -o h100.json                               # one GPU
  torchrun --nproc-per-node 8 microbench.py -o h100.json           # one node, 8 GPUs
  python3 microbench.py --plan plan.json -o h100.json --fusesim build/fusesim --peak-tflops 989
  python3 microbench.py --dry-run -o synthetic.json                # no GPU, no torch: synthetic device

Python 3 standard library only, plus torch in the measuring mode. --dry-run does not import torch.
"""

import argparse
import datetime
import json
import math
import os
import stat
import random
import socket
import subprocess
import sys
import time

SCHEMA = "fusesim.calibration"
SCHEMA_VERSION = 1
PLAN_SCHEMA = "fusesim.microbench-plan"

# ---------------------------------------------------------------------------------------------------
# The synthetic device of --dry-run. Its figures are round numbers in the range of an H100 SXM5 (989
# dense BF16 TFLOP/s and 3.35 TB/s HBM3 from the NVIDIA datasheet; ~360 GB/s ring all-gather bus
# bandwidth on 8 GPUs from NVIDIA/nccl-tests#212), chosen so that `fusesim calibrate fit` can be
# checked against them exactly: every synthetic time follows the model the fit assumes.
# ---------------------------------------------------------------------------------------------------
SYNTHETIC = {
    "device_name": "Synthetic GPU (microbench --dry-run)",
    "sm_count": 132,
    "peak_flops_per_s": 989e12,          # dense bf16 = fp16 peak of the synthetic device
    "gemm_efficiency": 0.75,             # GEMM time = launch + 2mnk / (peak x 0.75)
    "attention_efficiency": 0.45,        # attention time = launch + FlashAttention FLOPs / (peak x 0.45)
    "kernel_launch_s": 5e-6,
    "hbm_bytes_per_s": 3.0e12,           # elementwise / copy time = launch + HBM traffic / 3.0e12
    "memory_launch_s": 4e-6,
    # op: (latency_s, busbw_bytes_per_s); time = latency + bytes x bus factor / busbw (nccl-tests model)
    "collectives": {
        "all_gather": (12e-6, 360e9),
        "reduce_scatter": (14e-6, 350e9),
        "all_reduce": (20e-6, 370e9),
        "all_to_all": (16e-6, 320e9),
        "p2p": (8e-6, 380e9),
    },
    "collective_ranks": 8,
    "sm_kernel_slowdown_per_sm": 0.008,  # GEMM slowdown = 1 + 0.008 x SMs held by the collective
    "copy_engine_slowdown": 1.04,        # GEMM slowdown beside a copy-engine transfer
    "stream_wait_s": 1e-6,               # cross-stream event wait, per hop
}

# Tiny kernels in the stream-wait chain: each hop is one kernel, alternating between two streams (an
# event recorded on one and waited for on the other) or all on one stream.
STREAM_WAIT_HOPS = 200

DEFAULT_CONTENTION_SMS = [8, 16, 24, 32]

# --timing burst: launches per sample at most (a burst, not a sustained load), and the sleep kernel
# queued before them, per timed launch: 200k cycles, 0.1-0.2 ms at 1-2 GHz, longer than a slow host
# takes to queue one launch (a lent H100's host took 30-40 us per torch._scaled_mm call; with a sleep
# of 400k cycles for the whole burst its smallest GEMMs timed the host, not the GPU).
BURST_LAUNCHES = 20
BURST_SLEEP_CYCLES_PER_LAUNCH = 200_000
COLLECTIVE_OPS = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p"]


def log(msg):
    print("microbench: " + msg, file=sys.stderr, flush=True)


def bus_factor(op, ranks):
    """nccl-tests doc/PERFORMANCE.md: busbw = algbw x this."""
    if op == "p2p":
        return 1.0
    return (2.0 if op == "all_reduce" else 1.0) * (ranks - 1) / ranks


def attention_flops(batch, heads, seq, head_dim, causal, pass_):
    """FLOPs as FlashAttention's benchmark counts them: forward 4 b h s^2 d (halved when causal),
    backward 2.5 x forward."""
    f = 4.0 * batch * heads * seq * seq * head_dim
    if causal:
        f *= 0.5
    if pass_ == "backward":
        f *= 2.5
    return f


# ---------------------------------------------------------------------------------------------------
# What to measure
# ---------------------------------------------------------------------------------------------------

def default_gemm_shapes(quick):
    """Transformer-layer GEMMs of TPSP (tokens x N x K) for hidden 4096 and 8192 (4 x hidden MLP) at
    TP 1-8, when no plan from `fusesim calibrate plan` is given."""
    shapes = set()
    hiddens = [4096] if quick else [4096, 8192]
    tps = [1, 4, 8] if quick else [1, 2, 4, 8]
    tokens_list = [2048, 8192] if quick else [1024, 2048, 4096, 8192, 16384]
    for h in hiddens:
        for tp in tps:
            for t in tokens_list:
                for n, k in ((3 * h // tp, h), (h, h // tp), (4 * h // tp, h), (h, 4 * h // tp)):
                    shapes.add((t, n, k, 1))
    for s in (1024, 2048, 4096, 8192, 16384):
        shapes.add((s, s, s, 1))
    return sorted(shapes)


def default_attention_shapes(quick):
    """(batch, heads, kv_heads, seq, head_dim, causal): sequence 512 to 128k at 16k tokens per batch
    (or one sample beyond), head dim 64 and 128 at hidden 2048."""
    out = []
    seqs = [1024, 8192, 32768] if quick else [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    for head_dim in (64, 128):
        heads = 2048 // head_dim
        for seq in seqs:
            batch = max(1, 16384 // seq)
            for causal in (True, False):
                out.append((batch, heads, heads, seq, head_dim, causal))
    return out


def default_memory_sizes(quick):
    return [1 << p for p in (range(20, 31, 4) if quick else range(20, 31, 2))]


def collective_sizes(quick):
    return [1 << p for p in (range(12, 31, 6) if quick else range(10, 31, 2))]


def read_plan(path):
    with open(path) as f:
        plan = json.load(f)
    if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA:
        raise SystemExit("microbench: %s is not a plan from `fusesim calibrate plan` (schema %r)" % (path, PLAN_SCHEMA))
    gemms = sorted({(g["m"], g["n"], g["k"], g.get("batch", 1)) for g in plan.get("gemm", [])})
    # The calibration schema keeps one sequence per attention sample: a query chunk against a longer
    # key range is measured at the key length (the model interpolates throughput in the sequence).
    attns = sorted({(a["batch"], a["heads"], a["kv_heads"], a["seq_kv"], a["head_dim"], bool(a["causal"]))
                    for a in plan.get("attention", [])})
    memory = sorted({int(e["bytes"]) for e in plan.get("elementwise", []) if int(e["bytes"]) >= 4096})
    return gemms, attns, memory


def topology_device_model(topology):
    """(name, figures) of the only device model of a topology (a file, or the name of a file shipped in
    the repository's topologies/ folder, as fusesim's --topology takes): SM count, bf16 peak, HBM
    bandwidth and the line rate of its scale-up links."""
    path = topology
    if not os.path.isfile(path):
        shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "topologies", topology + ".json")
        if not os.path.isfile(shipped):
            raise SystemExit("microbench: --topology %s: no such file, nor a shipped topology" % topology)
        path = shipped
    try:
        with open(path) as f:
            models = json.load(f)["device_models"]
        if len(models) != 1:
            raise SystemExit("microbench: --topology %s: %d device models; the dry run stands for one" % (topology, len(models)))
        (name, model), = models.items()

        def value(v):
            return v["value"] if isinstance(v, dict) else v
        with open(path) as f:
            line_rate = value(json.load(f)["node"]["scale_up"]["link"]["line_rate_bytes_per_s"])
        return name, {"sm_count": int(value(model["sm_count"])),
                      "peak_flops_per_s": float(value(model["peak_flops_per_s"]["bf16"])),
                      "hbm_bytes_per_s": float(value(model["hbm_bandwidth_bytes_per_s"])),
                      "scale_up_line_rate": float(value(line_rate))}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit("microbench: --topology %s: cannot read its device model (%s)" % (topology, e))


# The synthetic figures scaled to a topology's device, so that the profile is one its cluster can
# take: the bf16 peak and SM count its own, HBM and the collectives' bus bandwidths in the same
# proportion to its HBM bandwidth and scale-up line rate as SYNTHETIC's to an H100 SXM5 (3.35 TB/s,
# NVLink4 450 GB/s). Unscaled, an A100 would be given GEMMs above its peak (the fit refuses them) and
# a P2P bus bandwidth above its 300 GB/s NVLink (simulate --profile refuses that).
H100_HBM_BYTES_PER_S = 3.35e12
H100_NVLINK_LINE_RATE = 450e9


def synthetic_for(model):
    syn = dict(SYNTHETIC)
    syn["peak_flops_per_s"] = model["peak_flops_per_s"]
    syn["sm_count"] = model["sm_count"]
    syn["hbm_bytes_per_s"] = SYNTHETIC["hbm_bytes_per_s"] * model["hbm_bytes_per_s"] / H100_HBM_BYTES_PER_S
    scale = model["scale_up_line_rate"] / H100_NVLINK_LINE_RATE
    syn["collectives"] = {op: (lat, busbw * scale) for op, (lat, busbw) in SYNTHETIC["collectives"].items()}
    return syn


# ---------------------------------------------------------------------------------------------------
# Backends: the synthetic device (--dry-run) and the GPU (torch). Both return lists of seconds.
# ---------------------------------------------------------------------------------------------------

class SyntheticBackend:
    def __init__(self, args):
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.noise = args.noise
        self.repeats = args.repeats
        self.world = SYNTHETIC["collective_ranks"]
        self.nodes = 1
        self.rank = 0
        self.topology_model = topology_device_model(args.topology) if args.topology else None
        self.syn = synthetic_for(self.topology_model[1]) if self.topology_model else SYNTHETIC

    def _samples(self, t):
        out = []
        for _ in range(self.repeats):
            # Multiplicative noise, bounded so that a time stays positive.
            f = 1.0 + self.noise * self.rng.gauss(0.0, 1.0) if self.noise > 0 else 1.0
            out.append(t * max(0.5, f))
        return out

    def _gemm_time(self, m, n, k, batch):
        peak = self.syn["peak_flops_per_s"] * self.syn["gemm_efficiency"]
        return self.syn["kernel_launch_s"] + 2.0 * m * n * k * batch / peak

    def gemm(self, dtype, m, n, k, batch):
        return self._samples(self._gemm_time(m, n, k, batch))

    def attention(self, dtype, pass_, batch, heads, kv_heads, seq, head_dim, causal):
        flops = attention_flops(batch, heads, seq, head_dim, causal, pass_)
        peak = self.syn["peak_flops_per_s"] * self.syn["attention_efficiency"]
        return self._samples(self.syn["kernel_launch_s"] + flops / peak)

    def elementwise(self, op, traffic_bytes):
        return self._samples(self.syn["memory_launch_s"] + traffic_bytes / self.syn["hbm_bytes_per_s"])

    def copy(self, nbytes):
        return self._samples(self.syn["memory_launch_s"] + 2.0 * nbytes / self.syn["hbm_bytes_per_s"])

    def contention(self, dtype, m, n, k, aggressor, comm_sms):
        alone = self._gemm_time(m, n, k, 1)
        if aggressor == "sm_kernel":
            slowdown = 1.0 + self.syn["sm_kernel_slowdown_per_sm"] * comm_sms
        else:
            slowdown = self.syn["copy_engine_slowdown"]
        return self._samples(alone), self._samples(alone * slowdown)

    def can_sm_contention(self):
        return True

    def stream_wait(self, hops):
        one = hops * self.syn["memory_launch_s"]
        return self._samples(one), self._samples(one + hops * self.syn["stream_wait_s"])

    def collective(self, op, nbytes):
        lat, busbw = self.syn["collectives"][op]
        return self._samples(lat + nbytes * bus_factor(op, self.world) / busbw)

    def barrier(self):
        pass

    def describe(self):
        device = {"name": SYNTHETIC["device_name"], "sm_count": SYNTHETIC["sm_count"]}
        if self.topology_model:
            # fusesim applies a profile only to a cluster of the device it was measured on
            # (check_profile_device): a dry run for --topology stands for that topology's device, else
            # the profile it writes is refused by every cluster, the named one included.
            name, model = self.topology_model
            device = {"name": "%s (synthetic, microbench --dry-run)" % name, "model": name,
                      "sm_count": model["sm_count"]}
        return {
            "device": device,
            "provenance": {
                "kind": "synthetic",
                "machine": "synthetic device (no GPU)",
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                "libraries": {"python": "%d.%d.%d" % sys.version_info[:3]},
                "source": "tools/microbench/microbench.py --dry-run: times computed from the SYNTHETIC constants "
                          "in the script (noise %g, seed %d), not measured" % (self.noise, self.seed),
            },
        }

    def close(self):
        pass


class TorchBackend:
    """Times kernels with CUDA events: warm-up, then repeats of `inner` back-to-back launches, each
    repeat one raw sample (seconds per launch)."""

    def __init__(self, args):
        import torch  # only here: --dry-run runs without torch

        self.torch = torch
        self.args = args
        if not torch.cuda.is_available():
            raise SystemExit("microbench: no CUDA device visible to torch (use --dry-run without a GPU)")
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.dist = None
        if self.world > 1:
            import torch.distributed as dist

            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local_rank)
            # Single-device sections take minutes on each rank between collectives.
            dist.init_process_group("nccl", timeout=datetime.timedelta(hours=3))
            self.dist = dist
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
            self.nodes = max(1, self.world // max(1, local_world))
        else:
            self.nodes = 1
        # The topology's device model, so that `fusesim calibrate fit --topology` and simulate accept
        # the profile (check_profile_device matches device.model exactly).
        self.device_model = topology_device_model(args.topology)[0] if args.topology else None
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.side = torch.cuda.Stream(device=self.device)
        self.props = torch.cuda.get_device_properties(self.device)

    # -- timing ---------------------------------------------------------------------------------------

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def _once(self, fn, inner=1):
        start, end = self._event(), self._event()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner

    def _plan_repeats(self, one_s):
        """Launches per sample (a sample lasts >= 1 ms so that the event resolution does not matter)
        and samples (within --budget-s seconds per shape, at least 3)."""
        inner = max(1, min(1000, int(1e-3 / max(one_s, 1e-7))))
        reps = max(3, min(self.args.repeats, int(self.args.budget_s / max(one_s * inner, 1e-9))))
        return inner, reps

    def _time(self, fn):
        for _ in range(self.args.warmup):
            fn()
        self.torch.cuda.synchronize()
        one_s = self._once(fn)
        if self.args.timing == "burst":
            return self._bursts(fn, one_s)
        inner, reps = self._plan_repeats(one_s)
        return [self._once(fn, inner) for _ in range(reps)]

    def _bursts(self, fn, one_s):
        """--timing burst: each sample after --idle-s of host sleep, as a kernel runs inside a training
        step (next to other ops, at the clock a short burst keeps) rather than back to back for a
        whole budget, which holds a power-capped GPU at its lower sustained clock (docs/microbench.md,
        "Power"). Two launches wake the clock; a sleep kernel then keeps the GPU busy while the host
        queues the timed launches (at most BURST_LAUNCHES, about 1 ms of work), so that the GPU, not
        the launch rate, sets their pace (tools/calibration/build_profiles.py keeps a shape's samples
        only when its repeats agree)."""
        torch = self.torch
        inner = max(1, min(BURST_LAUNCHES, int(1e-3 / max(one_s, 1e-7))))
        out = []
        for _ in range(self.args.burst_samples):
            time.sleep(self.args.idle_s)
            fn()
            fn()
            torch.cuda._sleep(BURST_SLEEP_CYCLES_PER_LAUNCH * inner)
            out.append(self._once(fn, inner))
        return out

    def _fits(self, nbytes):
        free, _total = self.torch.cuda.mem_get_info(self.device)
        return nbytes < 0.6 * free

    def _dtype(self, name):
        return {"bf16": self.torch.bfloat16, "fp16": self.torch.float16}[name]

    # -- kernels --------------------------------------------------------------------------------------

    def _fp8_gemm(self, m, n, k):
        """e4m3 x e4m3 -> bf16 with per-tensor scales (torch._scaled_mm, cuBLASLt), as Transformer
        Engine runs a forward GEMM; the second operand column-major, as those kernels take it."""
        torch = self.torch
        if m % 16 or n % 16 or k % 16:
            return None
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device=self.device, dtype=torch.bfloat16).to(f8)
        b = torch.randn(n, k, device=self.device, dtype=torch.bfloat16).to(f8).t()
        one = torch.ones((), dtype=torch.float32, device=self.device)
        try:
            return self._time(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        except (RuntimeError, TypeError) as e:
            log("fp8 gemm %dx%dx%d skipped: %s" % (m, n, k, str(e).splitlines()[0]))
            return None
        finally:
            del a, b

    def gemm(self, dtype, m, n, k, batch):
        torch = self.torch
        if not self._fits(2 * batch * (m * k + k * n + m * n)):
            return None
        if dtype == "fp8":
            return self._fp8_gemm(m, n, k) if batch == 1 else None
        dt = self._dtype(dtype)
        lead = (batch,) if batch > 1 else ()
        a = torch.randn(*lead, m, k, dtype=dt, device=self.device)
        b = torch.randn(*lead, k, n, dtype=dt, device=self.device)
        c = torch.empty(*lead, m, n, dtype=dt, device=self.device)
        try:
            return self._time(lambda: torch.matmul(a, b, out=c))
        finally:
            del a, b, c

    def _flash(self):
        """The FlashAttention backend of scaled_dot_product_attention, and no fallback."""
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3

            return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        except ImportError:
            return self.torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)

    def attention(self, dtype, pass_, batch, heads, kv_heads, seq, head_dim, causal):
        torch = self.torch
        import torch.nn.functional as F

        if not self._fits(2 * batch * seq * head_dim * (2 * heads + 2 * kv_heads) * (3 if pass_ == "backward" else 1)):
            return None
        dt = self._dtype(dtype)
        grad = pass_ == "backward"
        q = torch.randn(batch, heads, seq, head_dim, dtype=dt, device=self.device, requires_grad=grad)
        k = torch.randn(batch, kv_heads, seq, head_dim, dtype=dt, device=self.device, requires_grad=grad)
        v = torch.randn(batch, kv_heads, seq, head_dim, dtype=dt, device=self.device, requires_grad=grad)
        kwargs = {"is_causal": causal}
        if kv_heads != heads:
            kwargs["enable_gqa"] = True  # torch >= 2.5; older versions raise TypeError, caught below
        try:
            with self._flash():
                if pass_ == "forward":
                    with torch.no_grad():
                        return self._time(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
                out = F.scaled_dot_product_attention(q, k, v, **kwargs)
                g = torch.randn_like(out)
                return self._time(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True))
        except (RuntimeError, TypeError) as e:
            log("attention %s b%d h%d/%d s%d d%d causal=%s skipped: %s"
                % (pass_, batch, heads, kv_heads, seq, head_dim, causal, str(e).splitlines()[0]))
            return None

    def elementwise(self, op, traffic_bytes):
        torch = self.torch
        if not self._fits(traffic_bytes):
            return None
        if op == "add":
            n = max(1, int(traffic_bytes // 6))  # two bf16 reads and one write per element
            a = torch.randn(n, dtype=torch.bfloat16, device=self.device)
            b = torch.randn(n, dtype=torch.bfloat16, device=self.device)
            c = torch.empty_like(a)
            return self._time(lambda: torch.add(a, b, out=c))
        if op == "layernorm":
            import torch.nn.functional as F

            hidden = 4096
            rows = max(1, int(traffic_bytes // (4 * hidden)))  # one bf16 read and one write per element
            x = torch.randn(rows, hidden, dtype=torch.bfloat16, device=self.device)
            return self._time(lambda: F.layer_norm(x, (hidden,)))
        raise ValueError(op)

    def copy(self, nbytes):
        torch = self.torch
        if not self._fits(2 * nbytes):
            return None
        src = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        return self._time(lambda: dst.copy_(src))

    def stream_wait(self, hops):
        """The same chain of `hops` one-element adds on one stream and alternating between two (each
        hop waiting for an event recorded after the previous one). A sleep kernel queued first keeps
        the GPU busy while the host enqueues the whole chain, so that the GPU, not the launches, sets
        its pace; the timing events sit after the sleep."""
        torch = self.torch
        x = torch.zeros(1, device=self.device)
        streams = (torch.cuda.current_stream(self.device), self.side)

        def chain(two):
            start, end = self._event(), self._event()
            torch.cuda._sleep(50_000_000)  # about 25-50 ms at 1-2 GHz: longer than enqueueing the chain
            start.record()
            for i in range(hops):
                s = streams[i % 2] if two else streams[0]
                if two and i > 0:
                    ev = torch.cuda.Event()
                    ev.record(streams[(i - 1) % 2])
                    s.wait_event(ev)
                with torch.cuda.stream(s):
                    x.add_(1.0)
            if two and hops % 2 == 0:
                streams[0].wait_stream(streams[1])
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        for _ in range(self.args.warmup):
            chain(False), chain(True)
        reps = max(3, self.args.repeats)
        return [chain(False) for _ in range(reps)], [chain(True) for _ in range(reps)]

    # -- contention -----------------------------------------------------------------------------------

    def can_sm_contention(self):
        # A collective restricted to N SMs needs a second GPU and per-communicator CTA limits
        # (ncclConfig_t minCTAs/maxCTAs, NCCL >= 2.17, exposed by torch as ProcessGroupNCCL.Options).
        if self.dist is None:
            return False
        try:
            self.dist.ProcessGroupNCCL.Options().config.max_ctas = 1
            return True
        except AttributeError:
            return False

    def _common_max(self, value):
        """The largest value over the ranks: every rank must issue the same collectives."""
        if self.dist is None:
            return value
        t = self.torch.tensor([float(value)], device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.item()

    def _alone_and_beside(self, gemm_fn, issue_aggressor, aggressor_one_s, inner, reps):
        """GEMM samples alone and while the aggressor runs on the side stream for 1.5x each sample's
        length, interleaved and paced alike. A GPU at its power limit clocks up whenever its SMs idle,
        so both kinds must idle the same: after each alone sample the host waits as long as the
        aggressor outlasts the GEMM in the beside one. Back-to-back alone samples against paced beside
        samples once measured a GEMM 12% faster beside a copy than alone (an H200 at 700 W)."""
        gemm_one = self._once(gemm_fn, inner)
        count = int(self._common_max(math.ceil(1.5 * gemm_one * inner / max(aggressor_one_s, 1e-7)) + 1))
        tail_s = max(0.0, count * aggressor_one_s - gemm_one * inner)
        alone, beside = [], []
        for _ in range(reps):
            alone.append(self._once(gemm_fn, inner))
            time.sleep(tail_s)
            with self.torch.cuda.stream(self.side):
                for _ in range(count):
                    issue_aggressor()
            beside.append(self._once(gemm_fn, inner))
            self.torch.cuda.synchronize()
        return alone, beside

    def contention(self, dtype, m, n, k, aggressor, comm_sms):
        torch = self.torch
        dt = self._dtype(dtype)
        a = torch.randn(m, k, dtype=dt, device=self.device)
        b = torch.randn(k, n, dtype=dt, device=self.device)
        c = torch.empty(m, n, dtype=dt, device=self.device)
        gemm_fn = lambda: torch.matmul(a, b, out=c)  # noqa: E731
        for _ in range(self.args.warmup):
            gemm_fn()
        torch.cuda.synchronize()
        inner, _ = self._plan_repeats(self._once(gemm_fn))
        inner = int(self._common_max(inner))
        reps = self.args.repeats

        if aggressor == "copy_engine":
            nbytes = 256 << 20
            # A peer copy to the next GPU when this process sees one (NVLink through the copy engines,
            # as CommFuse's P2P steps), else a pinned host-to-device copy (PCIe, copy engine as well).
            if torch.cuda.device_count() > 1:
                peer = torch.device("cuda", (self.device.index + 1) % torch.cuda.device_count())
                src = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
                dst = torch.empty(nbytes, dtype=torch.uint8, device=peer)
            else:
                src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                dst = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            issue = lambda: dst.copy_(src, non_blocking=True)  # noqa: E731
            with torch.cuda.stream(self.side):
                one = self._once(issue)
            return self._alone_and_beside(gemm_fn, issue, one, inner, reps)

        # sm_kernel: an all-gather on its own communicator limited to comm_sms CTAs (one CTA per SM).
        opts = self.dist.ProcessGroupNCCL.Options()
        opts.config.min_ctas = comm_sms
        opts.config.max_ctas = comm_sms
        group = self.dist.new_group(list(range(self.world)), backend="nccl", pg_options=opts)
        per_rank = (64 << 20) // 2
        inp = torch.empty(per_rank, dtype=torch.bfloat16, device=self.device)
        out = torch.empty(per_rank * self.world, dtype=torch.bfloat16, device=self.device)
        issue = lambda: self.dist.all_gather_into_tensor(out, inp, group=group)  # noqa: E731
        with torch.cuda.stream(self.side):
            issue()
            torch.cuda.synchronize()
            one = self._common_max(self._once(issue))
        alone, beside = self._alone_and_beside(gemm_fn, issue, one, inner, reps)
        self.dist.destroy_process_group(group)
        return alone, beside

    # -- collectives ----------------------------------------------------------------------------------

    def collective(self, op, nbytes):
        torch, dist = self.torch, self.dist
        w = self.world
        numel = max(w, (nbytes // 2) // w * w)  # bf16 elements, divisible by the ranks
        # Every rank must skip the same sizes, or the others would wait in the collective forever.
        if self._common_max(0 if self._fits(4 * numel * 2) else 1) > 0:
            return None
        dt = torch.bfloat16
        if op == "all_gather":
            inp = torch.empty(numel // w, dtype=dt, device=self.device)
            out = torch.empty(numel, dtype=dt, device=self.device)
            fn = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
        elif op == "reduce_scatter":
            inp = torch.empty(numel, dtype=dt, device=self.device)
            out = torch.empty(numel // w, dtype=dt, device=self.device)
            fn = lambda: dist.reduce_scatter_tensor(out, inp)  # noqa: E731
        elif op == "all_reduce":
            buf = torch.empty(numel, dtype=dt, device=self.device)
            fn = lambda: dist.all_reduce(buf)  # noqa: E731
        elif op == "all_to_all":
            inp = torch.empty(numel, dtype=dt, device=self.device)
            out = torch.empty(numel, dtype=dt, device=self.device)
            fn = lambda: dist.all_to_all_single(out, inp)  # noqa: E731
        elif op == "p2p":
            # As nccl-tests' sendrecv: each rank sends one message to the next and receives one from
            # the previous, all at once.
            send = torch.empty(numel, dtype=dt, device=self.device)
            recv = torch.empty(numel, dtype=dt, device=self.device)

            def fn():
                ops = [dist.P2POp(dist.isend, send, (self.rank + 1) % w), dist.P2POp(dist.irecv, recv, (self.rank - 1) % w)]
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
        else:
            raise ValueError(op)
        for _ in range(self.args.warmup):
            fn()
        torch.cuda.synchronize()
        inner, reps = self._plan_repeats(self._common_max(self._once(fn)))
        inner, reps = int(self._common_max(inner)), int(self._common_max(reps))
        samples = []
        for _ in range(reps):
            dist.barrier()
            # The collective ends when its slowest rank does.
            samples.append(self._common_max(self._once(fn, inner)))
        return samples

    def barrier(self):
        if self.dist is not None:
            self.dist.barrier()

    # -- provenance -----------------------------------------------------------------------------------

    def describe(self):
        torch = self.torch
        libraries = {"torch": torch.__version__}
        try:
            v = torch.cuda.nccl.version()
            libraries["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - a build without NCCL
            pass
        if torch.backends.cudnn.is_available():
            libraries["cudnn"] = str(torch.backends.cudnn.version())
        driver = "unknown"
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30, check=True).stdout.split("\n")[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
        machine = socket.gethostname()
        if self.world > 1:
            machine += " (%d ranks on %d node(s))" % (self.world, self.nodes)
        device = {"name": torch.cuda.get_device_name(self.device), "sm_count": self.props.multi_processor_count}
        if self.device_model:
            device["model"] = self.device_model
        return {
            "device": device,
            "provenance": {
                "kind": "measured",
                "machine": machine,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                "driver": driver or "unknown",
                "cuda": torch.version.cuda or "unknown",
                "libraries": libraries,
                "source": "tools/microbench/microbench.py on %s: CUDA-event timings, %d warm-up launches, %s"
                          % (machine, self.args.warmup, timing_description(self.args)),
                "timing": self.args.timing,
            },
        }

    def close(self):
        if self.dist is not None:
            self.dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------

SECTIONS = ["gemm", "attention", "elementwise", "copy", "contention", "stream_wait", "collectives"]


def timing_description(args):
    if args.timing == "burst":
        return ("raw samples of bursts of at most %d launches, each after %g s idle (--timing burst)"
                % (BURST_LAUNCHES, args.idle_s))
    return "raw samples of back-to-back launches for %g s per shape (--timing sustained)" % args.budget_s


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, help="calibration JSON to write")
    p.add_argument("--dry-run", action="store_true", help="no GPU, no torch: a synthetic device (kind \"synthetic\")")
    p.add_argument("--plan", help="shapes from `fusesim calibrate plan` (default: a built-in shape set)")
    p.add_argument("--fusesim", help="path of the fusesim binary: run `fusesim calibrate fit` on the result")
    p.add_argument("--peak-tflops", type=float, help="datasheet dense bf16/fp16 peak, passed to the fit")
    p.add_argument("--topology", help="the topology whose device this is: the profile's device.model, and the peak "
                                      "the fit takes; with --dry-run, the synthetic device stands for that model")
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma list of " + ", ".join(SECTIONS))
    p.add_argument("--dtypes", default="bf16,fp16", help="GEMM data types: bf16, fp16, fp8 (e4m3, per-tensor scales)")
    p.add_argument("--quick", action="store_true", help="a smaller default shape set (minutes, not tens)")
    p.add_argument("--repeats", type=int, default=20, help="raw samples per shape (at most)")
    p.add_argument("--warmup", type=int, default=5, help="launches before timing")
    p.add_argument("--budget-s", type=float, default=2.0, help="--timing sustained: seconds of samples per shape "
                                                                 "(at least 3 samples)")
    p.add_argument("--timing", choices=["burst", "sustained"], default="burst",
                   help="burst (default): each sample a short burst after --idle-s idle, the clock a kernel keeps "
                        "inside a training step; sustained: samples back to back for --budget-s per shape")
    p.add_argument("--idle-s", type=float, default=0.1, help="--timing burst: host sleep before each sample")
    p.add_argument("--burst-samples", type=int, default=5, help="--timing burst: samples per shape")
    p.add_argument("--contention-sms", default=",".join(str(s) for s in DEFAULT_CONTENTION_SMS),
                   help="SMs the communication kernel holds in the contention section")
    p.add_argument("--noise", type=float, default=0.0, help="--dry-run: relative noise of the synthetic samples")
    p.add_argument("--seed", type=int, default=1, help="--dry-run: seed of the noise")
    p.add_argument("--date", help="provenance date (default: today, UTC), e.g. for a reproducible dry run")
    args = p.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    for s in sections:
        if s not in SECTIONS:
            p.error("unknown section %r (one of %s)" % (s, ", ".join(SECTIONS)))
    args.section_list = sections
    args.dtype_list = [d for d in args.dtypes.split(",") if d]
    for d in args.dtype_list:
        if d not in ("bf16", "fp16", "fp8"):
            p.error("unknown dtype %r (bf16, fp16 or fp8)" % d)
    try:
        args.sms_list = [int(s) for s in args.contention_sms.split(",") if s]
    except ValueError:
        p.error("--contention-sms takes a comma list of integers")
    if any(s < 1 for s in args.sms_list):
        p.error("--contention-sms: SM counts are positive")
    if args.repeats < 1 or args.warmup < 0 or args.noise < 0 or args.budget_s <= 0:
        p.error("--repeats >= 1, --warmup >= 0, --noise >= 0 and --budget-s > 0")
    if args.burst_samples < 1 or not 0 <= args.idle_s <= 10:
        p.error("--burst-samples >= 1 and 0 <= --idle-s <= 10")
    if args.peak_tflops is not None and args.topology:
        p.error("give --peak-tflops or --topology, not both")
    return args


def measure(backend, args, doc):
    if args.plan:
        gemms, attns, memory = read_plan(args.plan)
    else:
        gemms, attns, memory = default_gemm_shapes(args.quick), default_attention_shapes(args.quick), []
    memory = sorted(set(memory) | set(default_memory_sizes(args.quick)))
    sections = args.section_list

    if "gemm" in sections:
        doc["gemm"] = []
        for dtype in args.dtype_list:
            for (m, n, k, batch) in gemms:
                t = backend.gemm(dtype, m, n, k, batch)
                if t:
                    doc["gemm"].append({"dtype": dtype, "m": m, "n": n, "k": k, "batch": batch, "time_s": t})
        log("gemm: %d samples" % len(doc["gemm"]))

    if "attention" in sections:
        doc["attention"] = []
        for (batch, heads, kv_heads, seq, head_dim, causal) in attns:
            for pass_ in ("forward", "backward"):
                t = backend.attention("bf16", pass_, batch, heads, kv_heads, seq, head_dim, causal)
                if t:
                    doc["attention"].append({"dtype": "bf16", "pass": pass_, "causal": causal, "batch": batch,
                                             "heads": heads, "kv_heads": kv_heads, "seq": seq,
                                             "head_dim": head_dim, "time_s": t})
        log("attention: %d samples" % len(doc["attention"]))

    if "elementwise" in sections:
        doc["elementwise"] = []
        for op in ("add", "layernorm"):
            for nbytes in memory:
                t = backend.elementwise(op, nbytes)
                if t:
                    doc["elementwise"].append({"op": op, "bytes": nbytes, "time_s": t})
        log("elementwise: %d samples" % len(doc["elementwise"]))

    if "copy" in sections:
        doc["copy"] = []
        for nbytes in memory:
            t = backend.copy(nbytes)
            if t:
                doc["copy"].append({"bytes": nbytes, "time_s": t})
        log("copy: %d samples" % len(doc["copy"]))

    if "contention" in sections:
        doc["contention"] = []
        # The largest GEMM of the plan (the one most likely to fill every SM), else 8192^3.
        m, n, k = max(((g[0], g[1], g[2]) for g in gemms), key=lambda s: s[0] * s[1] * s[2], default=(8192, 8192, 8192))
        cases = [("copy_engine", 0)]
        if backend.can_sm_contention():
            cases += [("sm_kernel", s) for s in args.sms_list]
        else:
            log("contention: one GPU (or no per-communicator CTA limits in this torch): the sm_kernel aggressor "
                "needs torchrun with 2 or more GPUs; measuring the copy engine only")
        for aggressor, sms in cases:
            alone, beside = backend.contention("bf16", m, n, k, aggressor, sms)
            sample = {"dtype": "bf16", "m": m, "n": n, "k": k, "aggressor": aggressor, "alone_s": alone, "beside_s": beside}
            if aggressor == "sm_kernel":
                sample["comm_sms"] = sms
            doc["contention"].append(sample)
        log("contention: %d samples" % len(doc["contention"]))

    if "stream_wait" in sections:
        one, two = backend.stream_wait(STREAM_WAIT_HOPS)
        doc["stream_wait"] = {"hops": STREAM_WAIT_HOPS, "one_stream_s": one, "two_streams_s": two}
        log("stream_wait: %d samples of %d hops" % (len(one), STREAM_WAIT_HOPS))

    if "collectives" in sections:
        if backend.world < 2:
            log("collectives: one rank; run under torchrun with 2 or more GPUs to measure them")
        else:
            doc["collectives"] = []
            for op in COLLECTIVE_OPS:
                for nbytes in collective_sizes(args.quick):
                    t = backend.collective(op, nbytes)
                    if t:
                        doc["collectives"].append({"op": op, "ranks": backend.world, "nodes": backend.nodes,
                                                   "bytes": nbytes, "time_s": t})
            log("collectives: %d samples" % len(doc["collectives"]))
    backend.barrier()


def write_json(path, doc):
    """The rule of fusesim's own writer (docs/cli.md, "Output files"): "-" is standard output; a
    device, FIFO or socket (/dev/null, a pipe) is written in place; a symbolic link is followed and
    stays a link; a missing path or a regular file is written whole to a temporary file beside it and
    renamed into place (removed again on any error); a directory or a missing folder is refused."""
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = os.path.realpath(path)  # follows every link, dangling ones included
    if os.path.isdir(target):
        raise SystemExit("microbench.py: --output %s: is a directory; name a file in it" % path)
    if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
        with open(target, "a") as f:  # /dev/null, a FIFO: in place, never replaced
            f.write(text)
        return
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        raise SystemExit("microbench.py: --output %s: the folder '%s' does not exist" % (path, folder))
    tmp = "%s.tmp.%d" % (target, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(target):
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        backend = SyntheticBackend(args)
    else:
        backend = TorchBackend(args)
    doc = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION}
    doc.update(backend.describe())
    if args.date:
        doc["provenance"]["date"] = args.date
    doc["provenance"]["tool"] = "tools/microbench/microbench.py " + " ".join(sys.argv[1:] if argv is None else argv)
    measure(backend, args, doc)
    rank = backend.rank
    backend.close()
    if rank != 0:
        return 0
    write_json(args.output, doc)
    log("wrote %s" % args.output)
    if args.fusesim:
        cmd = [args.fusesim, "calibrate", "fit", args.output, "-o", args.output]
        peak = args.peak_tflops
        if peak is None and args.dry_run and not args.topology:
            peak = SYNTHETIC["peak_flops_per_s"] / 1e12
        if peak is not None:
            cmd += ["--peak-tflops", repr(peak)]
        if args.topology:
            cmd += ["--topology", args.topology]
        log("running " + " ".join(cmd))
        return subprocess.run(cmd).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
