#!/usr/bin/env python3
"""Generate a large, realistic, deterministic log of a failed RL training job.

The log imitates what a verl / OpenRLHF / ROLL / slime job on Ray + vLLM + Megatron/FSDP prints
with ``NCCL_DEBUG=INFO``: Ray actor prefixes and de-duplication suffixes, torchrun ``[rankN]:``
prefixes, vLLM metrics, NCCL INFO, Megatron iteration lines, verl step metrics, tqdm bars with
carriage returns, Python warnings, config dumps, long JSON lines and harmless near-miss lines
that mention "timeout", "error", "nan" or "memory". With ``--failures end`` a failure cascade
(hardware fault -> NCCL watchdog timeouts -> Ray ActorDiedError) and, in a second job section,
a CUDA OOM traceback are buried in the last ~1% of the file.

Speed: a pool of step blocks (each ~one training step / one minute of log) is rendered once with
placeholders for the date, time, step and iteration numbers; the body is written by picking
blocks with a seeded RNG and filling the placeholders with ``bytes.replace`` (C speed), in
multi-MB batches. Output is byte-identical for the same ``--size``/``--seed``/options, and exactly
``--size`` bytes long (uncompressed, also with ``--gzip``).

Usage::

    python bench/gen_log.py OUT --size 1G [--seed 0] [--gzip] [--failures end|none]

Writes ``OUT`` and ``OUT.manifest.json`` (the planted failures with 1-based line numbers) and
prints the manifest to stdout; speed goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

GEN_VERSION = 1

# --- placeholders (never produced by the content itself) ------------------------------------
M_DATE = "\x01"  # 2025-05-01
M_MD = "\x02"  # 05-01 (vLLM)
M_HM = "\x03"  # 14:03 (seconds are baked into the block)
M_STEP = "\x04"  # 123
M_ITER = "\x05"  # "     123" (Megatron, width 8)
M_SAMPLES = "\x06"  # "       31488" (Megatron consumed samples, width 12)
M_MDC = "\x07"  # 0501 (glog-style [W0501 ...])
M_TOTAL = "\x08"  # total steps (baked once the pool is measured)
M_TOTAL8 = "\x0e"  # total iterations, width 8 (baked likewise)
M_PROGRESS = "\x0f"  # the per-block tqdm "Training Progress" update
PER_BLOCK_MARKERS = (M_DATE, M_MD, M_HM, M_STEP, M_ITER, M_SAMPLES, M_MDC, M_PROGRESS)

START = dt.datetime(2025, 5, 1, 10, 0, 0)
GLOBAL_BATCH = 256
MIN_SIZE = 256 * 1024
TAIL_FRACTION = 0.01


def parse_size(text: str) -> int:
    """``1G``/``512M``/``64K`` are binary (GiB...), ``1GB``/``100MB`` decimal, else bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]?)(i?b?)\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 100M, 1G, 1.5GB, 123456)")
    num, unit, suffix = float(m.group(1)), m.group(2).lower(), m.group(3).lower()
    power = "kmgt".index(unit) + 1 if unit else 0
    base = 1000 if suffix == "b" and unit else 1024
    return int(num * base**power)


# --- the simulated cluster -------------------------------------------------------------------
BUS_IDS = ("18", "2a", "3a", "3b", "9a", "ab", "ba", "db")


@dataclass(frozen=True)
class Actor:
    cls: str
    pid: int
    ip: str
    host: str
    rank: int
    local_rank: int

    @property
    def prefix(self) -> str:
        return f"({self.cls} pid={self.pid}, ip={self.ip}) "

    @property
    def rprefix(self) -> str:
        """Ray prefix plus the torchrun-style rank prefix."""
        return f"{self.prefix}[rank{self.rank}]:"

    @property
    def nccl(self) -> str:
        return f"{self.prefix}{self.host}:{self.pid}:{self.pid} [{self.local_rank}] NCCL INFO "


NODES = (("10.0.3.17", "node-3", 81234), ("10.0.3.18", "node-4", 52310))
WORKERS = tuple(
    Actor("WorkerDict", pid0 + lr, ip, host, n * 8 + lr, lr)
    for n, (ip, host, pid0) in enumerate(NODES)
    for lr in range(8)
)
NRANKS = len(WORKERS)
LAST_RANK = WORKERS[-1].prefix  # Megatron logs from the last rank
DRIVER = "(TaskRunner pid=40211) "
JOB_IDS = ("raysubmit_4fYtVq8sLm2KcR1a", "raysubmit_9xWbT3nZpD6hJe7u")
# Section 2 of the file is another job on other nodes: rewrite addresses and pids cheaply.
JOB2_REWRITES = (
    (b"ip=10.0.3.", b"ip=10.0.5."),
    (b"pid=81", b"pid=93"),
    (b"pid=52", b"pid=64"),
    (b"pid=40211", b"pid=47702"),
    (b"node-3:81", b"node-7:93"),
    (b"node-4:52", b"node-8:64"),
    (JOB_IDS[0].encode(), JOB_IDS[1].encode()),
)

_PROSE = (
    "the number of apples each student has is equal to twice the remaining value so we "
    "compute total sum first then subtract cost per item let x be unknown solve equation "
    "both sides divide by three answer therefore final result check step carefully train "
    "arrives after hours distance speed time rectangle area perimeter width length triangle "
    "angle degrees probability marbles bag red blue green prime factor integer remainder "
    "modulo sequence term ratio percent discount price profit interest rate year month day "
    "Janet ducks eggs market dollars Weng babysitting minutes Betty wallet Julie pages book"
)
WORDS = tuple(_PROSE.split())
PY = "/usr/local/lib/python3.10/dist-packages"

WARNINGS = (
    (
        f"{PY}/torch/utils/checkpoint.py:295",
        "FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated. Please use "
        "`torch.amp.autocast('cpu', args...)` instead.",
    ),
    (
        f"{PY}/torch/distributed/fsdp/fully_sharded_data_parallel.py:690",
        "FutureWarning: FSDP.state_dict_type() and FSDP.set_state_dict_type() are being "
        "deprecated. Please use APIs, get_state_dict() and set_state_dict(), which can support "
        "different parallelisms, FSDP1, FSDP2, DDP. API doc: https://pytorch.org/docs/stable/"
        "distributed.checkpoint.html#torch.distributed.checkpoint.state_dict.get_state_dict .",
    ),
    (
        f"{PY}/transformers/generation/configuration_utils.py:628",
        "UserWarning: `do_sample` is set to `False`. However, `temperature` is set to `0.6` -- "
        "this flag is only used in sample-based generation modes. You should set "
        "`do_sample=True` or unset `temperature`.",
    ),
    (
        "/opt/verl/verl/utils/torch_functional.py:312",
        "UserWarning: To copy construct from a tensor, it is recommended to use "
        "sourceTensor.clone().detach() or sourceTensor.clone().detach().requires_grad_(True), "
        "rather than torch.tensor(sourceTensor).",
    ),
    (
        f"{PY}/torch/utils/checkpoint.py:91",
        "UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
    ),
    (
        f"{PY}/megatron/core/tensor_parallel/layers.py:614",
        "UserWarning: async_grad_allreduce is deprecated, not in use anymore and will be fully "
        "removed with 0.10.0. Please use allreduce_dgrad instead.",
    ),
    (
        "/opt/verl/verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:188",
        "UserWarning: The given NumPy array is not writable, and PyTorch does not support "
        "non-writable tensors. This means writing to this tensor will result in undefined "
        "behavior. You may want to copy the array to protect its data or make it writable "
        "before converting it to a tensor.",
    ),
    (
        f"{PY}/transformers/tokenization_utils_base.py:4123",
        "UserWarning: Token indices sequence length is longer than the specified maximum "
        "sequence length for this model (5123 > 4096). Running this sequence through the "
        "model will result in indexing errors",
    ),
)
DEDUP_HINT = (
    " (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or "
    "see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
    "#log-deduplication for more options.)"
)


