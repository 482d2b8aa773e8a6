#!/usr/bin/env python3
"""bench_attention: weft's attention forward against cuDNN and FlashAttention-2, in one process (issue 9, §4).

    python3 benchmarks/bench_attention.py --lib build/benchmarks/libweft_attention.so \
        [--quick] [--shapes GLOB,...] [--json out.json] [--plot out.png]

Contenders, all on the same torch tensors and on torch's current stream:
  weft   examples/attention_fwd.h through libweft_attention.so (benchmarks/attention_capi.cpp), loaded with
         ctypes after torch and Triton: libweft carries its own LLVM (hidden), and Triton compiles a kernel
         with its LLVM before and after weft compiles its first, so the run shows the two living side by side.
  cuDNN  F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION).
  FA2    the same under sdpa_kernel(SDPBackend.FLASH_ATTENTION) (PyTorch's built-in FlashAttention-2).
A contender that cannot run a shape is reported as n/a.

Shapes: hd128 with H 16 (bf16 and fp16) and hd64 with H 32 (bf16), B*S = 16384 tokens, S in 512 .. 16k, causal
and not, Sq = Sk (so SDPA's top-left is_causal is also the bottom-right mask weft implements). Each shape is
first checked (weft's output poisoned with NaN; O against cuDNN and FA2 over the whole tensor and against a
float64 reference on a slice of rows; the LSE against the reference), then timed: CUDA events around each
call, a short GPU spin ahead of each start event so the host's launch cost stays out of every contender's
time, warm-up, input sets rotated past the L2, random inputs, the median over at least --min-calls calls and
--min-time seconds in each of --rounds rounds taken in turn (weft, cuDNN, FA2, weft, ...).
TFLOP/s = 4*B*H*Sq*Sk*D / time, halved when causal (the FlashAttention convention).

Before the shapes, a correctness pass at small sizes: ragged (Sq, Sk), GQA (Hq 8, Hkv 2), D 64/128/256, causal
(bottom-right) and not, against a float64 reference with an explicit mask; what weft writes in rows that see
no key (causal, Sq > Sk) is reported, not judged.

Exit status 1 when a check fails (the table is still printed, last), 2 when the library cannot be used.
"""
import argparse
import contextlib
import ctypes
import fnmatch
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

# torch (and Triton) first: libweft must load into a process that already holds their libraries.
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# A fresh Triton cache, so that the probe below really compiles (a cache hit would not run Triton's LLVM).
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="bench-attention-triton-"))
try:
    import triton
    import triton.language as tl
except Exception as e:  # reported, not fatal: the contenders do not need it
    triton, tl, TRITON_IMPORT_ERROR = None, None, f"{type(e).__name__}: {e}"
else:
    TRITON_IMPORT_ERROR = None

TOKENS = 16384                                    # B * S for every benchmark shape
SEQS = [512, 1024, 2048, 4096, 8192, 16384]
CONFIGS = [(128, 16, "bf16"), (128, 16, "fp16"), (64, 32, "bf16")]   # (D, H, dtype)
ON_REQUEST_CONFIGS = [(256, 8, "bf16")]  # run only when --shapes names them (e.g. 'd256-*')
QUICK_SEQS = [1024, 4096]
QUICK_CONFIGS = [(128, 16, "bf16")]

RAGGED_SQ_SK = [(1, 77), (77, 1000), (1000, 77), (1000, 1000)]
RAGGED_D = [64, 128, 256]
RAGGED_B, RAGGED_HQ, RAGGED_HKV = 2, 8, 2

# Tolerances. O: relative L2 error ||out - ref|| / ||ref||; bf16/fp16 rounding of P and O alone gives a few
# 1e-3. LSE (natural log, f32): max abs error; dropping one 128-key block of 16k keys moves it by 8e-3.
O_TOL = {"bf16": 2e-2, "fp16": 1e-2}
LSE_TOL = 2e-3

DTYPES = {"bf16": (torch.bfloat16, 0), "fp16": (torch.float16, 1)}   # torch dtype, the C ABI's dtype code
SLEEP_CYCLES = 200_000      # the spin ahead of each timed call: ~0.1 ms at 1.98 GHz
EVENT_BATCH = 16            # timed calls queued between two host synchronizations
ROWS_CHECKED = 128          # rows per (batch, head) of the float64 reference on benchmark shapes


