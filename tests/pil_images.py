"""Reference for test-images: an ImageFolder-layout folder through Pillow with torchvision's
Resize(size) + CenterCrop(size) arithmetic, written as uint8 [C, H, W] images in dataset
order (classes sorted, files sorted within each; a flat folder when there are no
subfolders).

usage: pil_images.py FOLDER SIZE L|RGB OUT
"""
import os
import sys
import warnings

from PIL import Image

# Pillow warns that palette transparency is dropped by convert("RGB"): that is the point.
warnings.filterwarnings("ignore", category=UserWarning)

EXTS = (".png", ".jpg", ".jpeg")


def files_of(folder):
    names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    classes = [n for n in names if os.path.isdir(os.path.join(folder, n))]
    if not classes:
        return [os.path.join(folder, n) for n in names if n.lower().endswith(EXTS)]
    out = []
    for c in classes:
        d = os.path.join(folder, c)
        out += [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.lower().endswith(EXTS)]
    return out


def fit(img, size):
    # torchvision.transforms.functional.resize with an int size: the shorter side to size,
    # the longer int(size * long / short); PIL BILINEAR (antialiased) as torchvision uses.
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(size * long / short)
    nw, nh = (size, new_long) if w <= h else (new_long, size)
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.BILINEAR)
    # torchvision.transforms.functional.center_crop
    top = int(round((nh - size) / 2.0))
    left = int(round((nw - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def main():
    folder, size, mode, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(out, "wb") as f:
        for path in files_of(folder):
            img = fit(Image.open(path).convert(mode), size)
            data = img.tobytes()
            channels = len(mode)
            for c in range(channels):
                f.write(data[c::channels])


main()
