#!/usr/bin/python3
"""Reference for the distillation tests (tests/test-layers-kl.c, tests/test-distill-models.c):
the same losses in float64 PyTorch.

    torch_distill_ref.py SPEC.json INPUTS.bin OUT.bin

SPEC (JSON) has "mode" and the sizes; INPUTS holds float32/int32 arrays in the order each mode
reads them; OUT receives float64 values in the order each mode returns them.

  kl   cases [{"N", "V", "tau"}], each reading student [N*V] and teacher [N*V] logits and
       writing KL(softmax(t/tau) || softmax(s/tau)) per row [N], then d(sum_n KL_n)/ds.
  gpt  a GPT-2 student and teacher (.safetensors, Hugging Face names) on tokens [B*T] and
       targets [B*T]: writes the teacher term tau^2 mean KL, the cross-entropy, the mixed loss,
       then the gradient of every student tensor in the order of "names".
  llama  a llama-family student and teacher, each a folder (config.json, model.safetensors)
       read by tests/torch_llama_ref.py's LlamaForCausalLM / Qwen3ForCausalLM (strict names), on
       tokens [B*T] and targets [B*T]: writes what gpt writes.
  dit  a DiT student and teacher (tests/torch_dit_ref.py's module) on x_t [B*D], t [B],
       labels [B] int32, target [B*D]: writes the velocity MSE to the teacher's (guided by
       cfg_scale) velocity, the MSE to target, the mixed loss, then the student's gradients.
  resnet  a ResNet student and teacher (tests/torch_resnet_model.py's module, loading our files
       with strict=True) on images [B*C*H*W] and labels [B] int32: the student in training
       mode (batch statistics), the teacher in evaluation mode (running statistics); writes
       the teacher term tau^2 mean KL, the cross-entropy, the mixed loss, then the student's
       gradients in the order of "names".
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_dit_ref import DiT, read_safetensors  # noqa: E402
from torch_resnet_model import ResNet  # noqa: E402
from torch_resnet_model import read_safetensors as read_resnet  # noqa: E402


class Reader:
    def __init__(self, data):
        self.data, self.off = data, 0

    def floats(self, n):
        v = struct.unpack_from("<%df" % n, self.data, self.off)
        self.off += 4 * n
        return torch.tensor(v, dtype=torch.float64)

    def ints(self, n):
        v = struct.unpack_from("<%di" % n, self.data, self.off)
        self.off += 4 * n
        return torch.tensor(v, dtype=torch.long)


def kl_rows(student, teacher, tau):
    """KL(p || q) per row, p = softmax(teacher / tau), q = softmax(student / tau)."""
    logp = F.log_softmax(teacher / tau, dim=-1)
    logq = F.log_softmax(student / tau, dim=-1)
    return (logp.exp() * (logp - logq)).sum(dim=-1)


def mode_kl(spec, rd):
    out = []
    for case in spec["cases"]:
        N, V, tau = case["N"], case["V"], case["tau"]
        s = rd.floats(N * V).view(N, V).requires_grad_(True)
        t = rd.floats(N * V).view(N, V)
        kl = kl_rows(s, t, tau)
        kl.sum().backward()
        out += kl.tolist() + s.grad.flatten().tolist()
    return out


def gpt_logits(p, L, H, tokens):
    """The GPT-2 forward of tests/torch_gpt_ref.py over named Hugging Face tensors."""
    B, T = tokens.shape
    C = p["wte.weight"].shape[1]
    hd = C // H
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    for i in range(L):
        g = lambda n: p["h.%d.%s" % (i, n)]  # noqa: E731
        h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
        q, k, v = (h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (z.view(B, T, H, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
        h = F.gelu(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte.weight"].t()


def mode_gpt(spec, rd):
    B, T = spec["B"], spec["T"]
    alpha, tau = spec["alpha"], spec["tau"]
    tokens, targets = rd.ints(B * T).view(B, T), rd.ints(B * T).view(B, T)
    student = read_safetensors(spec["student"])
    teacher = read_safetensors(spec["teacher"])
    for v in student.values():
        v.requires_grad_(True)
    s = gpt_logits(student, spec["student_layers"], spec["student_heads"], tokens)
    t = gpt_logits(teacher, spec["teacher_layers"], spec["teacher_heads"], tokens)
    V = s.shape[-1]
    distill = tau * tau * kl_rows(s.view(-1, V), t.view(-1, V), tau).mean()
    task = F.cross_entropy(s.view(-1, V), targets.view(-1))
    loss = alpha * distill + (1 - alpha) * task
    loss.backward()
    out = [distill.item(), task.item(), loss.item()]
    for name in spec["names"]:
        out += student[name].grad.flatten().tolist()
    return out


def llama_model(folder):
    """The folder's model in float64 (tests/torch_llama_ref.py), its weights loaded strictly."""
    import torch_llama_ref

    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    (arch,) = config["architectures"]
    model = torch_llama_ref.ForCausalLM(config, arch).double()
    model.load_state_dict(
        torch_llama_ref.read_safetensors(os.path.join(folder, "model.safetensors")), strict=True)
    return model