def fmt_seq(s):
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def shape_name(D, dtype, causal, S):
    return f"d{D}-{dtype}-{'causal' if causal else 'noncausal'}-s{S}"


def flops(B, H, Sq, Sk, D, causal):
    f = 4.0 * B * H * Sq * Sk * D
    return f / 2 if causal else f


# ---------------------------------------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------------------------------------
class WeftError(RuntimeError):
    pass


class Weft:
    """weft_attention_fwd from libweft_attention.so, on torch tensors."""
    name, label = "weft", "weft"

    def __init__(self, path):
        self.lib = ctypes.CDLL(os.path.abspath(path))
        self._fwd = self.lib.weft_attention_fwd
        self._fwd.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 8 + [ctypes.c_float, ctypes.c_void_p]
        self._fwd.restype = ctypes.c_int
        self._err = self.lib.weft_attention_last_error
        self._err.argtypes = []
        self._err.restype = ctypes.c_char_p
        # Seconds of the first call of each kernel variant in this process: trace, compile (cold with an
        # empty WEFT_CACHE_DIR), launch and run.
        self.first_calls = {}

    def note_first_call(self, dt, D, causal, seconds):
        self.first_calls.setdefault(f"{dt}-d{D}-{'causal' if causal else 'noncausal'}", seconds)

    def context(self):
        return contextlib.nullcontext()

    def bind(self, s, causal, scale):
        """The call on input set `s`, arguments checked and converted once: a timed call pays only ctypes."""
        q, k, v, o, lse = s["q"], s["k"], s["v"], s["o"], s["lse"]
        B, Hq, Sq, D = q.shape
        Bk, Hkv, Sk, Dk = k.shape
        assert (Bk, Dk) == (B, D) and v.shape == k.shape and o.shape == q.shape and lse.shape == (B, Hq, Sq)
        assert all(t.is_cuda and t.is_contiguous() for t in (q, k, v, o, lse))
        assert q.dtype == k.dtype == v.dtype == o.dtype and lse.dtype == torch.float32
        code = {torch.bfloat16: 0, torch.float16: 1}[q.dtype]
        args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), code,
                B, Hq, Hkv, Sq, Sk, D, int(causal), scale, torch.cuda.current_stream().cuda_stream)
        fwd, err = self._fwd, self._err

        def call():
            if fwd(*args) != 0:
                raise WeftError((err() or b"(no message)").decode(errors="replace"))
            return o
        return call


class Sdpa:
    """torch SDPA restricted to one backend: no fallback, so an unsupported shape raises."""

    def __init__(self, name, label, backend):
        self.name, self.label, self.backend = name, label, backend

    def context(self):
        return sdpa_kernel(self.backend)

    def bind(self, s, causal, scale):
        q, k, v = s["q"], s["k"], s["v"]
        gqa = q.shape[1] != k.shape[1]

        def call():
            if gqa:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return call


CUDNN = Sdpa("cudnn", "cuDNN", SDPBackend.CUDNN_ATTENTION)
FA2 = Sdpa("fa2", "FA2", SDPBackend.FLASH_ATTENTION)
PEERS = [CUDNN, FA2]


def run_checked(contender, call):
    """One call and a synchronize; returns (output, None) or (None, reason): n/a instead of a crash."""
    with warnings.catch_warnings(record=True) as caught, contender.context():
        warnings.simplefilter("always")
        try:
            out = call()
            torch.cuda.synchronize()
            return out, None
        except (RuntimeError, WeftError) as e:
            why = " ".join(str(e).split())
            hints = " | ".join(" ".join(str(w.message).split()) for w in caught)
            return None, (why + (f" [warnings: {hints}]" if hints else ""))[:600]


