#!/usr/bin/python3
"""Golden images for src/image (tests/unit/test_image.cpp): small PNG and JPEG files of many modes, the
RGB array PIL decodes from each, and the pixel values of transformers' CLIPImageProcessor (slow, PIL
path) for a few processor configurations.

Run it with /usr/bin/python3 (Debian's python3-pil and python3-numpy; the pyenv `python3` on PATH has
neither). `transformers` is not needed and not used: the processor is transcribed below from
transformers' image_processing_clip.py and image_transforms.py, in the same dtypes:
  * do_convert_rgb: PIL's Image.convert("RGB") (alpha and tRNS dropped, no compositing);
  * [LLaVA's image_aspect_ratio "pad": expand2square on a background of int(m * 255) per channel mean];
  * resize: get_resize_output_image_size(default_to_square=False) for {"shortest_edge": s}: the short
    side becomes s, the long side int(s * long / short); {"height", "width"} is taken as is. Then
    PIL Image.resize((w, h), resample, reducing_gap=None) on the uint8 RGB image (a copy when the size
    already matches);
  * center_crop: top = (H - h) // 2, left = (W - w) // 2; a smaller image is zero-padded first,
    ceil((h - H) / 2) above and ceil((w - W) / 2) to the left (uint8 zeros);
  * rescale: x.astype(float64) * rescale_factor, cast to float32;
  * normalize: (x - mean) / std with mean and std as float32 arrays, in float32;
  * channels first.

Outputs (tests/data/golden/images/, committed; the test needs no Python):
  <name>.png|.jpg          the image
  <name>.rgb               uint8 [H, W, 3] of Image.open(f).convert("RGB")
  <name>.<variant>.f32     float32 little-endian [3, h, w] of the processor for that variant
  index.json               {"variants": {variant: {"config": preprocessor_config, "pad_to_square": bool}},
                            "images": [{"name", "file", "height", "width", "mode", "variants": [...]}]}

Usage: /usr/bin/python3 scripts/gen_image_golden.py   (from anywhere; rewrites the folder)
"""
import io
import json
import math
import os
import shutil
import struct
import zlib

import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "golden", "images")

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# The llava-shapes-tiny preprocessor_config.json (../shared/models/llava-shapes-tiny), and variants.
BASE = {
    "image_processor_type": "CLIPImageProcessor",
    "do_resize": True,
    "size": {"shortest_edge": 64},
    "resample": 3,
    "do_center_crop": True,
    "crop_size": {"height": 64, "width": 64},
    "do_rescale": True,
    "rescale_factor": 0.00392156862745098,
    "do_normalize": True,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "do_convert_rgb": True,
}
VARIANTS = {
    "clip": (BASE, False),
    "pad": (BASE, True),
    "bilinear": ({**BASE, "resample": 2}, False),
    "hw": ({**BASE, "size": {"height": 48, "width": 80}, "crop_size": {"height": 56, "width": 72}}, False),
    "noresize": ({**BASE, "do_resize": False, "crop_size": {"height": 16, "width": 24}}, False),
}


# ---- the processor ---------------------------------------------------------------------------------

