#!/usr/bin/python3
"""PyTorch weight files for tests/test-torch-file.c, made with torch.save, and PyTorch's own
verdict on each: torch.load(weights_only=True) accepts it or refuses it.

    torch_pth_files.py OUTDIR

writes into OUTDIR:
  dtypes.pth      a state dict of float32, float64, float16, bfloat16, int64 (0-d), int32,
                  a transposed view, two views of one storage, an empty tensor, a Parameter
  checkpoint.pth  {"epoch": 3, "state_dict": {...}} (a training checkpoint)
  os_system.pth, builtins_eval.pth, counter.pth, module.pth
                  pickles that call os.system, builtins.eval, build a collections.Counter,
                  or hold a whole nn.Linear (torch.save(model))
  legacy.pth      the pre-1.6 format (_use_new_zipfile_serialization=False)
  protocol4.pth   a state dict pickled with protocol 4
  deflated.pth    dtypes.pth re-packed with deflate compression
  values.txt      per tensor of dtypes.pth: "name ndim shape… : values as float32…"
  verdicts.txt    per file: "name accept" or "name refuse" from torch.load(weights_only=True)
  allowlist.txt   the globals torch.load(weights_only=True) allows, one per line
Nothing in the malicious files runs here: they are only saved; the test checks the marker
file that os.system would have created does not appear when Cohort reads them.
"""
import collections
import os
import sys
import zipfile

import torch
import torch._weights_only_unpickler as wou


class Call:
    """An object whose pickle calls fn(*args) when loaded."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def state_dict():
    g = torch.Generator().manual_seed(5)
    sd = collections.OrderedDict()
    sd["f32"] = torch.randn(2, 3, generator=g)
    sd["f64"] = torch.randn(3, generator=g, dtype=torch.float64)
    sd["f16"] = torch.tensor([1.5, -2.0, 65504.0, 6e-8], dtype=torch.float16)
    sd["bf16"] = torch.randn(2, 2, generator=g).to(torch.bfloat16)
    sd["count"] = torch.tensor(7, dtype=torch.int64)
    sd["i32"] = torch.tensor([-3, 0, 2147483], dtype=torch.int32)
    base = torch.arange(12, dtype=torch.float32).view(3, 4)
    sd["transposed"] = base.t()  # strides (1, 4) over the same storage
    sd["rows"] = base[1:]        # offset 4 into it
    sd["empty"] = torch.zeros(0, 5)
    sd["param"] = torch.nn.Parameter(torch.randn(4, generator=g))
    return sd


def verdict(path):
    try:
        torch.load(path, weights_only=True)
        return "accept"
    except Exception:  # noqa: BLE001 - any refusal counts
        return "refuse"


def main():
    out = sys.argv[1]
    sd = state_dict()
    files = {}

    def save(name, obj, **kw):
        path = os.path.join(out, name)
        torch.save(obj, path, **kw)
        files[name] = path

    save("dtypes.pth", sd)
    save("checkpoint.pth", {"epoch": 3, "state_dict": collections.OrderedDict(
        [(k, sd[k]) for k in ("f32", "count")])})
    marker = os.path.join(out, "MARKER")
    save("os_system.pth", {"w": Call(os.system, ("touch " + marker,))})
    save("builtins_eval.pth", {"w": Call(eval, ("__import__('os').system('touch %s')" % marker,))})
    save("counter.pth", collections.Counter({"a": 1}))
    save("module.pth", torch.nn.Linear(2, 2))
    save("legacy.pth", sd, _use_new_zipfile_serialization=False)
    save("protocol4.pth", sd, pickle_protocol=4)
    deflated = os.path.join(out, "deflated.pth")
    with zipfile.ZipFile(files["dtypes.pth"]) as src, \
            zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    files["deflated.pth"] = deflated

    with open(os.path.join(out, "values.txt"), "w") as f:
        for name, t in sd.items():
            v = t.detach().to(torch.float32).flatten().tolist()
            f.write("%s %d %s : %s\n" % (name, t.dim(), " ".join(str(s) for s in t.shape),
                                         " ".join(repr(x) for x in v)))
    with open(os.path.join(out, "verdicts.txt"), "w") as f:
        for name, path in files.items():
            f.write("%s %s\n" % (name, verdict(path)))
    assert not os.path.exists(marker)
    with open(os.path.join(out, "allowlist.txt"), "w") as f:
        for name in sorted(wou._get_allowed_globals()):
            f.write(name + "\n")


if __name__ == "__main__":
    main()