# ---------------------------------------------------------------------------------------------------------
# Reference and comparisons
# ---------------------------------------------------------------------------------------------------------
def reference_rows(q, k, v, b_idx, h_idx, rows, causal, scale):
    """float64 attention of query rows `rows` of batches b_idx and heads h_idx: (O, LSE, valid row mask).

    The causal mask is aligned bottom-right: query i sees key j when j <= i + (Sk - Sq). GQA: query head h
    reads K/V head h // (Hq / Hkv). Rows that see no key get LSE -inf and O NaN (valid = False).
    """
    Hq, Sq = q.shape[1], q.shape[2]
    Hkv, Sk = k.shape[1], k.shape[2]
    dev = q.device
    bi = torch.as_tensor(b_idx, device=dev)
    hi = torch.as_tensor(h_idx, device=dev)
    hk = torch.as_tensor([h // (Hq // Hkv) for h in h_idx], device=dev)
    ri = torch.as_tensor(rows, device=dev)
    qs = q.index_select(0, bi).index_select(1, hi).index_select(2, ri).double()
    ks = k.index_select(0, bi).index_select(1, hk).double()
    vs = v.index_select(0, bi).index_select(1, hk).double()
    s = torch.matmul(qs, ks.transpose(-1, -2)) * scale
    valid = torch.ones(len(rows), dtype=torch.bool, device=dev)
    if causal:
        allowed = torch.arange(Sk, device=dev)[None, :] <= ri[:, None] + (Sk - Sq)
        s = s.masked_fill(~allowed, float("-inf"))
        valid = allowed.any(dim=1)
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), vs)
    return o, lse, valid


def compare(out, ref):
    """Relative L2 error, max abs error and the count of non-finite values of `out`, in float64."""
    out, ref = out.double(), ref.double()
    bad = int((~torch.isfinite(out)).sum().item())
    diff = out - ref
    ref_norm = torch.linalg.vector_norm(ref).item()
    rel = torch.linalg.vector_norm(diff).item() / ref_norm if ref_norm > 0 else float("nan")
    return {"rel_l2": rel, "max_abs": diff.abs().max().item() if diff.numel() else 0.0, "nonfinite": bad}


def compare_big(out, ref):
    """compare() for whole benchmark tensors, in float32 (tens of millions of elements)."""
    out, ref = out.float(), ref.float()
    bad = int((~torch.isfinite(out)).sum().item())
    diff = out - ref
    ref_norm = torch.linalg.vector_norm(ref).item()
    rel = torch.linalg.vector_norm(diff).item() / ref_norm if ref_norm > 0 else float("nan")
    return {"rel_l2": rel, "max_abs": diff.abs().max().item(), "nonfinite": bad}


def lse_error(out, ref):
    """Max abs error of the LSE over rows whose reference is finite, and the non-finite outputs there."""
    out, ref = out.double(), ref.double()
    return {"max_abs": (out - ref).abs().max().item() if out.numel() else 0.0,
            "nonfinite": int((~torch.isfinite(out)).sum().item())}


def describe(t):
    """What a block of outputs holds: 'zero', 'NaN', '-inf', '+inf', 'finite' (or a mix, joined by '/')."""
    if t.numel() == 0:
        return "-"
    t = t.double()
    kinds = []
    for name, m in (("NaN", torch.isnan(t)), ("+inf", t == float("inf")), ("-inf", t == float("-inf")),
                    ("zero", t == 0), ("finite", torch.isfinite(t) & (t != 0))):
        if bool(m.any()):
            kinds.append(name)
    return "/".join(kinds)


# ---------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------
def spin():
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(SLEEP_CYCLES)


def spin_us():
    """How long the spin ahead of each timed call lasts, so a host-bound contender can be flagged."""
    if not hasattr(torch.cuda, "_sleep"):
        return 0.0
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spin()
    a.record()
    for _ in range(10):
        spin()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 100.0   # 10 spins, ms -> us


def time_calls(calls, min_calls, min_time_s, max_calls, warmup):
    """Device times (ms) of single calls, taking the input sets in turn.

    Each call sits between its own pair of events; a spin kernel queued ahead of the start event keeps the
    GPU busy while the host queues the call, so the host's launch cost (Python, ctypes, SDPA's dispatch)
    does not show up as idle time inside the events.
    """
    n = len(calls)
    for i in range(max(warmup, n)):
        calls[i % n]()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(EVENT_BATCH)]
    times, host_us, i = [], [], 0
    while len(times) < max_calls and (len(times) < min_calls or sum(times) < min_time_s * 1e3):
        for start, end in events:
            spin()
            start.record()
            t0 = time.perf_counter()
            calls[i % n]()
            host_us.append((time.perf_counter() - t0) * 1e6)
            end.record()
            i += 1
        torch.cuda.synchronize()
        times += [start.elapsed_time(end) for start, end in events]
    return times, host_us


