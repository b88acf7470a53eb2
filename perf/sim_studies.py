"""The source papers' experiments, replayed in SimGrid by hpccoll.sim (perf/simulation.md).

1. "RAT - Resilient Allreduce Tree for Distributed Machine Learning", oversubscription: 2
   spines, 4 leaves, hosts per leaf from 4 to 24 (2:1 to 12:1 at 40 Gbit/s everywhere), a
   97 MiB allreduce (ResNet-50's gradients): parameter server, ring, RAT.
2. The same paper, failures: 2 racks x 32 hosts at 40 Gbit/s without oversubscription, k
   nodes paused and re-drawn every period (seeds 0-2, mean): ring, RAT, parameter server.
3. "TASP: Topology-aware Sequence Parallelism": ring against multi-ring allgather of the K and
   V blocks at the sequence lengths of its Table 1, on an 8-GPU full mesh (MI300X-like; also
   the cost model's H100 preset), an 8-GPU switch (H100 NVSwitch-like) and 2 and 4 such
   nodes, plus the attention step pattern with the paper's measured compute-to-communication
   ratios.

Usage: python perf/sim_studies.py [rat-oversubscription|rat-failures|tasp ...] (all by
default; needs SimGrid: scripts/install-sim.sh).  Prints markdown.
"""

from __future__ import annotations

import statistics
import sys
import time

from hpccoll.sim.platform import build
from hpccoll.sim.replay import Pause
from hpccoll.tools.simulate import simulate

RESNET50 = 97 << 20
MIB = 1 << 20


def rat_oversubscription() -> str:
    out = ["| hosts/leaf | ranks | oversubscription | ring (ms) | RAT (ms) | PS (ms) | "
           "PS / RAT | ring / RAT |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for hosts in (4, 8, 12, 16, 20, 24):
        target = build(f"spineleaf:spines=2,leaves=4,hosts={hosts}")
        times = {r.algorithm: r.time_us / 1e3 for r in
                 simulate("allreduce", ["ring", "rat", "ps"], target, [RESNET50], "float32")}
        out.append(f"| {hosts} | {target.ranks} | {target.notes['oversubscription']} | "
                   f"{times['ring']:.1f} | {times['rat']:.1f} | {times['ps']:.1f} | "
                   f"{times['ps'] / times['rat']:.2f} | {times['ring'] / times['rat']:.2f} |")
    return "\n".join(out)


def rat_failures() -> str:
    target = build("spineleaf:spines=2,leaves=2,hosts=32,uplink=640Gb/s")
    out = ["| paused k | period | ring (ms) | RAT (ms) | PS (ms) | ring / no pause | "
           "RAT / no pause | PS / no pause | ring / RAT |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base: dict[str, float] = {}
    for k in (0, 1, 2, 4, 8):
        for period in ((1e-3,) if k == 0 else (1e-3, 10e-3)):
            runs = [simulate("allreduce", ["ring", "rat", "ps"], target, [RESNET50], "float32",
                             Pause(k, period, seed)) for seed in ((0,) if k == 0 else (0, 1, 2))]
            mean = {name: statistics.mean(r.time_us / 1e3 for run in runs for r in run
                                          if r.algorithm == name)
                    for name in ("ring", "rat", "ps")}
            base = base or mean
            out.append(f"| {k} | {period * 1e3:g} ms | {mean['ring']:.1f} | {mean['rat']:.1f} | "
                       f"{mean['ps']:.1f} | {mean['ring'] / base['ring']:.2f} | "
                       f"{mean['rat'] / base['rat']:.2f} | {mean['ps'] / base['ps']:.2f} | "
                       f"{mean['ring'] / mean['rat']:.2f} |")
    return "\n".join(out)


# Table 1 of the TASP paper (8 x MI300X): sequence length, CCR of the baseline, speedup
TASP_TABLE1 = [(10_000, 0.39, 2.4), (20_000, 0.65, 1.8), (40_000, 0.80, 1.5),
               (50_000, 0.98, 1.3), (100_000, 1.17, 1.1)]
HEADS, HEAD_DIM, BF16 = 12, 64, 2
TASP_PLATFORMS = [
    ("8 GPUs, full mesh 64 GB/s per link (MI300X-like; the cost model's h100 node)",
     "fullmesh:n=8,bw=64GB/s", False),
    ("8 GPUs, switch 450 GB/s per port (H100 NVSwitch-like)", "switch:n=8,bw=450GB/s", False),
    ("2 nodes x 8 (full mesh), NIC 50 GB/s per GPU", "cluster:nodes=2,ppn=8", False),
    ("2 nodes x 8 (full mesh), NIC 50 GB/s, flat cycles", "cluster:nodes=2,ppn=8", True),
    ("4 nodes x 8 (full mesh), NIC 50 GB/s per GPU", "cluster:nodes=4,ppn=8", False),
    ("4 nodes x 8 (full mesh), NIC 50 GB/s, flat cycles", "cluster:nodes=4,ppn=8", True),
    ("4 nodes x 8 (full mesh), NIC 6.25 GB/s per GPU", "cluster:nodes=4,ppn=8,nic=6.25GB/s",
     False),
]


def kv_block(length: int, ranks: int) -> int:
    """Bytes of one rank's K and V block (batch 1, 12 heads of 64, bf16)."""
    return 2 * (length // ranks) * HEADS * HEAD_DIM * BF16


def attention_speedup(ring_us: float, multi_us: float, ccr: float, p: int) -> float:
    """Ring Attention's time over TASP's with the communication of each step overlapped with
    the computation on the block that arrived before: (p-1) x max(step comm, step compute)
    + one step of compute, the compute per step CCR x ring's communication / p."""
    compute = ccr * ring_us / p
    ring = (p - 1) * max(ring_us / (p - 1), compute) + compute
    multi = (p - 1) * max(multi_us / (p - 1), compute) + compute
    return ring / multi


def tasp() -> str:
    out = ["| platform | S | KV block / rank | ring (us) | multiring (us) | comm speedup | "
           "model's comm speedup | attention speedup at the paper's CCR | paper |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, spec, flat in TASP_PLATFORMS:
        target = build(spec)
        p = target.ranks
        sizes = [kv_block(length * p // 8, p) for length, _, _ in TASP_TABLE1]
        results = simulate("allgather", ["ring", "multiring"], target, sizes, "float32",
                           flat=flat)
        for (length, ccr, paper), size in zip(TASP_TABLE1, sizes):
            row = {r.algorithm: r for r in results if r.bytes == size}
            ring, multi = row["ring"], row["multiring"]
            out.append(
                f"| {label} | {length * p // 8 // 1000}K | {size / MIB:.1f} MiB | "
                f"{ring.time_us:.0f} | {multi.time_us:.0f} | "
                f"{ring.time_us / multi.time_us:.2f} | {ring.model_us / multi.model_us:.2f} | "
                f"{attention_speedup(ring.time_us, multi.time_us, ccr, p):.2f} | "
                f"{paper if p == 8 else '-'} |")
    return "\n".join(out)


STUDIES = {"rat-oversubscription": rat_oversubscription, "rat-failures": rat_failures,
           "tasp": tasp}


def main(names: list[str]) -> None:
    for name in names or list(STUDIES):
        began = time.time()
        print(f"### {name}\n\n{STUDIES[name]()}\n\n({time.time() - began:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