# --- rendering one block ---------------------------------------------------------------------
@dataclass
class BlockWriter:
    """Accumulates the lines of one block, handing out increasing in-minute timestamps."""

    rng: random.Random
    lines: list[str] = field(default_factory=list)
    sec: float = 0.0

    def tick(self) -> int:
        self.sec = min(59.0, self.sec + self.rng.random() * 0.35)
        return int(self.sec)

    def hms(self) -> str:
        return f"{M_HM}:{self.tick():02d}"

    def py_ts(self) -> str:  # Python logging / Ray: 2025-05-01 14:03:07,123
        return f"{M_DATE} {self.hms()},{self.rng.randrange(1000):03d}"

    def glog(self, level: str = "W") -> str:  # [W0501 14:03:07.123456 file.cpp:12]
        return f"{level}{M_MDC} {self.hms()}.{self.rng.randrange(1_000_000):06d}"

    def vllm(self, src: str) -> str:
        if self.rng.random() < 0.5:
            return f"INFO {M_MD} {self.hms()} {src}] "
        return f"INFO {M_MD} {self.hms()} [{src}] "

    def add(self, line: str) -> None:
        self.lines.append(line)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tqdm_bar(frac: float, width: int = 10) -> str:
    full, part = divmod(int(frac * width * 8), 8)
    bar = "█" * full + (" ▏▎▍▌▋▊▉"[part] if full < width else "")
    return bar.ljust(width)