# ---------------------------------------------------------------------------------------------------------
# Triton beside weft
# ---------------------------------------------------------------------------------------------------------
if triton is not None:
    @triton.jit
    def _triton_scale(x_ptr, y_ptr, n, a: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) * a, mask=m)


def triton_probe(a):
    """JIT-compile (a new constexpr `a`: a new compile) and run a small Triton kernel; None when it worked."""
    if triton is None:
        return f"Triton not importable: {TRITON_IMPORT_ERROR}"
    try:
        x = torch.randn(10000, device="cuda")
        y = torch.empty_like(x)
        _triton_scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), a=a, BLOCK=1024)
        torch.cuda.synchronize()
        if not torch.allclose(y, x * a):
            return "Triton's kernel ran but computed a wrong result"
        return None
    except Exception as e:
        return f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"


# ---------------------------------------------------------------------------------------------------------
# The correctness pass at small sizes: ragged Sq/Sk, GQA, D 64/128/256
# ---------------------------------------------------------------------------------------------------------
def ragged_pass(weft, dtypes, failures):
    results = []
    tols = ", ".join(f"{k} {v:g}" for k, v in O_TOL.items())
    print(f"correctness, ragged (B {RAGGED_B}, Hq {RAGGED_HQ}, Hkv {RAGGED_HKV}; float64 reference, causal "
          f"aligned bottom-right; tolerances: O rel L2 <= {tols}, LSE max abs <= {LSE_TOL:g})")
    print(f"  {'case':34} {'O rel L2':>9} {'O max abs':>9} {'LSE err':>9}  {'no-key rows: O / LSE':24} status")
    for dt in dtypes:
        tdtype = DTYPES[dt][0]
        for D in RAGGED_D:
            for Sq, Sk in RAGGED_SQ_SK:
                for causal in (False, True):
                    name = f"{dt} d{D} sq{Sq} sk{Sk} {'causal' if causal else 'noncausal'}"
                    r = {"dtype": dt, "D": D, "Sq": Sq, "Sk": Sk, "causal": causal, "B": RAGGED_B,
                         "Hq": RAGGED_HQ, "Hkv": RAGGED_HKV}
                    q = torch.randn(RAGGED_B, RAGGED_HQ, Sq, D, device="cuda", dtype=tdtype)
                    k = torch.randn(RAGGED_B, RAGGED_HKV, Sk, D, device="cuda", dtype=tdtype)
                    v = torch.randn(RAGGED_B, RAGGED_HKV, Sk, D, device="cuda", dtype=tdtype)
                    o = torch.full_like(q, float("nan"))
                    lse = torch.full((RAGGED_B, RAGGED_HQ, Sq), float("nan"), device="cuda")
                    scale = 1.0 / math.sqrt(D)
                    s = {"q": q, "k": k, "v": v, "o": o, "lse": lse}
                    t0 = time.perf_counter()
                    _, err = run_checked(weft, weft.bind(s, causal, scale))
                    r["first_call_s"] = time.perf_counter() - t0
                    weft.note_first_call(dt, D, causal, r["first_call_s"])
                    if err:
                        r.update(status="FAIL", error=err)
                        failures.append(f"ragged {name}: weft failed: {err}")
                        print(f"  {name:34} weft failed: {err[:200]}")
                        results.append(r)
                        continue
                    ref_o, ref_lse, valid = reference_rows(q, k, v, list(range(RAGGED_B)),
                                                           list(range(RAGGED_HQ)), list(range(Sq)), causal, scale)
                    eo = compare(o[:, :, valid], ref_o[:, :, valid])
                    el = lse_error(lse[:, :, valid], ref_lse[:, :, valid])
                    r.update(o=eo, lse=el, rows_without_keys=int((~valid).sum().item()),
                             no_key_rows_o=describe(o[:, :, ~valid]), no_key_rows_lse=describe(lse[:, :, ~valid]))
                    why = []
                    if eo["nonfinite"] or el["nonfinite"]:
                        why.append(f"{eo['nonfinite']} non-finite O, {el['nonfinite']} non-finite LSE in rows "
                                   "that see keys (NaN poison left = unwritten)")
                    if not eo["rel_l2"] <= O_TOL[dt]:
                        why.append(f"O rel L2 {eo['rel_l2']:.3g} > {O_TOL[dt]}")
                    if not el["max_abs"] <= LSE_TOL:
                        why.append(f"LSE max abs {el['max_abs']:.3g} > {LSE_TOL}")
                    r["status"] = "FAIL" if why else "ok"
                    if why:
                        failures.append(f"ragged {name}: " + "; ".join(why))
                    no_key = f"{r['no_key_rows_o']} / {r['no_key_rows_lse']}" if r["rows_without_keys"] else "-"
                    print(f"  {name:34} {eo['rel_l2']:9.2e} {eo['max_abs']:9.2e} {el['max_abs']:9.2e}  "
                          f"{no_key:24} {r['status']}{': ' + '; '.join(why) if why else ''}")
                    results.append(r)
    return results


