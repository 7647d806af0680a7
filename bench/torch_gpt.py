#!/usr/bin/python3
"""The GPT model in plain eager PyTorch, timed like bench/bench-cpu-gpt.c and bench-gpu-gpt.c.

Same shape, batch, thread count, random tokens and AdamW step; nn.Linear / nn.LayerNorm /
nn.GELU(approximate="tanh") modules, the head tied to the token embedding.

Without --device (what run-cpu-bench runs): the tiny-gpt shape on the CPU with the explicit
masked softmax, and one line with ms/step, CPU ms/step (process time, all threads) and
tokens/s, each from the median step, in the format run-cpu-bench reads. Run it with
OPENBLAS_NUM_THREADS equal to --threads: torch.set_num_threads does not limit the OpenBLAS
that Debian's torch calls.

With --device cpu|cuda (what run-gpu-bench runs): --precision picks fp32, tf32 (TF32 matmuls
allowed), bf16 or fp16 (torch.autocast over forward and loss; fp32 master weights; fp16
without a GradScaler, as only time is measured), --attention sdpa
(F.scaled_dot_product_attention(is_causal=True), the default on CUDA) or naive, --clip adds
clip_grad_norm_ before the step, and the line is bench-gpu-gpt's: ms/step, tokens/s, model
FLOPs per token 6N + 12LTC, TFLOP/s and, given --peak-tflops, MFU. AdamW is
torch.optim.AdamW with its default implementation (fused and foreach left to PyTorch).
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # the presets' shapes (data/presets) and batch sizes
    "tiny-gpt": dict(n_layer=4, n_head=4, n_embd=256, seq_len=128, vocab_size=256, batch=16),
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, seq_len=1024, vocab_size=50257,
                      batch=16),
}


class Block(nn.Module):
    def __init__(self, C, H, attention="naive"):
        super().__init__()
        self.H = H
        self.attention = attention
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        hd = C // self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hd).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, V, attention="naive"):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, attention) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        # only the naive attention reads the mask
        self.register_buffer("mask", torch.tril(torch.ones(T, T)) if attention == "naive"
                             else torch.ones(0, 0))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def add_run_args(ap, warmup):
    """The options both PyTorch benchmarks take: threads, steps and the tiny-gpt shape."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=256)


def add_device_args(ap):
    """The options of the device benchmark (run-gpu-bench)."""
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None,
                    help="cpu or cuda (GPU 0); given, the line is bench-gpu-gpt's")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None,
                    help="a preset's shape and batch (options given beside it win)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--attention", choices=["auto", "sdpa", "naive"], default="auto",
                    help="auto: sdpa on CUDA, naive on the CPU")
    ap.add_argument("--clip", type=float, default=0.0,
                    help="clip_grad_norm_ to this norm before each step (0: none)")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="peak TFLOP/s for MFU (0: MFU not reported)")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap, warmup=2)
    add_device_args(ap)
    first, _ = ap.parse_known_args()
    if first.shape:  # the preset fills what the command line leaves unsaid
        ap.set_defaults(**SHAPES[first.shape])
    a = ap.parse_args()
    if a.device is None and (a.shape or a.precision != "fp32" or a.attention != "auto"
                             or a.clip or a.peak_tflops):
        ap.error("--shape, --precision, --attention, --clip and --peak-tflops need --device")
    if a.clip < 0 or a.peak_tflops < 0 or not math.isfinite(a.clip + a.peak_tflops):
        ap.error("--clip is %g and --peak-tflops %g; allowed: finite numbers >= 0"
                 % (a.clip, a.peak_tflops))
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.batch < 1:
        ap.error("--threads, --steps and --batch must be >= 1, --warmup >= 0")
    return ap, a


def make_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8)