def expand2square(img, background):
    w, h = img.size
    if w == h:
        return img
    s = max(w, h)
    out = Image.new(img.mode, (s, s), background)
    out.paste(img, ((s - w) // 2, (s - h) // 2))
    return out


def output_size(h, w, size):
    if "shortest_edge" not in size:
        return size["height"], size["width"]
    s = size["shortest_edge"]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = s, int(s * long / short)
    return (new_long, new_short) if w <= h else (new_short, new_long)


def center_crop(a, ch, cw):  # a: [H, W, 3] uint8
    h, w = a.shape[:2]
    top, left = (h - ch) // 2, (w - cw) // 2
    if top >= 0 and left >= 0 and top + ch <= h and left + cw <= w:
        return a[top:top + ch, left:left + cw]
    nh, nw = max(ch, h), max(cw, w)
    padded = np.zeros((nh, nw, 3), dtype=a.dtype)
    tp, lp = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    padded[tp:tp + h, lp:lp + w] = a
    top, left = top + tp, left + lp
    return padded[max(0, top):min(nh, top + ch), max(0, left):min(nw, left + cw)]


def preprocess(rgb, config, pad):
    img = rgb
    if pad:
        img = expand2square(img, tuple(int(x * 255) for x in config["image_mean"]))
    a = np.array(img)
    if config["do_resize"]:
        oh, ow = output_size(a.shape[0], a.shape[1], config["size"])
        a = np.array(Image.fromarray(a).resize((ow, oh), resample=config["resample"], reducing_gap=None))
    if config["do_center_crop"]:
        a = center_crop(a, config["crop_size"]["height"], config["crop_size"]["width"])
    x = (a.astype(np.float64) * config["rescale_factor"]).astype(np.float32)
    x = (x - np.array(config["image_mean"], dtype=np.float32)) / np.array(config["image_std"], dtype=np.float32)
    assert x.dtype == np.float32
    return np.ascontiguousarray(x.transpose(2, 0, 1))


# ---- test images -----------------------------------------------------------------------------------

RNG = np.random.default_rng(27)


def pattern(h, w, channels=3):
    """Smooth gradients plus noise and a hard edge: exercises the filters' rounding and clipping."""
    y, x = np.mgrid[0:h, 0:w]
    planes = []
    for c in range(channels):
        g = 127.5 + 100 * np.sin((x + 1) * (0.3 + 0.2 * c) + (y + 1) * (0.17 + 0.1 * c))
        g = g + RNG.normal(0, 20, (h, w))
        g[(x + 2 * y + c) % 11 < 2] = 255 if c % 2 else 0
        planes.append(g)
    return np.clip(np.rint(np.stack(planes, -1)), 0, 255).astype(np.uint8)


def raw_png(w, h, color_type, bit_depth, rows, extra=b"", interlace=0):
    """A PNG written by hand (PIL cannot write 16-bit colour, 2-bit gray or interlaced PNGs): rows are
    bytes without the filter byte (for Adam7, the rows of every pass in order); filter 0 (None) on every
    row."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, interlace)
    data = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(data, 9)) +
            chunk(b"IEND", b""))


def adam7_rows(a):
    """The rows of the seven Adam7 passes of an 8-bit image [H, W, C] (empty passes have no rows)."""
    rows = []
    for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)]:
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            rows += [r.tobytes() for r in sub]
    return rows


def png_of(img, **kw):
    b = io.BytesIO()
    img.save(b, "PNG", **kw)
    return b.getvalue()


def jpeg_of(img, **kw):
    b = io.BytesIO()
    img.save(b, "JPEG", **kw)
    return b.getvalue()


def images():
    """(name, extension, bytes, variants)."""
    yield "rgb_1x1", "png", png_of(Image.fromarray(pattern(1, 1))), ["clip", "hw", "noresize"]
    yield "rgb_3x7", "png", png_of(Image.fromarray(pattern(7, 3))), ["clip", "pad", "bilinear", "noresize"]
    yield "rgb_70x52", "png", png_of(Image.fromarray(pattern(52, 70))), ["clip", "bilinear", "hw", "noresize"]
    yield "rgb_96x120", "png", png_of(Image.fromarray(pattern(120, 96))), ["clip", "pad", "noresize"]
    yield "rgb_200x33", "png", png_of(Image.fromarray(pattern(33, 200))), ["clip", "pad"]
    yield "rgb_64x64", "png", png_of(Image.fromarray(pattern(64, 64))), ["clip", "bilinear"]
    yield "rgb_10x8", "png", png_of(Image.fromarray(pattern(8, 10))), ["clip", "noresize"]
    yield "rgba_45x30", "png", png_of(Image.fromarray(np.dstack([pattern(30, 45), pattern(30, 45, 1)]), "RGBA")), \
        ["clip"]
    yield "l_33x47", "png", png_of(Image.fromarray(pattern(47, 33, 1)[..., 0], "L")), ["clip"]
    yield "la_20x25", "png", png_of(Image.fromarray(pattern(25, 20, 2), "LA")), ["clip"]
    p = Image.fromarray(pattern(40, 50)).quantize(colors=37)
    yield "p_50x40", "png", png_of(p), ["clip"]
    pt = Image.fromarray(pattern(23, 37)).quantize(colors=16)
    yield "p_trns_37x23", "png", png_of(pt, transparency=bytes(range(0, 256, 16))), ["clip"]
    p4 = Image.fromarray(pattern(9, 17)).quantize(colors=12)
    yield "p4bit_17x9", "png", png_of(p4, bits=4), ["clip"]
    yield "bit1_31x15", "png", png_of(Image.fromarray(pattern(15, 31, 1)[..., 0] > 128).convert("1")), ["clip"]
    gray16 = (pattern(11, 23, 1)[..., 0].astype(np.uint32) * RNG.integers(0, 3, (11, 23)) * 37).astype(np.uint16)
    yield "gray16_23x11", "png", raw_png(23, 11, 0, 16, [r.astype(">u2").tobytes() for r in gray16]), ["clip"]
    rgb16 = (pattern(21, 19).astype(np.uint16) << 8) | pattern(21, 19)
    yield "rgb16_19x21", "png", raw_png(19, 21, 2, 16, [r.astype(">u2").tobytes() for r in rgb16]), ["clip"]
    rgba16 = (pattern(12, 14, 4).astype(np.uint16) << 8) | pattern(12, 14, 4)
    yield "rgba16_14x12", "png", raw_png(14, 12, 6, 16, [r.astype(">u2").tobytes() for r in rgba16]), ["clip"]
    la16 = (pattern(9, 16, 2).astype(np.uint16) << 8) | pattern(9, 16, 2)
    yield "la16_16x9", "png", raw_png(16, 9, 4, 16, [r.astype(">u2").tobytes() for r in la16]), ["clip"]
    g2 = pattern(5, 13, 1)[..., 0] >> 6  # 2-bit gray, packed four to a byte
    rows2 = [np.packbits(np.unpackbits(r.astype(np.uint8)[:, None], axis=1)[:, 6:].reshape(-1)).tobytes() for r in g2]
    yield "gray2_13x5", "png", raw_png(13, 5, 0, 2, rows2), ["clip"]
    yield "rgb_adam7_29x19", "png", raw_png(29, 19, 2, 8, adam7_rows(pattern(19, 29)), interlace=1), ["clip"]
    yield "jpeg_rgb_70x52", "jpg", jpeg_of(Image.fromarray(pattern(52, 70)), quality=90), ["clip", "pad"]
    yield "jpeg_rgb_prog_57x43", "jpg", jpeg_of(Image.fromarray(pattern(43, 57)), quality=75, progressive=True), \
        ["clip"]
    yield "jpeg_rgb444_24x18", "jpg", jpeg_of(Image.fromarray(pattern(18, 24)), quality=95, subsampling=0), ["clip"]
    yield "jpeg_rgb444_prog_16x12", "jpg", jpeg_of(Image.fromarray(pattern(12, 16)), quality=85, subsampling=0,
                                                  progressive=True), ["clip"]
    yield "jpeg_gray_40x33", "jpg", jpeg_of(Image.fromarray(pattern(33, 40, 1)[..., 0], "L")), ["clip"]
    yield "jpeg_cmyk_30x20", "jpg", jpeg_of(Image.fromarray(pattern(20, 30, 4), "CMYK"), quality=90), ["clip"]


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    index = {"variants": {k: {"config": c, "pad_to_square": p} for k, (c, p) in VARIANTS.items()}, "images": []}
    for name, ext, data, variants in images():
        fname = f"{name}.{ext}"
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(data)
        im = Image.open(io.BytesIO(data))
        mode = im.mode
        rgb = im.convert("RGB")
        a = np.asarray(rgb, dtype=np.uint8)
        a.tofile(os.path.join(OUT, f"{name}.rgb"))
        for v in variants:
            config, pad = VARIANTS[v]
            preprocess(rgb, config, pad).astype("<f4").tofile(os.path.join(OUT, f"{name}.{v}.f32"))
        index["images"].append({"name": name, "file": fname, "height": a.shape[0], "width": a.shape[1],
                                "mode": mode, "variants": variants})
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {len(index['images'])} images, {total} bytes, to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