def mode_llama(spec, rd):
    B, T = spec["B"], spec["T"]
    alpha, tau = spec["alpha"], spec["tau"]
    tokens, targets = rd.ints(B * T).view(B, T), rd.ints(B * T).view(B, T)
    student, teacher = llama_model(spec["student"]), llama_model(spec["teacher"])
    s = student(tokens)
    with torch.no_grad():
        t = teacher(tokens)
    V = s.shape[-1]
    distill = tau * tau * kl_rows(s.view(-1, V), t.view(-1, V), tau).mean()
    task = F.cross_entropy(s.view(-1, V), targets.view(-1))
    loss = alpha * distill + (1 - alpha) * task
    loss.backward()
    out = [distill.item(), task.item(), loss.item()]
    params = dict(student.named_parameters())
    for name in spec["names"]:
        out += params[name].grad.flatten().tolist()
    return out


def load_dit(path, shape):
    model = DiT(*shape).double()
    model.load_state_dict(read_safetensors(path), strict=True)
    return model


def mode_dit(spec, rd):
    B, size, ch, classes = spec["B"], spec["image_size"], spec["channels"], spec["num_classes"]
    alpha, w = spec["alpha"], spec["cfg_scale"]
    D = ch * size * size
    x_t = rd.floats(B * D).view(B, ch, size, size)
    t = rd.floats(B)
    y = rd.ints(B)
    target = rd.floats(B * D).view(B, ch, size, size)
    student = load_dit(spec["student"], spec["student_shape"])
    teacher = load_dit(spec["teacher"], spec["teacher_shape"])
    with torch.no_grad():
        v_cond = teacher(x_t, 1000.0 * t, y)
        v_unc = teacher(x_t, 1000.0 * t, torch.full_like(y, classes))
        v_teacher = v_unc + w * (v_cond - v_unc) if w != 1 else v_cond
    pred = student(x_t, 1000.0 * t, y)
    mse = lambda a, b: ((a - b) ** 2).flatten(1).mean(dim=1).mean()  # noqa: E731
    distill, task = mse(pred, v_teacher), mse(pred, target)
    loss = alpha * distill + (1 - alpha) * task
    loss.backward()
    params = dict(student.named_parameters())
    out = [distill.item(), task.item(), loss.item()]
    for name in spec["names"]:
        out += params[name].grad.flatten().tolist()
    return out


def load_resnet(path, shape, spec):
    """shape: [n, width]; BatchNorm momentum and image sizes from the spec."""
    model = ResNet(shape[0], shape[1], spec["channels"], spec["num_classes"],
                   momentum=spec["bn_momentum"]).double()
    model.load_state_dict(read_resnet(path)[0], strict=True)
    return model


def mode_resnet(spec, rd):
    B, size, ch = spec["B"], spec["image_size"], spec["channels"]
    alpha, tau = spec["alpha"], spec["tau"]
    x = rd.floats(B * ch * size * size).view(B, ch, size, size)
    y = rd.ints(B)
    student = load_resnet(spec["student"], spec["student_shape"], spec).train()
    teacher = load_resnet(spec["teacher"], spec["teacher_shape"], spec).eval()
    with torch.no_grad():
        t = teacher(x)
    s = student(x)
    distill = tau * tau * kl_rows(s, t, tau).mean()
    task = F.cross_entropy(s, y)
    loss = alpha * distill + (1 - alpha) * task
    loss.backward()
    params = dict(student.named_parameters())
    out = [distill.item(), task.item(), loss.item()]
    for name in spec["names"]:
        out += params[name].grad.flatten().tolist()
    return out


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    with open(sys.argv[2], "rb") as f:
        rd = Reader(f.read())
    modes = {"kl": mode_kl, "gpt": mode_gpt, "llama": mode_llama, "dit": mode_dit, "resnet": mode_resnet}
    out = modes[spec["mode"]](spec, rd)
    assert rd.off == len(rd.data), "inputs left unread"
    with open(sys.argv[3], "wb") as f:
        f.write(struct.pack("<%dd" % len(out), *out))


if __name__ == "__main__":
    main()