def fmt_dur(s: float) -> str:
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def tqdm_line(rng: random.Random, desc: str, total: int, unit: str, extra: bool) -> str:
    """One physical line holding a whole tqdm run: updates separated by carriage returns."""
    rate = rng.uniform(5, 80)
    parts = []
    n = 0
    while True:
        el = n / rate
        remaining = (total - n) / rate
        tail = ""
        if extra:
            tail = (
                f", est. speed input: {rng.uniform(500, 9000):.2f} toks/s, "
                f"output: {rng.uniform(800, 15000):.2f} toks/s"
            )
        parts.append(
            f"{desc}: {100 * n / total:3.0f}%|{tqdm_bar(n / total)}| {n}/{total} "
            f"[{fmt_dur(el)}<{fmt_dur(remaining)}, {rate:.2f}{unit}{tail}]"
        )
        if n >= total:
            break
        n = min(total, n + rng.randint(max(1, total // 40), max(2, total // 6)))
    return "\r" + "\r".join(parts)


def step_metrics(rng: random.Random) -> str:
    """verl's per-step metrics line (a long single line)."""
    resp = rng.uniform(300, 2500)
    tg = rng.uniform(30, 90)
    tu = rng.uniform(20, 60)
    score = rng.uniform(0.1, 0.8)
    seq = rng.randint(400_000, 900_000)
    m = [
        f"step:{M_STEP}",
        f"global_seqlen/min:{seq - rng.randint(1000, 60000)}",
        f"global_seqlen/max:{seq + rng.randint(1000, 60000)}",
        f"global_seqlen/minmax_diff:{rng.randint(2000, 120000)}",
        f"global_seqlen/balanced_min:{seq - rng.randint(0, 50)}",
        f"global_seqlen/balanced_max:{seq + rng.randint(0, 50)}",
        f"global_seqlen/mean:{seq + rng.random():.3f}",
        f"actor/entropy:{rng.uniform(0.2, 1.2):.4f}",
        f"actor/kl_loss:{rng.uniform(0, 0.01):.6f}",
        "actor/kl_coef:0.001",
        f"actor/pg_loss:{rng.uniform(-0.05, 0.05):.6f}",
        f"actor/pg_clipfrac:{rng.uniform(0, 0.01):.6f}",
        f"actor/ppo_kl:{rng.uniform(-1e-4, 1e-3):.8f}",
        "actor/pg_clipfrac_lower:0.0",
        f"actor/grad_norm:{rng.uniform(0.05, 1.5):.4f}",
        f"perf/mfu/actor:{rng.uniform(0.1, 0.45):.4f}",
        f"perf/max_memory_allocated_gb:{rng.uniform(40, 75):.2f}",
        f"perf/max_memory_reserved_gb:{rng.uniform(60, 78):.2f}",
        f"perf/cpu_memory_used_gb:{rng.uniform(80, 400):.2f}",
        "actor/lr:1e-06",
        f"training/global_step:{M_STEP}",
        "training/epoch:0",
        f"critic/score/mean:{score:.4f}",
        "critic/score/max:1.0",
        "critic/score/min:0.0",
        f"critic/rewards/mean:{score:.4f}",
        "critic/rewards/max:1.0",
        "critic/rewards/min:0.0",
        f"critic/advantages/mean:{rng.uniform(-0.01, 0.01):.6f}",
        f"critic/advantages/max:{rng.uniform(1, 3):.4f}",
        f"critic/advantages/min:{-rng.uniform(1, 3):.4f}",
        f"critic/returns/mean:{rng.uniform(-0.01, 0.01):.6f}",
        f"response_length/mean:{resp:.3f}",
        "response_length/max:4096.0",
        f"response_length/min:{rng.randint(5, 80)}.0",
        f"response_length/clip_ratio:{rng.uniform(0, 0.05):.6f}",
        f"prompt_length/mean:{rng.uniform(80, 300):.3f}",
        "prompt_length/max:1024.0",
        f"prompt_length/min:{rng.randint(20, 60)}.0",
        "prompt_length/clip_ratio:0.0",
        f"timing_s/gen:{tg:.4f}",
        f"timing_s/reward:{rng.uniform(0.5, 3):.4f}",
        f"timing_s/old_log_prob:{rng.uniform(5, 15):.4f}",
        f"timing_s/ref:{rng.uniform(5, 15):.4f}",
        f"timing_s/adv:{rng.uniform(0.05, 0.3):.4f}",
        f"timing_s/update_actor:{tu:.4f}",
        f"timing_s/step:{tg + tu + 20:.4f}",
        f"timing_per_token_ms/gen:{rng.uniform(0.005, 0.03):.6f}",
        f"timing_per_token_ms/update_actor:{rng.uniform(0.005, 0.03):.6f}",
        f"perf/total_num_tokens:{seq * 16}",
        f"perf/time_per_step:{tg + tu + 20:.4f}",
        f"perf/throughput:{rng.uniform(800, 3000):.4f}",
        "val-core/openai/gsm8k/reward/mean@1:" + f"{rng.uniform(0.5, 0.9):.4f}",
        "validation/error_rate:0.0",
    ]
    return DRIVER + " - ".join(m)


def megatron_iteration(b: BlockWriter) -> str:
    rng = b.rng
    return (
        f"{LAST_RANK} [{M_DATE} {b.hms()}] iteration {M_ITER}/{M_TOTAL8} | "
        f"consumed samples: {M_SAMPLES} | "
        f"elapsed time per iteration (ms): {rng.uniform(600, 1500):.1f} | "
        f"throughput per GPU (TFLOP/s/GPU): {rng.uniform(90, 300):.1f} | "
        f"learning rate: 1.000000E-06 | global batch size: {GLOBAL_BATCH:5d} | "
        f"lm loss: {rng.uniform(0.5, 2.5):.6E} | loss scale: 1.0 | "
        f"grad norm: {rng.uniform(0.1, 2):.3f} | num zeros: {rng.randint(0, 9_999_999):.1f} | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


MEGATRON_TIMERS = (
    "forward-backward",
    "forward-compute",
    "backward-compute",
    "batch-generator",
    "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce",
    "all-grads-sync",
    "params-all-gather",
    "optimizer-copy-to-main-grad",
    "optimizer-clip-main-grad",
    "optimizer-count-zeros",
    "optimizer-inner-step",
    "optimizer-copy-main-to-model-params",
    "optimizer",
)


def megatron_timers(b: BlockWriter) -> None:
    b.add(f"{LAST_RANK}(min, max) time across ranks (ms):")
    for name in MEGATRON_TIMERS:
        lo = b.rng.uniform(0.01, 800)
        hi = lo * b.rng.uniform(1, 1.1)
        b.add(f"{LAST_RANK}    {name} {'.' * (48 - len(name))}: ({lo:.2f}, {hi:.2f})")


def vllm_metrics(b: BlockWriter, a: Actor) -> str:
    rng = b.rng
    run = rng.randint(0, 256)
    if rng.random() < 0.5:
        return (
            f"{a.prefix}{b.vllm('metrics.py:341')}Avg prompt throughput: "
            f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
            f"{rng.uniform(100, 20000):.1f} tokens/s, Running: {run} reqs, Swapped: 0 reqs, "
            f"Pending: {rng.randint(0, 40)} reqs, GPU KV cache usage: {rng.uniform(0, 95):.1f}%, "
            "CPU KV cache usage: 0.0%."
        )
    return (
        f"{a.prefix}{b.vllm('loggers.py:116')}Engine 000: Avg prompt throughput: "
        f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
        f"{rng.uniform(100, 20000):.1f} tokens/s, Running: {run} reqs, Waiting: 0 reqs, "
        f"GPU KV cache usage: {rng.uniform(0, 95):.1f}%, Prefix cache hit rate: "
        f"{rng.uniform(0, 60):.1f}%"
    )


def nccl_burst(b: BlockWriter, actors: list[Actor], nranks: int, tag: str) -> None:
    """What NCCL_DEBUG=INFO prints when a communicator is created."""
    rng = b.rng
    comm_id = f"0x{rng.getrandbits(64):016x}"
    ring = "".join(f"{r:4d}" for r in range(nranks))
    for a in actors:
        comm = f"0x{rng.getrandbits(40):x}"
        bus = BUS_IDS[a.local_rank]
        r = a.rank % nranks
        p = a.nccl
        b.add(f"{p}Using network IB")
        b.add(
            f"{p}ncclCommInitRank comm {comm} rank {r} nranks {nranks} cudaDev {a.local_rank} "
            f"nvmlDev {a.local_rank} busId {bus}000 commId {comm_id} - Init START"
        )
        b.add(f"{p}Setting affinity for GPU {a.local_rank} to ffffffff,00000000,ffffffff")
        b.add(f"{p}NVLS multicast support is not available on dev {a.local_rank}")
        b.add(
            f"{p}comm {comm} rank {r} nRanks {nranks} nNodes 2 localRanks 8 localRank {a.local_rank} MNNVL 0"
        )
        b.add(
            f"{p}Trees [0] {(r + 1) % nranks}/-1/-1->{r}->{(r - 1) % nranks} "
            f"[1] {(r + 1) % nranks}/-1/-1->{r}->{(r - 1) % nranks}"
        )
        b.add(f"{p}P2P Chunksize set to 131072")
        for ch in range(rng.choice((2, 4, 8))):
            b.add(f"{p}Channel {ch:02d}/32 :{ring}")
        for ch in range(rng.choice((2, 4))):
            b.add(
                f"{p}Channel {ch:02d}/0 : {r}[{a.local_rank}] -> {(r + 1) % nranks}"
                f"[{(a.local_rank + 1) % 8}] via P2P/CUMEM/read"
            )
        b.add(f"{p}Connected all rings")
        b.add(f"{p}Connected all trees")
        b.add(f"{p}NCCL_IB_TIMEOUT set by environment to 22.")
        b.add(f"{p}threadThresholds 8/8/64 | 128/8/64 | 512 | 512")
        b.add(
            f"{p}24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, "
            f"32 p2p channels per peer"
        )
        b.add(
            f"{p}TUNER/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared "
            f"object file: No such file or directory : when loading libnccl-tuner.so"
        )
        b.add(
            f"{p}ncclCommInitRank comm {comm} rank {r} nranks {nranks} cudaDev "
            f"{a.local_rank} nvmlDev {a.local_rank} busId {bus}000 commId {comm_id} - "
            f"Init COMPLETE"
        )
        b.add(
            f"{p}Init timings - ncclCommInitRank: rank {r} nranks {nranks} total "
            f"{rng.uniform(0.2, 2):.2f} (kernels 0.12, alloc 0.05, bootstrap "
            f"{rng.uniform(0.05, 1):.2f}, allgathers 0.01, topo 0.08, graphs 0.01, "
            f"connections 0.03, rest 0.01) [{tag}]"
        )


def warning(b: BlockWriter, a: Actor, first: bool) -> None:
    path, msg = b.rng.choice(WARNINGS)
    b.add(f"{a.prefix}{path}: {msg}")
    rep = b.rng.randint(2, 15)
    suffix = f" [repeated {rep}x across cluster]" + (DEDUP_HINT if first else "")
    b.add(f"{a.prefix}  warnings.warn({suffix}")


def near_misses(b: BlockWriter) -> None:
    rng = b.rng
    a = rng.choice(WORKERS)
    choice = rng.randrange(9)
    if choice == 0:
        b.add(
            f"{DRIVER}validation: error_rate: 0.0, timeout_count: 0, "
            f"reward/format_error: {rng.uniform(0, 0.02):.4f}"
        )
    elif choice == 1:
        b.add(
            f"{a.rprefix} loss: {rng.uniform(0.1, 1):.4f} (nan-safe), grad_norm: {rng.uniform(0.1, 1.5):.3f}"
        )
    elif choice == 2:
        used = rng.uniform(40, 78)
        b.add(
            f"{a.prefix}After update_actor, memory allocated (GB): {rng.uniform(5, 40):.2f}, "
            f"memory reserved (GB): {used - 2:.2f}, device memory used/total (GB): "
            f"{used:.2f}/79.25"
        )
    elif choice == 3:
        b.add(
            f"{a.rprefix} memory allocated: {rng.uniform(5, 60):.1f} GiB, max memory "
            f"allocated: {rng.uniform(60, 70):.1f} GiB, cuda OOM retries: 0"
        )
    elif choice == 4:
        b.add(
            f"[Rank {a.rank}] (after {M_STEP} iterations) memory (MB) | allocated: "
            f"{rng.uniform(10000, 40000):.2f} | max allocated: {rng.uniform(40000, 70000):.2f}"
            f" | reserved: {rng.uniform(70000, 78000):.2f} | max reserved: 78848.00"
        )
    elif choice == 5:
        b.add(f"{a.rprefix} numerics check: grad_norm is finite, nan_count=0, inf_count=0")
    elif choice == 6:
        b.add(
            f"{DRIVER}Using NCCL_TIMEOUT=1800 and TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=600 for weight sync group"
        )
    elif choice == 7:
        b.add(
            f"{DRIVER}reward worker: 0 samples timed out (timeout_s=30), 0 errors, "
            f"{rng.randint(0, 9)} empty answers"
        )
    else:
        b.add(
            f"{a.prefix}{b.vllm('executor_base.py:213')}It took {rng.uniform(1, 9):.6f} "
            f"seconds to fall asleep. Sleep mode freed {rng.uniform(55, 70):.2f} GiB memory, "
            f"{rng.uniform(1, 4):.2f} GiB memory is still in use."
        )


def sample_dump(b: BlockWriter) -> None:
    """verl's printed rollout sample: multi-line prompt and response."""
    rng = b.rng
    b.add(f"{DRIVER}[prompt] <|im_start|>system")
    b.add("You are a helpful assistant.<|im_end|>")
    b.add("<|im_start|>user")
    for _ in range(rng.randint(1, 3)):
        b.add(prose(rng, rng.randint(10, 40)))
    b.add('Let\'s think step by step and output the final answer after "####".<|im_end|>')
    b.add("<|im_start|>assistant")
    b.add(f"{DRIVER}[response] " + prose(rng, rng.randint(20, 60)))
    for _ in range(rng.randint(1, 6)):
        b.add(prose(rng, rng.randint(5, 50)))
    ans = rng.randint(1, 999)
    b.add(f"#### {ans}<|im_end|>")
    b.add(f"{DRIVER}[ground_truth] {ans if rng.random() < 0.6 else ans + 1}")
    b.add(f"{DRIVER}[score] {1.0 if rng.random() < 0.6 else 0.0}")


def long_json(b: BlockWriter) -> None:
    rng = b.rng
    samples = [
        {
            "input": prose(rng, rng.randint(20, 60)),
            "output": prose(rng, rng.randint(60, 250)),
            "gts": str(rng.randint(1, 999)),
            "score": rng.choice((0.0, 1.0)),
            "step": "@STEP@",
        }
        for _ in range(rng.randint(2, 6))
    ]
    payload = {"step": "@STEP@", "tag": "val/generations", "samples": samples}
    text = json.dumps(payload).replace('"@STEP@"', M_STEP)
    b.add(f"{DRIVER}{text}")


def raylet_line(b: BlockWriter) -> None:
    rng = b.rng
    c = rng.randrange(4)
    if c == 0:
        b.add(
            f"(raylet) Spilled {rng.randint(1000, 90000)} MiB, {rng.randint(10, 900)} objects, "
            f"write throughput {rng.randint(200, 2000)} MiB/s. Set RAY_verbose_spill_logs=0 to "
            "disable this message."
        )
    elif c == 1:
        b.add(
            f"(autoscaler +{rng.randint(1, 59)}m{rng.randint(0, 59)}s) Tip: use `ray status` "
            "to view detailed cluster status. To disable these messages, set "
            "RAY_SCHEDULER_EVENTS=0."
        )
    elif c == 2:
        b.add(
            f"(raylet, ip=10.0.3.18) [{b.py_ts()} I 2189 2189] (raylet) "
            f"worker_pool.cc:{rng.randint(400, 900)}: Started worker process with pid "
            f"{rng.randint(90000, 99999)}, the token is {rng.randint(1, 99)}"
        )
    else:
        b.add(
            f"{b.py_ts()}\tINFO worker.py:2004 -- Task / actor status: "
            f"{rng.randint(0, 40)} pending, {rng.randint(16, 40)} running"
        )


def make_step_block(rng: random.Random) -> str:
    """One training step (about one minute of log)."""
    b = BlockWriter(rng)
    b.add(f"{DRIVER}{M_PROGRESS}")
    # --- rollout
    engines = rng.sample(WORKERS, rng.randint(2, 8))
    for _ in range(rng.randint(2, 5)):
        for a in engines:
            b.add(vllm_metrics(b, a))
    if rng.random() < 0.5:
        a = rng.choice(engines)
        b.add(a.prefix + tqdm_line(rng, "Adding requests", rng.choice((256, 512)), "it/s", False))
    if rng.random() < 0.6:
        a = rng.choice(engines)
        b.add(a.prefix + tqdm_line(rng, "Processed prompts", rng.choice((256, 512, 1024)), "it/s", True))
    for _ in range(rng.randint(0, 3)):
        warning(b, rng.choice(WORKERS), first=False)
    # --- reward / samples
    if rng.random() < 0.35:
        sample_dump(b)
    if rng.random() < 0.15:
        long_json(b)
    # --- training
    for _ in range(rng.randint(0, 2)):
        a = rng.choice(WORKERS)
        b.add(
            f"{a.rprefix}[{b.glog()} ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank "
            f"{a.rank}] using GPU {a.local_rank} to perform barrier as devices used by this "
            "process are currently unknown. This can potentially cause a hang if this rank to "
            "GPU mapping is incorrect."
        )
    b.add(megatron_iteration(b))
    megatron_timers(b)
    for _ in range(rng.randint(1, 4)):
        near_misses(b)
    if rng.random() < 0.12:
        nccl_burst(b, rng.sample(WORKERS, rng.randint(2, 6)), NRANKS, "weight_sync")
    for _ in range(rng.randint(0, 3)):
        raylet_line(b)
    if rng.random() < 0.5:
        b.add(
            f"{b.py_ts()} - verl.utils.checkpoint - INFO - step {M_STEP}: actor update done "
            f"in {rng.uniform(10, 60):.2f}s, ppo_micro_batch_size_per_gpu=4"
        )
    b.add(step_metrics(rng))
    return b.text()


def hang_minute(rng: random.Random) -> str:
    b = BlockWriter(rng)
    for _ in range(rng.randint(1, 4)):
        raylet_line(b)
    return b.text()


def make_short_lines(rng: random.Random, n: int) -> list[str]:
    """Single lines (with placeholders) used to fill the last bytes exactly."""
    out: list[str] = []
    while len(out) < n:
        b = BlockWriter(rng)
        a = rng.choice(WORKERS)
        c = rng.randrange(3)
        if c == 0:
            b.add(vllm_metrics(b, a))
        elif c == 1:
            raylet_line(b)
        else:
            near_misses(b)
        out.extend(line + "\n" for line in b.lines)
    return [s for s in out if len(s.encode()) <= 400][:n]


def header(rng: random.Random, job: int) -> str:
    """Start-up: Ray connect, env and config dumps, Megatron args, NCCL init, vLLM init."""
    b = BlockWriter(rng)
    b.add(f"==> /tmp/ray/session_latest/logs/job-driver-{JOB_IDS[job]}.log <==")
    b.add(
        f"{b.py_ts()}\tINFO worker.py:1654 -- Connecting to existing Ray cluster at "
        "address: 10.0.3.17:6379..."
    )
    b.add(
        f"{b.py_ts()}\tINFO worker.py:1832 -- Connected to Ray cluster. View the dashboard at "
        "http://10.0.3.17:8265 "
    )
    b.add(f"{b.py_ts()}\tINFO packaging.py:574 -- Creating a file package for local module '/opt/verl'.")
    env = {
        "TOKENIZERS_PARALLELISM": "true",
        "NCCL_DEBUG": "INFO",
        "VLLM_LOGGING_LEVEL": "INFO",
        "NCCL_TIMEOUT": "1800",
        "NCCL_IB_TIMEOUT": "22",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600",
        "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
        "RAY_DEDUP_LOGS": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    }
    for k, v in env.items():
        b.add(f"+ export {k}={v}")
    b.add(f"{DRIVER}runtime_env: {{'env_vars': {env!r}}}")
    b.add(f"{DRIVER}TaskRunner hostname: node-3, PID: 40211")
    cfg: dict[str, Any] = {
        "actor_rollout_ref": {
            "actor": {
                "strategy": "megatron",
                "ppo_mini_batch_size": 64,
                "ppo_micro_batch_size_per_gpu": 4,
                "use_dynamic_bsz": True,
                "ppo_max_token_len_per_gpu": 16384,
                "grad_clip": 1.0,
                "clip_ratio": 0.2,
                "entropy_coeff": 0,
                "use_kl_loss": True,
                "kl_loss_coef": 0.001,
                "kl_loss_type": "low_var_kl",
                "ppo_epochs": 1,
                "shuffle": False,
                "optim": {
                    "lr": 1e-06,
                    "lr_warmup_steps_ratio": 0.0,
                    "weight_decay": 0.01,
                    "clip_grad": 1.0,
                },
                "megatron": {
                    "tensor_model_parallel_size": 4,
                    "pipeline_model_parallel_size": 2,
                    "context_parallel_size": 1,
                    "param_offload": False,
                    "grad_offload": False,
                    "optimizer_offload": False,
                },
                "checkpoint": {"contents": ["model", "optimizer", "extra"]},
            },
            "rollout": {
                "name": "vllm",
                "mode": "sync",
                "temperature": 1.0,
                "top_p": 1,
                "top_k": -1,
                "prompt_length": 1024,
                "response_length": 4096,
                "dtype": "bfloat16",
                "gpu_memory_utilization": 0.6,
                "ignore_eos": False,
                "enforce_eager": True,
                "free_cache_engine": True,
                "load_format": "dummy_megatron",
                "tensor_model_parallel_size": 2,
                "max_num_batched_tokens": 8192,
                "max_num_seqs": 1024,
                "n": 5,
                "enable_chunked_prefill": True,
            },
            "model": {
                "path": "/mnt/models/Qwen2.5-7B-Instruct",
                "enable_gradient_checkpointing": True,
                "use_remove_padding": True,
            },
        },
        "algorithm": {
            "adv_estimator": "grpo",
            "gamma": 1.0,
            "lam": 1.0,
            "use_kl_in_reward": False,
            "kl_ctrl": {"type": "fixed", "kl_coef": 0.001},
        },
        "data": {
            "train_files": "/mnt/data/gsm8k/train.parquet",
            "train_batch_size": 1024,
            "max_prompt_length": 1024,
            "max_response_length": 4096,
            "filter_overlong_prompts": True,
            "truncation": "error",
        },
        "trainer": {
            "project_name": "verl_grpo_example_gsm8k",
            "experiment_name": "qwen2_7b",
            "nnodes": 2,
            "n_gpus_per_node": 8,
            "save_freq": 20,
            "test_freq": 5,
            "total_epochs": 15,
            "logger": ["console", "wandb"],
            "ray_wait_register_center_timeout": 300,
            "critic_warmup": 0,
        },
    }
    for line in json.dumps(cfg, indent=1).replace('"', "'").splitlines():
        b.add(f"{DRIVER}{line}")
    # Megatron argument dump (slime prints the same format).
    b.add(f"{DRIVER}------------------------ arguments ------------------------")
    args = {
        "accumulate_allreduce_grads_in_fp32": "True",
        "adam_beta1": "0.9",
        "adam_beta2": "0.98",
        "attention_dropout": "0.0",
        "bf16": "True",
        "clip_grad": "1.0",
        "context_parallel_size": "1",
        "distributed_backend": "nccl",
        "distributed_timeout_minutes": "10",
        "global_batch_size": str(GLOBAL_BATCH),
        "hidden_size": "3584",
        "log_interval": "1",
        "lr": "1e-06",
        "max_position_embeddings": "32768",
        "max_tokens_per_gpu": "9216",
        "micro_batch_size": "1",
        "num_attention_heads": "28",
        "num_layers": "28",
        "pipeline_model_parallel_size": "2",
        "recompute_granularity": "full",
        "seq_length": "5120",
        "sequence_parallel": "True",
        "tensor_model_parallel_size": "4",
        "use_distributed_optimizer": "True",
        "world_size": str(NRANKS),
    }
    for k, v in args.items():
        b.add(f"{DRIVER}  {k} {'.' * max(3, 48 - len(k))} {v}")
    b.add(f"{DRIVER}-------------------- end of arguments ---------------------")
    # A retried job's section is shorter: its NCCL/vLLM start-up is not repeated here in full.
    workers = list(WORKERS) if job == 0 else [WORKERS[0], WORKERS[8]]
    for a in workers:
        p = a.nccl
        b.add(f"{p}Bootstrap : Using eth0:{a.ip}<0>")
        b.add(f"{p}cudaDriverVersion 12040")
        if a.local_rank == 0:
            b.add(f"{a.prefix}NCCL version 2.21.5+cuda12.4")
        b.add(f"{p}NET/Plugin: No plugin found (libnccl-net.so)")
        b.add(
            f"{p}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB "
            f"[RO]; OOB eth0:{a.ip}<0>"
        )
    nccl_burst(b, workers, NRANKS, "default_pg")
    for a in workers[::2]:
        src = "llm_engine.py:249"
        b.add(
            f"{a.prefix}{b.vllm(src)}Initializing an LLM engine (v0.8.5) with config: "
            "model='/mnt/models/Qwen2.5-7B-Instruct', speculative_config=None, "
            "tokenizer='/mnt/models/Qwen2.5-7B-Instruct', skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, override_neuron_config=None, "
            "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=5120, "
            "download_dir=None, load_format=LoadFormat.DUMMY, tensor_parallel_size=2, "
            "pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
            "enforce_eager=True, kv_cache_dtype=auto, device_config=cuda, seed=0, "
            "served_model_name=/mnt/models/Qwen2.5-7B-Instruct, num_scheduler_steps=1, "
            "enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc="
            "False, disable_mm_preprocessor_cache=False, pooler_config=None"
        )
        b.add(f"{a.prefix}{b.vllm('worker.py:267')}Memory profiling takes 2.31 seconds")
        b.add(
            f"{a.prefix}{b.vllm('worker.py:267')}the current vLLM instance can use total_gpu_"
            "memory (79.25GiB) x gpu_memory_utilization (0.60) = 47.55GiB"
        )
        b.add(
            f"{a.prefix}{b.vllm('worker.py:267')}model weights take 7.12GiB; non_torch_memory "
            "takes 0.53GiB; PyTorch activation peak memory takes 1.43GiB; the rest of the "
            "memory reserved for KV Cache is 38.47GiB."
        )
        b.add(f"{a.prefix}{b.vllm('executor_base.py:112')}# cuda blocks: 45012, # CPU blocks: 4681")
        b.add(
            f"{a.prefix}{b.vllm('executor_base.py:117')}Maximum concurrency for 5120 tokens "
            "per request: 140.66x"
        )
    warning(b, WORKERS[0], first=True)
    b.add(f"{DRIVER}Using dataset class: RLHFDataset")
    b.add(f"{DRIVER}filter dataset len: 7473")
    b.add(f"{DRIVER}Size of train dataloader: 7, Size of val dataloader: 1")
    return b.text()


def progress_line(step: int, total: int) -> str:
    frac = min(1.0, step / total)
    el = step * 60.0
    rem = max(0, total - step) * 60.0
    return (
        f"\rTraining Progress: {100 * frac:3.0f}%|{tqdm_bar(frac)}| {step}/{total} "
        f"[{fmt_dur(el)}<{fmt_dur(rem)}, 60.00s/it]"
    )


class Clock:
    """Placeholder values for a minute of log time, cached per day (strftime is slow)."""

    def __init__(self) -> None:
        self._day: dt.date | None = None
        self._date = self._md = self._mdc = b""

    def strings(self, when: dt.datetime) -> tuple[bytes, bytes, bytes, bytes]:
        if when.date() != self._day:
            self._day = when.date()
            self._date = when.strftime("%Y-%m-%d").encode()
            self._md = when.strftime("%m-%d").encode()
            self._mdc = when.strftime("%m%d").encode()
        return self._date, self._md, _HM[when.hour * 60 + when.minute], self._mdc


_HM = [f"{h:02d}:{m:02d}".encode() for h in range(24) for m in range(60)]
_CLOCK = Clock()


def render(tmpl: bytes, markers: tuple[str, ...], when: dt.datetime, step: int, total: int) -> bytes:
    """Fill the per-block placeholders (only those in `markers`) with bytes.replace."""
    date, md, hm, mdc = _CLOCK.strings(when)
    out = tmpl
    for m in markers:
        if m == M_DATE:
            v = date
        elif m == M_MD:
            v = md
        elif m == M_HM:
            v = hm
        elif m == M_MDC:
            v = mdc
        elif m == M_STEP:
            v = str(step).encode()
        elif m == M_ITER:
            v = f"{step:8d}".encode()
        elif m == M_SAMPLES:
            v = f"{step * GLOBAL_BATCH:12d}".encode()
        else:
            v = progress_line(step, total).encode()
        out = out.replace(m.encode(), v)
    return out


# --- the block pool ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Template:
    data: bytes
    markers: tuple[str, ...]
    newlines: int


def make_template(text: str) -> Template:
    data = text.encode()
    return Template(data, tuple(m for m in PER_BLOCK_MARKERS if m in text), data.count(b"\n"))


def build_pool(rng: random.Random, n: int) -> list[str]:
    return [make_step_block(rng) for _ in range(n)]


# --- the failure cascade -----------------------------------------------------------------------
@dataclass
class Planted:
    id: str
    failure_class: str
    role: str  # root_cause | symptom
    section: int  # 1 or 2 (job section of the file)
    key: str  # substring of the line a rule anchors on
    line: int = 0
    first_line: int = 0
    last_line: int = 0
    text: str = ""


def fault_block(kind: str, when: dt.datetime) -> tuple[str, list[Planted]]:
    a = WORKERS[3]
    bus = f"0000:{BUS_IDS[a.local_rank]}:00"
    when += dt.timedelta(seconds=17, microseconds=482113)
    sys_ts = f"{when:%b} {when.day:2d} {when:%H:%M:%S}"
    uptime = 86_400 * 3 + (when - START).total_seconds()
    k = f"{sys_ts} {a.host} kernel: [{uptime:12.6f}] "
    lines: list[str] = []
    planted: list[Planted] = []
    if kind == "xid79":
        key = f"NVRM: Xid (PCI:{bus}): 79, pid={a.pid}, GPU has fallen off the bus."
        lines += [
            k + key,
            k + f"NVRM: GPU {bus}.0: GPU has fallen off the bus.",
            k + "NVRM: A GPU crash dump has been created. If possible, please run",
            k + "NVRM: nvidia-bug-report.sh as root to collect this data before",
            k + "NVRM: the NVIDIA kernel module is unloaded.",
        ]
        planted.append(Planted("gpu-fell-off-bus", "hardware.gpu_fell_off_bus", "root_cause", 1, key))
        cuda = "RuntimeError: CUDA error: unknown error"
    else:
        key = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
        lines += [
            k + f"NVRM: Xid (PCI:{bus}): 48, pid={a.pid}, name=python, An uncorrectable double "
            "bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
            "subpartition 0.",
            k + f"NVRM: Xid (PCI:{bus}): 63, pid={a.pid}, name=python, Row Remapper: New row "
            "marked for remapping, reset gpu to activate.",
        ]
        planted.append(Planted("gpu-ecc-error", "hardware.gpu_ecc_error", "root_cause", 1, key))
        cuda = key
    rp = a.rprefix
    lines += [
        f"{rp} Traceback (most recent call last):",
        f'{rp}   File "/opt/verl/verl/single_controller/ray/base.py", line 663, in func',
        f"{rp}     return getattr(self.worker_dict[key], name)(*args, **kwargs)",
        f'{rp}   File "/opt/verl/verl/workers/megatron_workers.py", line 512, in update_actor',
        f"{rp}     metrics = self.actor.update_policy(dataloader=dataloader)",
        f'{rp}   File "/opt/verl/verl/workers/actor/megatron_actor.py", line 421, in forward_backward_batch',
        f"{rp}     losses_reduced = forward_backward_func(",
        f"{rp} {cuda}",
        f"{rp} CUDA kernel errors might be asynchronously reported at some other API call, so "
        "the stacktrace below might be incorrect.",
        f"{rp} For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        f"{rp} Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]
    if kind == "ecc":
        planted[-1].key = f"{rp} {cuda}"
    return "\n".join(lines) + "\n", planted


def watchdog_block(when: dt.datetime, seq: int) -> tuple[str, list[Planted]]:
    glog = f"{when:%m%d} {when:%H:%M:%S}"
    lines: list[str] = []
    planted: list[Planted] = []
    work = f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000)"
    shown = [w for w in WORKERS if w.rank != 3][:8]
    for i, a in enumerate(shown):
        us = 100000 + i * 7919
        rp = a.rprefix
        key = (
            f"[Rank {a.rank}] Watchdog caught collective operation timeout: {work} ran for "
            f"{600000 + 31 + i * 3} milliseconds before timing out."
        )
        lines += [
            f"{rp}[E{glog}.{us:06d} ProcessGroupNCCL.cpp:616] {key}",
            f"{rp}[E{glog}.{us + 311:06d} ProcessGroupNCCL.cpp:1785] [PG 0 (default_pg) Rank "
            f"{a.rank}] Exception (either an error or timeout) detected by watchdog at work: "
            f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
            f"{rp}[E{glog}.{us + 402:06d} ProcessGroupNCCL.cpp:630] [Rank {a.rank}] Some NCCL "
            "operations have failed or timed out. Due to the asynchronous nature of CUDA "
            "kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            f"{rp}[E{glog}.{us + 455:06d} ProcessGroupNCCL.cpp:636] [Rank {a.rank}] To avoid "
            "data inconsistency, we are taking the entire process down.",
            f"{rp}[E{glog}.{us + 901:06d} ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank "
            f"{a.rank}] Process group watchdog thread terminated with exception: {key}",
            f"{a.prefix}terminate called after throwing an instance of 'c10::DistBackendError'",
            f"{a.prefix}*** SIGABRT received at time={int(when.timestamp())} on cpu {(i * 11) % 96} ***",
        ]
        if i < 2:
            planted.append(
                Planted(
                    f"nccl-watchdog-timeout-rank{a.rank}",
                    "nccl.collective_timeout",
                    "symptom",
                    1,
                    key,
                )
            )
    a = shown[-1]
    lines.append(
        f"{a.prefix}[rank{a.rank}]:[E{glog}.999999 ProcessGroupNCCL.cpp:616] [Rank "
        f"{a.rank}] Watchdog caught collective operation timeout: {work} ran for "
        "600033 milliseconds before timing out. [repeated 7x across cluster]"
    )
    return "\n".join(lines) + "\n", planted


def actor_died_block(when: dt.datetime) -> tuple[str, list[Planted]]:
    a = WORKERS[0]
    ts = f"{when:%Y-%m-%d %H:%M:%S},{412:03d}"
    exit_detail = (
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
        "connection error code 2. End of file. There are some potential root causes. (1) The "
        "process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop "
        "--force is called. (3) The worker is crashed unexpectedly due to errors such as "
        "SIGSEGV or other unexpected errors."
    )
    key = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    lines = [
        f"(raylet) A worker died or was killed while executing a task by an unexpected system "
        f"error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: "
        f"ffffffffffffffff3c1a7de2b5f0c9e1a4b2d7c801000000 Worker ID: 5f1c0a9e8d7b6a5f4e3d2c1b0a"
        f"9f8e7d6c5b4a3f2e1d0c9b8a7f6e Node ID: a1b2c3d4e5f60718293a4b5c6d7e8f901a2b3c4d5e6f7081"
        f"92a3b4c5 Worker IP address: {a.ip} Worker port: 10234 Worker PID: {a.pid} " + exit_detail,
        f"{ts}\tERROR worker.py:422 -- Unhandled error (suppress with "
        "'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::WorkerDict.actor_rollout_update_actor() "
        f"(pid={a.pid}, ip={a.ip}, actor_id=3c1a7de2b5f0c9e1a4b2d7c801000000)",
        "Error executing job with overrides: ['algorithm.adv_estimator=grpo', "
        "'data.train_batch_size=1024', 'actor_rollout_ref.actor.strategy=megatron', "
        "'trainer.nnodes=2', 'trainer.n_gpus_per_node=8']",
        "Traceback (most recent call last):",
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 39, in main',
        "    run_ppo(config)",
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 68, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        f'  File "{PY}/ray/_private/auto_init_hook.py", line 21, in auto_init_wrapper',
        "    return fn(*args, **kwargs)",
        f'  File "{PY}/ray/_private/client_mode_hook.py", line 103, in wrapper',
        "    return func(*args, **kwargs)",
        f'  File "{PY}/ray/_private/worker.py", line 2771, in get',
        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        f'  File "{PY}/ray/_private/worker.py", line 919, in get_objects',
        "    raise value.as_instanceof_cause()",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=40211, "
        "ip=10.0.3.17, actor_id=8e1f5b2c9a7d3e6f0b4c8a2d01000000, repr=<main_ppo.TaskRunner "
        "object at 0x7f3a2c1d5e80>)",
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 190, in run',
        "    trainer.fit()",
        '  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 1139, in fit',
        "    actor_output = self.actor_rollout_wg.update_actor(batch)",
        '  File "/opt/verl/verl/single_controller/ray/base.py", line 49, in func',
        "    output = ray.get(output)",
        key,
        "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
        "\tactor_id: 3c1a7de2b5f0c9e1a4b2d7c801000000",
        f"\tpid: {a.pid}",
        "\tname: vXkLm2WorkerDict_0:0",
        "\tnamespace: 6f0e2d1c-5b4a-4938-8271-605f4e3d2c1b",
        f"\tip: {a.ip}",
        "The actor is dead because its worker process has died. " + exit_detail,
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ]
    return "\n".join(lines) + "\n", [Planted("ray-actor-died", "ray.actor_died", "symptom", 1, key)]


def oom_block(when: dt.datetime) -> tuple[str, list[Planted]]:
    a = WORKERS[0]
    p = a.prefix
    key = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a "
        "total capacity of 79.25 GiB of which 1.21 GiB is free."
    )
    lines = [
        f"{p}Traceback (most recent call last):",
        f'{p}  File "/opt/verl/verl/single_controller/ray/base.py", line 663, in func',
        f"{p}    return getattr(self.worker_dict[key], name)(*args, **kwargs)",
        f'{p}  File "/opt/verl/verl/workers/fsdp_workers.py", line 601, in update_actor',
        f"{p}    metrics = self.actor.update_policy(data=data)",
        f'{p}  File "/opt/verl/verl/workers/actor/dp_actor.py", line 312, in update_policy',
        f"{p}    loss.backward()",
        f'{p}  File "{PY}/torch/_tensor.py", line 581, in backward',
        f"{p}    torch.autograd.backward(",
        f'{p}  File "{PY}/torch/autograd/__init__.py", line 347, in backward',
        f"{p}    _engine_run_backward(",
        f'{p}  File "{PY}/torch/autograd/graph.py", line 825, in _engine_run_backward',
        f"{p}    return Variable._execution_engine.run_backward(  # Calls into the C++ engine "
        "to run the backward pass",
        f"{p}{key} Including non-PyTorch memory, this process has 78.03 GiB memory in use. Of "
        "the allocated memory 75.12 GiB is allocated by PyTorch, and 1.42 GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        f"{when:%Y-%m-%d %H:%M:%S},077\tERROR worker.py:422 -- Unhandled error (suppress with "
        "'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::WorkerDict.actor_rollout_update_actor() "
        f"(pid={a.pid}, ip={a.ip}, actor_id=7d2e4f6a8b0c1d3e5f7a9b1c02000000)",
        "Traceback (most recent call last):",
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 68, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::TaskRunner.run() (pid=40211, "
        "ip=10.0.3.17, actor_id=2b4d6f8a0c1e3f5a7b9c1d3e02000000, repr=<main_ppo.TaskRunner "
        "object at 0x7f11aa2b3c40>)",
        key,  # Ray repeats the remote exception on the driver
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ]
    return "\n".join(lines) + "\n", [
        Planted("cuda-out-of-memory", "cuda.out_of_memory", "root_cause", 2, key)
    ]


def final_line(n: int, when: dt.datetime, failed: bool) -> bytes:
    """A last line of exactly `n` bytes (newline included)."""
    status = "FAILED" if failed else "SUCCEEDED"
    head = (
        f"{when:%Y-%m-%d %H:%M:%S},500\tINFO job_manager.py:531 -- Job {JOB_IDS[1]} "
        f"finished with status {status}; driver log tail: "
    )
    fill = max(0, n - len(head) - 1)
    words = (" ".join(WORDS) + " ") * (fill // 200 + 1)
    out = (head + words[:fill]).encode() + b"\n"
    assert len(out) == n, (len(out), n)
    return out


FINAL_MIN = 200


# --- output --------------------------------------------------------------------------------
class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


class Sink:
    """Batched writer that counts bytes and lines."""

    def __init__(self, fh: Writable, batch: int = 8 << 20) -> None:
        self.fh = fh
        self.batch = batch
        self.buf: list[bytes] = []
        self.pending = 0
        self.bytes = 0
        self.lines = 0

    def write(self, data: bytes, newlines: int | None = None) -> None:
        self.buf.append(data)
        self.pending += len(data)
        self.bytes += len(data)
        self.lines += data.count(b"\n") if newlines is None else newlines
        if self.pending >= self.batch:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        fd = getattr(self.fh, "raw_fd", None)
        if isinstance(fd, int):  # plain file: gather-write the blocks, no joined copy
            for i in range(0, len(self.buf), 1024):  # IOV_MAX
                chunk = self.buf[i : i + 1024]
                done = os.writev(fd, chunk)
                if done < sum(map(len, chunk)):  # short write: finish the rest plainly
                    rest = memoryview(b"".join(chunk))[done:]
                    while rest:
                        rest = rest[os.write(fd, rest) :]
        else:
            self.fh.write(b"".join(self.buf))
        self.buf.clear()
        self.pending = 0


class RawFile:
    """An unbuffered output file that `Sink` writes to with os.writev."""

    def __init__(self, fd: int) -> None:
        self.raw_fd = fd

    def write(self, data: bytes, /) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self.raw_fd, view) :]
        return len(data)


@contextmanager
def open_out(path: Path, compress: bool, size: int = 0, name: str = "") -> Iterator[Writable]:
    """Raw or gzip output; gzip uses ISA-L when available and a fixed mtime (reproducible).

    A raw file of known `size` is preallocated (fewer extent allocations while writing).
    """
    with open(path, "wb", buffering=0) as raw:
        if not compress:
            if size and hasattr(os, "posix_fallocate"):
                with suppress(OSError):
                    os.posix_fallocate(raw.fileno(), 0, size)
            yield RawFile(raw.fileno())
            return
        try:
            from isal import igzip

            gz: gzip.GzipFile = igzip.IGzipFile(  # type: ignore[no-untyped-call]
                name, "wb", 1, fileobj=raw, mtime=0
            )
        except ImportError:
            gz = gzip.GzipFile(name, "wb", 1, fileobj=raw, mtime=0)
        with gz:
            yield gz


def gzip_copy(src: Path, dst: Path, chunk: int = 16 << 20) -> None:
    """Compress an existing file (streaming); used by the scan benchmark."""
    tmp = dst.with_name(dst.name + ".tmp")
    with open(src, "rb") as fin, open_out(tmp, compress=True, name=src.name) as fout:
        while data := fin.read(chunk):
            fout.write(data)
    tmp.replace(dst)


def job2(data: bytes) -> bytes:
    for old, new in JOB2_REWRITES:
        data = data.replace(old, new)
    return data


@dataclass
class Generator:
    size: int
    seed: int
    failures: str
    fault: str
    pool_size: int = 0
    rng: random.Random = field(init=False)
    when: dt.datetime = field(default=START, init=False)
    step: int = field(default=0, init=False)
    total: int = field(default=1, init=False)
    section: int = field(default=1, init=False)
    planted: list[Planted] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def render(self, t: Template) -> bytes:
        return render(t.data, t.markers, self.when, self.step, self.total)

    def run(self, sink: Sink) -> None:
        rng = self.rng
        n_pool = self.pool_size or max(48, min(384, self.size // (2 << 20)))
        pool_text = build_pool(rng, n_pool)
        avg = sum(len(t) for t in pool_text) / len(pool_text)
        self.total = max(10, int(self.size / avg * 1.01))
        pool = [
            make_template(t.replace(M_TOTAL, str(self.total)).replace(M_TOTAL8, f"{self.total:8d}"))
            for t in pool_text
        ]
        shorts = [make_template(t) for t in make_short_lines(rng, 256)]
        max_short = max(len(t.data) for t in shorts) + 64  # room for the filled placeholders

        self.emit(sink, self.render(make_template(header(rng, 0))))
        tail_reserve = FINAL_MIN + max_short + (8 << 10)
        failed = self.failures == "end"
        if failed:
            # Fractions of the file, but leave room for what follows in small files.
            # Job 1 runs to 99% of the file (less in small files) and dies there; a retried
            # job 2 fills the rest and ends with a CUDA OOM.
            self.body(sink, pool, min(int(self.size * (1 - TAIL_FRACTION)), self.size - (96 << 10)))
            for what in ("fault", "hang", "watchdog", "actor_died", "job2"):
                self.plant(sink, what)
            tail_reserve += len(oom_block(self.when)[0].encode()) + 1024
        self.body(sink, pool, self.size - tail_reserve)
        tail, tail_planted = oom_block(self.when) if failed else ("", [])
        tail_bytes = job2(tail.encode())
        # Fill with single lines until the last line can take up the rest exactly.
        while self.size - sink.bytes - len(tail_bytes) - FINAL_MIN >= max_short:
            self.emit(sink, self.render(rng.choice(shorts)))
        self.place(sink, tail_bytes, tail_planted)
        remaining = self.size - sink.bytes
        if remaining < FINAL_MIN:
            raise SystemExit(f"size {self.size} too small (minimum about {MIN_SIZE} bytes)")
        sink.write(final_line(remaining, self.when, failed), 1)

    def emit(self, sink: Sink, data: bytes, newlines: int | None = None) -> None:
        sink.write(job2(data) if self.section == 2 else data, newlines)

    def body(self, sink: Sink, pool: list[Template], limit: int) -> None:
        """Write step blocks while they fit below byte offset `limit`."""
        rng = self.rng
        while True:
            t = pool[rng.randrange(len(pool))]
            self.step += 1
            self.when += dt.timedelta(minutes=1)
            data = self.render(t)
            if sink.bytes + len(data) > limit:
                self.step -= 1
                self.when -= dt.timedelta(minutes=1)
                return
            self.emit(sink, data, t.newlines)

    def plant(self, sink: Sink, what: str) -> None:
        if what == "job2":  # a second job (a retry on other nodes) starts in the same file
            self.section = 2
            self.when += dt.timedelta(minutes=47)
            self.step -= self.step % 20  # resumes from the last checkpoint (save_freq=20)
            self.emit(sink, self.render(make_template(header(self.rng, 1))))
            return
        if what == "hang":  # the collective hangs: only Ray's own chatter until the timeout
            for _ in range(10):
                self.when += dt.timedelta(minutes=1)
                self.emit(sink, self.render(make_template(hang_minute(self.rng))))
            return
        if what == "fault":
            text, planted = fault_block(self.fault, self.when)
        elif what == "watchdog":
            text, planted = watchdog_block(self.when, 51234 + self.step)
        else:
            text, planted = actor_died_block(self.when)
        self.place(sink, text.encode(), planted)

    def place(self, sink: Sink, data: bytes, planted: list[Planted]) -> None:
        """Write a planted block, recording the line numbers of its key lines."""
        if self.section == 2:
            data = job2(data)
        first = sink.lines + 1
        lines = data.decode().split("\n")
        for p in planted:
            p.section = self.section
            if self.section == 2:
                p.key = job2(p.key.encode()).decode()
            idx = next(i for i, line in enumerate(lines) if p.key in line)
            p.line = first + idx
            p.first_line = first
            p.last_line = first + data.count(b"\n") - 1
            p.text = lines[idx]
        self.planted.extend(planted)
        sink.write(data)


def generate(
    out: Path,
    size: int,
    seed: int = 0,
    compress: bool = False,
    failures: str = "end",
    fault: str = "xid79",
) -> dict[str, Any]:
    """Write the log and its manifest; return the manifest."""
    if size < MIN_SIZE:
        raise SystemExit(f"--size must be at least {MIN_SIZE} bytes")
    t0 = time.perf_counter()
    gen = Generator(size, seed, failures, fault)
    tmp = out.with_name(out.name + ".tmp")
    with open_out(tmp, compress, size, name=out.name.removesuffix(".gz")) as fh:
        sink = Sink(fh)
        gen.run(sink)
        sink.flush()
    tmp.replace(out)
    secs = time.perf_counter() - t0
    assert sink.bytes == size, (sink.bytes, size)
    manifest: dict[str, Any] = {
        "generator": "bench/gen_log.py",
        "gen_version": GEN_VERSION,
        "file": str(out),
        "size": size,
        "bytes": sink.bytes,
        "lines": sink.lines,
        "seed": seed,
        "gzip": compress,
        "failures": failures,
        "fault": fault if failures == "end" else None,
        "seconds": round(secs, 3),
        "mb_per_s": round(size / secs / 1e6, 1),
        "planted": [{k: v for k, v in vars(p).items()} for p in gen.planted],
    }
    Path(str(out) + ".manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output file (plain text, or gzip with --gzip)")
    ap.add_argument(
        "--size",
        type=parse_size,
        default=parse_size("100M"),
        help="uncompressed size: 100M, 1G (binary), 1GB (decimal) or bytes",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true", help="gzip the output (ISA-L if installed)")
    ap.add_argument(
        "--failures",
        choices=("end", "none"),
        default="end",
        help="plant the failure cascade in the last ~1%% (end) or not (none)",
    )
    ap.add_argument(
        "--fault",
        choices=("xid79", "ecc"),
        default="xid79",
        help="hardware fault that starts the cascade",
    )
    args = ap.parse_args(argv)
    manifest = generate(args.out, args.size, args.seed, args.gzip, args.failures, args.fault)
    print(json.dumps(manifest, indent=2))
    print(
        f"wrote {manifest['bytes']:,} bytes, {manifest['lines']:,} lines in "
        f"{manifest['seconds']:.2f}s ({manifest['mb_per_s']:.0f} MB/s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
