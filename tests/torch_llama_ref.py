#!/usr/bin/python3
"""Reference for tests/test-llama.c: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and
Qwen3ForCausalLM written in PyTorch (float64) with the module structure and parameter names of
Hugging Face transformers (which is not installed here), driven by a Hugging Face config.json,
so that loading Cohort's .safetensors with load_state_dict(strict=True) checks every name and
shape.

    torch_llama_ref.py CONFIG WEIGHTS INPUTS [forward | hidden K]

CONFIG: a config.json (architectures picks the model; hidden_size, intermediate_size,
num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps,
rope_theta, rope_scaling, attention_bias, tie_word_embeddings, vocab_size). WEIGHTS: a
.safetensors file (read here with the standard library). INPUTS: int32 B, T, then inputs [B*T]
and targets [B*T] int32. Prints, one per line: "loss X", "logits v v …", then for every
parameter "NAME g g …" (its gradient, flattened); with `forward`, only the loss and logits;
with `hidden K`, only "hidden v v …": hidden_states[K] as transformers' output_hidden_states
gives it (K from 0, the embeddings, to num_hidden_layers, or negative from the end; the last
entry is the output of model.norm, the others raw block outputs), for tests/test-text-encoder.c.
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, size = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2),
                       "F16": (torch.float16, 2)}[info["dtype"]]
        b, e = info["data_offsets"]
        vals = torch.frombuffer(data, dtype=dtype, count=(e - b) // size, offset=8 + n + b)
        out[name] = vals.to(torch.float64).view(info["shape"])
    return out


class RMSNorm(nn.Module):
    """LlamaRMSNorm / Qwen3RMSNorm: weight * (x * rsqrt(mean(x^2) + eps))."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def inv_freq(cfg, dim):
    """modeling_rope_utils: the default frequencies, then rope_scaling's `linear` or `llama3`."""
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        inv = inv / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        inv_llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, inv_llama)
    else:
        assert kind == "default", kind
    return inv


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, arch):
        super().__init__()
        C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or C // H
        self.H, self.KV = H, KV
        bias = cfg.get("attention_bias", False)
        qkv_bias = True if arch == "Qwen2ForCausalLM" else bias
        o_bias = False if arch in ("Qwen2ForCausalLM", "MistralForCausalLM") else bias
        if arch == "MistralForCausalLM":
            qkv_bias = False
        self.q_proj = nn.Linear(C, H * self.hd, bias=qkv_bias)
        self.k_proj = nn.Linear(C, KV * self.hd, bias=qkv_bias)
        self.v_proj = nn.Linear(C, KV * self.hd, bias=qkv_bias)
        self.o_proj = nn.Linear(H * self.hd, C, bias=o_bias)
        if arch == "Qwen3ForCausalLM":
            self.q_norm = RMSNorm(self.hd, cfg["rms_norm_eps"])
            self.k_norm = RMSNorm(self.hd, cfg["rms_norm_eps"])
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd)
        k = self.k_proj(x).view(B, T, self.KV, self.hd)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.H // self.KV  # repeat_kv
        k = k[:, :, None].expand(B, self.KV, rep, T, self.hd).reshape(B, self.H, T, self.hd)
        v = v[:, :, None].expand(B, self.KV, rep, T, self.hd).reshape(B, self.H, T, self.hd)
        att = (q @ k.transpose(2, 3)) * self.hd ** -0.5
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(B, T, self.H * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, arch):
        super().__init__()
        self.self_attn = Attention(cfg, arch)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, cfg, arch):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(
            [DecoderLayer(cfg, arch) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.inv_freq = inv_freq(cfg, hd)

    def hidden_states(self, tokens):
        """What output_hidden_states returns: the embeddings, each block's output, the last
        one through the final norm (LlamaModel.forward)."""
        T = tokens.shape[1]
        freqs = torch.arange(T, dtype=torch.float64)[:, None] * self.inv_freq[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed_tokens(tokens)
        states = [x]
        for layer in self.layers:
            x = layer(x, cos, sin)
            states.append(x)
        states[-1] = self.norm(x)
        return states

    def forward(self, tokens):
        return self.hidden_states(tokens)[-1]


class ForCausalLM(nn.Module):
    """With tie_word_embeddings the head is the embedding itself and has no name of its own
    (what save_pretrained writes)."""

    def __init__(self, cfg, arch):
        super().__init__()
        self.model = Model(cfg, arch)
        self.tied = cfg.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def forward(self, tokens):
        h = self.model(tokens)
        return h @ self.model.embed_tokens.weight.t() if self.tied else self.lm_head(h)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    (arch,) = cfg["architectures"]
    assert arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                    "Qwen3ForCausalLM"), arch
    with open(sys.argv[3], "rb") as f:
        data = f.read()
    B, T = struct.unpack_from("<2i", data, 0)
    toks = torch.tensor(struct.unpack_from("<%di" % (2 * B * T), data, 8), dtype=torch.long)
    inputs, targets = toks[: B * T].view(B, T), toks[B * T:].view(B, T)

    model = ForCausalLM(cfg, arch).double()
    state = read_safetensors(sys.argv[2])
    model.load_state_dict(state, strict=True)
    if len(sys.argv) > 5 and sys.argv[4] == "hidden":
        with torch.no_grad():
            h = model.model.hidden_states(inputs)[int(sys.argv[5])]
        print("hidden", " ".join(repr(v) for v in h.flatten().tolist()))
        return
    forward_only = len(sys.argv) > 4 and sys.argv[4] == "forward"
    with torch.set_grad_enabled(not forward_only):
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, cfg["vocab_size"]), targets.reshape(-1))
    print("loss", repr(loss.item()))
    print("logits", " ".join(repr(v) for v in logits.flatten().tolist()))
    if forward_only:
        return
    loss.backward()
    for name, p in model.named_parameters():
        print(name, " ".join(repr(v) for v in p.grad.flatten().tolist()))


if __name__ == "__main__":
    main()