# ---------------------------------------------------------------------------------------------------------
# One benchmark shape: check, then time
# ---------------------------------------------------------------------------------------------------------
def run_shape(D, H, dt, causal, S, weft, args, l2_bytes, spin_time_us, failures):
    tdtype = DTYPES[dt][0]
    B = TOKENS // S
    scale = 1.0 / math.sqrt(D)
    name = shape_name(D, dt, causal, S)
    r = {"name": name, "D": D, "H": H, "Hkv": H, "dtype": dt, "causal": causal, "B": B, "Sq": S, "Sk": S,
         "scale": scale, "flops": flops(B, H, S, S, D, causal), "contenders": {}, "checks": {}}

    # Enough input sets that one pass over them exceeds the L2 several times (and never fewer than two, so
    # consecutive calls never see the same inputs).
    set_bytes = 3 * B * H * S * D * torch.empty((), dtype=tdtype).element_size()
    n_sets = max(2, min(64, math.ceil(args.l2_factor * l2_bytes / set_bytes)))
    r["input_sets"] = n_sets
    sets = []
    for _ in range(n_sets):
        q = torch.randn(B, H, S, D, device="cuda", dtype=tdtype)
        sets.append({"q": q, "k": torch.randn_like(q), "v": torch.randn_like(q), "o": torch.empty_like(q),
                     "lse": torch.empty(B, H, S, device="cuda", dtype=torch.float32)})

    # --- check, on set 0: weft's outputs poisoned first
    s0 = sets[0]
    s0["o"].fill_(float("nan"))
    s0["lse"].fill_(float("nan"))
    outs, why = {}, []
    t0 = time.perf_counter()
    out, err = run_checked(weft, weft.bind(s0, causal, scale))
    r["contenders"]["weft"] = {"first_call_s": time.perf_counter() - t0}
    weft.note_first_call(dt, D, causal, r["contenders"]["weft"]["first_call_s"])
    if err:
        r["contenders"]["weft"]["error"] = err
        why.append(f"weft failed: {err}")
    else:
        outs["weft"] = out
    for peer in PEERS:
        out, err = run_checked(peer, peer.bind(s0, causal, scale))
        r["contenders"][peer.name] = {}
        if err:
            r["contenders"][peer.name]["error"] = err
        else:
            outs[peer.name] = out

    tol = O_TOL[dt]
    rows = sorted(set(range(8)) | set(range(S - 8, S)) |
                  set(torch.randperm(S)[:ROWS_CHECKED - 16].tolist()))
    b_idx, h_idx = sorted({0, B - 1}), sorted({0, H - 1})
    ref_o, ref_lse, _ = reference_rows(s0["q"], s0["k"], s0["v"], b_idx, h_idx, rows, causal, scale)
    ri, bi, hi = (torch.as_tensor(x, device="cuda") for x in (rows, b_idx, h_idx))

    def rows_of(t):
        return t.index_select(0, bi).index_select(1, hi).index_select(2, ri)

    for cname, out in outs.items():   # every contender against the float64 reference, on the slice
        r["checks"][f"{cname}_vs_ref"] = compare(rows_of(out), ref_o)
    if "weft" in outs:
        o, lse = s0["o"], s0["lse"]
        nan_o, nan_lse = int(torch.isnan(o).sum().item()), int(torch.isnan(lse).sum().item())
        r["checks"]["weft_nan"] = {"o": nan_o, "lse": nan_lse}
        if nan_o or nan_lse:
            why.append(f"NaN left in weft's output ({nan_o} in O, {nan_lse} in LSE)")
        e = r["checks"]["weft_vs_ref"]
        if not e["rel_l2"] <= tol:
            why.append(f"weft O vs float64 reference: rel L2 {e['rel_l2']:.3g} > {tol}")
        el = lse_error(rows_of(lse.unsqueeze(-1)).squeeze(-1), ref_lse)
        r["checks"]["weft_lse_vs_ref"] = el
        if el["nonfinite"] or not el["max_abs"] <= LSE_TOL:
            why.append(f"weft LSE vs float64 reference: max abs {el['max_abs']:.3g} (tolerance {LSE_TOL}), "
                       f"{el['nonfinite']} non-finite")
        for peer in PEERS:
            if peer.name not in outs:
                continue
            e = compare_big(o, outs[peer.name])
            r["checks"][f"weft_vs_{peer.name}"] = e
            # Held against weft only where the peer itself agrees with the reference.
            if r["checks"][f"{peer.name}_vs_ref"]["rel_l2"] <= tol and not e["rel_l2"] <= tol:
                why.append(f"weft O vs {peer.label}: rel L2 {e['rel_l2']:.3g} > {tol}")
    r["check"] = "FAIL" if why else "ok"
    if why:
        r["check_failures"] = why
        failures.extend(f"{name}: {w}" for w in why)
    del outs

    # --- time, the contenders taken in turn within each round
    per = {c.name: [] for c in [weft] + PEERS}
    host = {c.name: [] for c in [weft] + PEERS}
    runnable = [c for c in [weft] + PEERS if "error" not in r["contenders"][c.name]]
    for rnd in range(args.rounds):
        for c in runnable:
            calls = [c.bind(s, causal, scale) for s in sets]
            try:
                with c.context():
                    times, host_us = time_calls(calls, args.min_calls, args.min_time, args.max_calls,
                                                max(args.warmup, n_sets))
            except (RuntimeError, WeftError) as e:
                r["contenders"][c.name]["error"] = " ".join(str(e).split())[:600]
                if c is weft:   # a peer that fails is n/a; weft must run every shape
                    failures.append(f"{name}: weft failed while timed: {r['contenders'][c.name]['error']}")
                runnable = [x for x in runnable if x is not c]
                continue
            per[c.name].append(times)
            host[c.name] += host_us
    for c in [weft] + PEERS:
        rounds = per[c.name]
        if not rounds or "error" in r["contenders"][c.name]:
            continue
        all_t = [t for rt in rounds for t in rt]
        med = statistics.median(all_t)
        host_med = statistics.median(host[c.name])
        r["contenders"][c.name].update(
            median_ms=med, tflops=r["flops"] / (med * 1e-3) / 1e12, min_ms=min(all_t), calls=len(all_t),
            round_medians_ms=[statistics.median(rt) for rt in rounds], host_us_median=host_med,
            host_bound=bool(spin_time_us and host_med > 0.8 * spin_time_us),
            times_ms=[round(t, 5) for t in all_t])
    del sets
    return r


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------
def ratio(r, a, b):
    ca, cb = r["contenders"].get(a, {}), r["contenders"].get(b, {})
    if "median_ms" in ca and "median_ms" in cb:
        return cb["median_ms"] / ca["median_ms"]
    return None


