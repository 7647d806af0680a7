#!/usr/bin/python3
"""torchvision's image transforms as the reference of tests/test-image-transforms.c.

    torch_transforms_ref.py make FOLDER
        writes FOLDER/a/0.png (40x30 RGB) and FOLDER/b/1.png (27x45 RGB) of random pixels
    torch_transforms_ref.py eval FOLDER RESIZE SIZE MEAN STD OUT
        each image (dataset order) through Resize(RESIZE), CenterCrop(SIZE), ToTensor(),
        Normalize(MEAN, STD) (comma-separated), written as float32 [C, SIZE, SIZE] to OUT
    torch_transforms_ref.py crop FOLDER RESIZE SIZE MEAN STD PARAMS OUT
        per line of PARAMS ("image top left h w flip"), that image through Resize(RESIZE),
        CenterCrop(RESIZE) (the square the training crops come from), F.resized_crop(top, left,
        h, w, [SIZE, SIZE]), F.hflip where flip is 1, ToTensor(), Normalize; float32 to OUT
"""
import os
import sys

import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image


def images(folder):
    out = []
    for c in sorted(os.listdir(folder)):
        d = os.path.join(folder, c)
        out += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    return out


def floats(s):
    return [float(v) for v in s.split(",")]


def main():
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "make":
        g = torch.Generator().manual_seed(3)
        for cls, name, (w, h) in (("a", "0.png", (40, 30)), ("b", "1.png", (27, 45))):
            os.makedirs(os.path.join(folder, cls), exist_ok=True)
            px = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8)
            Image.fromarray(px.numpy(), "RGB").save(os.path.join(folder, cls, name))
        return
    resize, size = int(sys.argv[3]), int(sys.argv[4])
    norm = T.Compose([T.ToTensor(), T.Normalize(floats(sys.argv[5]), floats(sys.argv[6]))])
    out = []
    if mode == "eval":
        tf = T.Compose([T.Resize(resize), T.CenterCrop(size)])
        for p in images(folder):
            out.append(norm(tf(Image.open(p).convert("RGB"))))
    else:
        with open(sys.argv[7]) as f:
            params = [[int(v) for v in line.split()] for line in f if line.strip()]
        square = T.Compose([T.Resize(resize), T.CenterCrop(resize)])
        files = images(folder)
        for i, top, left, h, w, flip in params:
            img = F.resized_crop(square(Image.open(files[i]).convert("RGB")), top, left, h, w,
                                 [size, size], T.InterpolationMode.BILINEAR)
            out.append(norm(F.hflip(img) if flip else img))
    with open(sys.argv[-1], "wb") as f:
        for t in out:
            f.write(t.contiguous().numpy().astype("float32").tobytes())


if __name__ == "__main__":
    main()