def device_main(ap, a):
    """The benchmark of run-gpu-bench: on a device, at a precision, with MFU."""
    if a.device == "cuda":
        if not torch.cuda.is_available():
            built = ("built with CUDA %s" % torch.version.cuda if torch.version.cuda
                     else "a build without CUDA")
            print("no CUDA device: torch %s (%s) sees none" % (torch.__version__, built))
            raise SystemExit(77)
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        where = "cuda:0 (%s)" % torch.cuda.get_device_name(0)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(a.threads)
        where = "cpu, %d thread%s" % (a.threads, "" if a.threads == 1 else "s")
    attention = a.attention
    if attention == "auto":
        attention = "sdpa" if a.device == "cuda" else "naive"
    if attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        ap.error("--attention sdpa: torch %s has no F.scaled_dot_product_attention (PyTorch >= "
                 "2.0); allowed here: naive" % torch.__version__)
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    if a.device == "cpu" and a.precision == "fp16":
        ap.error("--precision fp16 on the CPU: torch.autocast on the CPU takes bfloat16 only; "
                 "allowed: fp32, tf32 (= fp32 on a CPU), bf16")
    if a.device == "cuda":
        # fp32 means full fp32 products; tf32 lets matmuls (and cuDNN) use TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"

    torch.manual_seed(1)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size, attention).to(dev)
    opt = make_optimizer(model)
    tokens = torch.randint(0, a.vocab_size, (a.batch * a.seq_len + 1,)).to(dev)
    inputs = tokens[:-1].view(a.batch, a.seq_len)
    targets = tokens[1:].view(a.batch, a.seq_len)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    times = []
    for s in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=autocast or torch.bfloat16,
                            enabled=autocast is not None):
            loss = model(inputs, targets)
        loss.backward()
        if a.clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        sync()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    last = loss.item()
    if not math.isfinite(last):
        print("torch_gpt.py: the loss is %g after %d steps at %s; the timing of a diverged run is "
              "not reported" % (last, a.warmup + a.steps, a.precision), file=sys.stderr)
        raise SystemExit(1)
    step = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())
    tok_s = a.batch * a.seq_len / step
    flops_tok = 6.0 * n + 12.0 * a.n_layer * a.seq_len * a.n_embd
    tflops = tok_s * flops_tok / 1e12
    if a.peak_tflops > 0:
        mfu = "MFU %.1f%% of %g TFLOP/s (given)" % (100.0 * tflops / a.peak_tflops, a.peak_tflops)
    else:
        mfu = "MFU n/a (give --peak-tflops)"
    prec = a.precision + (" autocast" if autocast is not None else "")
    print("torch: L%d H%d C%d T%d V%d B%d, %d params, %s, %s, attention %s, torch %s: "
          "%.2f ms/step, %.0f tokens/s, %.4g GFLOP/token (6N+12LTC), %.4g TFLOP/s, %s, "
          "last loss %.4f"
          % (a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size, a.batch, n, where, prec,
             attention, torch.__version__, 1e3 * step, tok_s, flops_tok / 1e9, tflops, mfu, last))
    if a.device == "cuda":
        print("torch: CUDA memory peak allocated by the run: %.1f GiB"
              % (torch.cuda.max_memory_allocated() / 2**30))


def main():
    ap, a = parse_args()
    if a.device is not None:
        device_main(ap, a)
        return
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size)
    opt = make_optimizer(model)
    tokens = torch.randint(0, a.vocab_size, (a.batch * a.seq_len + 1,))
    inputs = tokens[:-1].view(a.batch, a.seq_len)
    targets = tokens[1:].view(a.batch, a.seq_len)
    times, cpu = [], []
    for s in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    step, cpu_step = statistics.median(times), statistics.median(cpu)
    n = sum(p.numel() for p in model.parameters())
    print("torch: L%d H%d C%d T%d V%d B%d, %d params, %d threads: %.1f ms/step, "
          "cpu %.1f ms/step, %.0f tokens/s, last loss %.4f"
          % (a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size, a.batch, n, a.threads,
             1e3 * step, 1e3 * cpu_step, a.batch * a.seq_len / step, loss.item()))


if __name__ == "__main__":
    main()