def cell(x, fmt):
    """x formatted as fmt ('8.3f'), or 'n/a' right-aligned to the same width."""
    return format(x, fmt) if x is not None else format("n/a", ">" + fmt.split(".")[0])


def print_table(results, meta):
    print()
    print(f"attention forward, {meta['gpu']}, torch {meta['torch']}, cuDNN {meta['cudnn']}; "
          f"B*S = {TOKENS} tokens, Sq = Sk = S")
    print("TFLOP/s with FLOPs = 4*B*H*S*S*D, halved when causal (the FlashAttention convention); median of "
          "CUDA-event-timed calls; ratios are speed ratios (>1: weft faster)")
    head = (f"{'config':26} {'S':>5} {'B':>3} {'weft ms':>8} {'weft TF':>7} {'cuDNN TF':>8} {'FA2 TF':>7} "
            f"{'weft/cuDNN':>10} {'weft/FA2':>9}  check")
    print(head)
    print("-" * len(head))
    for r in results:
        c = r["contenders"]
        cfg = f"hd{r['D']} H{r['H']} {r['dtype']} {'causal' if r['causal'] else 'non-causal'}"
        tf = {n: c.get(n, {}).get("tflops") for n in ("weft", "cudnn", "fa2")}
        flag = "*" if any(c.get(n, {}).get("host_bound") for n in c) else ""
        print(f"{cfg:26} {fmt_seq(r['Sq']):>5} {r['B']:>3} {cell(c['weft'].get('median_ms'), '8.3f')} "
              f"{cell(tf['weft'], '7.1f')} {cell(tf['cudnn'], '8.1f')} {cell(tf['fa2'], '7.1f')} "
              f"{cell(ratio(r, 'weft', 'cudnn'), '10.3f')} {cell(ratio(r, 'weft', 'fa2'), '9.3f')}  "
              f"{r.get('check', '?')}{flag}")
    if any(c.get("host_bound") for r in results for c in r["contenders"].values()):
        print("* a contender's host time per call exceeded the spin ahead of it: its times may include launch cost")


def plot(results, meta, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    groups = []
    for r in results:
        if (r["D"], r["H"], r["dtype"]) not in groups:
            groups.append((r["D"], r["H"], r["dtype"]))
    fig, axes = plt.subplots(2, len(groups), figsize=(5.2 * len(groups), 8.5), squeeze=False, sharey=True)
    styles = {"weft": ("weft", "C3", "o"), "cudnn": ("cuDNN", "C0", "s"), "fa2": ("FlashAttention-2", "C2", "^")}
    for col, (D, H, dt) in enumerate(groups):
        for row, causal in enumerate((False, True)):
            ax = axes[row][col]
            sel = sorted((r for r in results if (r["D"], r["H"], r["dtype"], r["causal"]) == (D, H, dt, causal)),
                         key=lambda r: r["Sq"])
            for key, (label, color, marker) in styles.items():
                pts = [(r["Sq"], r["contenders"][key]["tflops"]) for r in sel
                       if "tflops" in r["contenders"].get(key, {})]
                if pts:
                    ax.plot(*zip(*pts), label=label, color=color, marker=marker)
            ax.set_xscale("log", base=2)
            seqs = [r["Sq"] for r in sel] or SEQS
            ax.set_xticks(seqs)
            ax.set_xticklabels([fmt_seq(s) for s in seqs])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_title(f"hd{D}, H {H}, {dt}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length S (B*S = 16k)")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s")
            ax.legend(loc="best")
    fig.suptitle(f"Attention forward, {meta['gpu']}\nFLOPs = 4*B*H*S*S*D, halved when causal")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def write_json(path, doc):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(jsonable(doc), f, indent=1)
        os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True, help="path of libweft_attention.so")
    ap.add_argument("--quick", action="store_true", help=f"S in {QUICK_SEQS}, hd128 bf16 only; ragged bf16 only")
    ap.add_argument("--shapes", default="",
                    help="comma-separated globs on names like d128-bf16-causal-s4096 (d256-bf16-* on request only)")
    ap.add_argument("--skip-ragged", action="store_true", help="no correctness pass at ragged sizes")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--plot", help="write the TFLOP/s plot here (PNG)")
    ap.add_argument("--rounds", type=int, default=2, help="timing rounds (contenders in turn); default 2")
    ap.add_argument("--min-calls", type=int, default=30, help="timed calls per contender and round, at least")
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of timed device work per round, at least")
    ap.add_argument("--max-calls", type=int, default=1000, help="timed calls per contender and round, at most")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls first (at least one per input set)")
    ap.add_argument("--l2-factor", type=float, default=4.0, help="input sets span this many L2s, at least")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("bench_attention: torch sees no CUDA device", file=sys.stderr)
        return 2
    # weft uses device WEFT_CUDA_DEVICE (default 0) through the primary context, which torch shares.
    torch.cuda.set_device(int(os.environ.get("WEFT_CUDA_DEVICE", "0")))
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = getattr(props, "L2_cache_size", 0) or (60 << 20)
    flash_impl = None
    with contextlib.suppress(Exception):
        flash_impl = torch.nn.attention.current_flash_attention_impl()
    meta = {
        "gpu": props.name, "multiprocessors": props.multi_processor_count, "l2_bytes": l2_bytes,
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "triton": getattr(triton, "__version__", None), "flash_attention_impl": flash_impl or "built-in (FA2)",
        "flops": "4*B*H*Sq*Sk*D, halved when causal (FlashAttention convention)",
        "timing": ("CUDA events around each call, a torch.cuda._sleep spin ahead of each start event, warm-up, "
                   "input sets rotated past the L2, median over all calls of all rounds"),
        "tolerances": {"o_rel_l2": O_TOL, "lse_max_abs": LSE_TOL},
        "causal_mask": "bottom-right aligned (query i sees key j <= i + Sk - Sq); Sq = Sk in the benchmark",
        "args": vars(args),
    }
    failures = []
    doc = {"meta": meta, "coexistence": {}, "ragged": [], "shapes": [], "failures": failures}

    # Triton's LLVM compiles before libweft is loaded, and again after weft has compiled its first kernels.
    co = doc["coexistence"]
    co["triton_before_weft"] = triton_probe(2.0) or "ok"
    try:
        weft = Weft(args.lib)
    except OSError as e:
        print(f"bench_attention: cannot load {args.lib}: {e}", file=sys.stderr)
        return 2
    co["libweft_loaded_after"] = "torch" + (" and triton" if triton is not None else "")
    spin_time_us = spin_us()
    meta["spin_us"] = spin_time_us
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {l2_bytes >> 20} MiB; torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}, cuDNN {meta['cudnn']}), triton {meta['triton']}; flash impl: "
          f"{meta['flash_attention_impl']}; spin ahead of each timed call {spin_time_us:.0f} us")

    if not args.skip_ragged:
        doc["ragged"] = ragged_pass(weft, ["bf16"] if args.quick else ["bf16", "fp16"], failures)
        write_json(args.json, doc)
    co["triton_after_weft"] = triton_probe(3.0) or "ok"
    print(f"Triton JIT in this process: before libweft {co['triton_before_weft']}, after weft's kernels "
          f"{co['triton_after_weft']}")
    if co["triton_after_weft"] != "ok" and triton is not None:
        failures.append(f"Triton failed to compile beside libweft: {co['triton_after_weft']}")

    configs, seqs = (QUICK_CONFIGS, QUICK_SEQS) if args.quick else (CONFIGS, SEQS)
    globs = [g for g in args.shapes.split(",") if g]
    if globs:
        configs = configs + ON_REQUEST_CONFIGS
    for D, H, dt in configs:
        for causal in (False, True):
            for S in seqs:
                name = shape_name(D, dt, causal, S)
                if globs and not any(fnmatch.fnmatch(name, g) for g in globs):
                    continue
                r = run_shape(D, H, dt, causal, S, weft, args, l2_bytes, spin_time_us, failures)
                doc["shapes"].append(r)
                c = r["contenders"]
                print(f"{name:28} check {r['check']:4}  " + "  ".join(
                    f"{x.label} " + (f"{c[x.name]['tflops']:6.1f} TF/s" if "tflops" in c[x.name] else "n/a")
                    for x in [weft] + PEERS) + f"  (weft first call {c['weft']['first_call_s']:.2f} s)")
                for x in [weft] + PEERS:
                    if "error" in c[x.name]:
                        print(f"    {x.label} n/a: {c[x.name]['error'][:300]}")
                write_json(args.json, doc)
                torch.cuda.empty_cache()

    meta["weft_first_call_s"] = weft.first_calls
    print("weft's first call of each kernel variant (trace + compile + run; cold when WEFT_CACHE_DIR starts "
          "empty): " + ", ".join(f"{k} {v:.2f} s" for k, v in weft.first_calls.items()))
    if args.plot and doc["shapes"]:
        try:
            plot(doc["shapes"], meta, args.plot)
            print(f"plot: {args.plot}")
        except Exception as e:   # a missing plot must not hide the table
            print(f"plot failed: {type(e).__name__}: {e}")
    write_json(args.json, doc)
    if failures:
        print(f"\n{len(failures)} check(s) FAILED:")
        for f in failures:
            print(f"  {f[:400]}")
    print_table(doc["shapes"], meta)
    print(f"\nresult: {'FAIL' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
