#!/usr/bin/python3
"""Golden values for image::preprocess_anyres (tests/unit/test_llava_next_geometry.cpp): the pixel values
of transformers' LlavaNextImageProcessor (slow, PIL path) for the decoded images of
tests/data/golden/images (scripts/gen_image_golden.py's .rgb arrays), as a sha256 of the float32 bytes
plus the geometry and a few values, so the folder stays small.

Run it with /usr/bin/python3 (Debian's python3-pil and python3-numpy). `transformers` is not used: the
processor is transcribed below from image_processing_llava_next.py (get_image_patches,
_resize_for_patching, _pad_for_patching, divide_to_patches, preprocess) and image_processing_utils.py
(select_best_resolution, get_patch_output_size), on top of gen_image_golden.preprocess (the CLIP steps
of _preprocess):
  * best = select_best_resolution((H, W), pinpoints);
  * (nh, nw) = get_patch_output_size: the side with the smaller scale takes the target, the other
    min(math.ceil(side * scale), target); PIL resize((nw, nh), resample, reducing_gap=None) of the uint8 image;
  * np.pad with zeros: divmod(target - new, 2) before, plus the remainder after, on both axes;
  * divide_to_patches with patch_size = crop_size["height"], row by row;
  * the base image: PIL resize to (s, s), s = size["shortest_edge"] or min(size["height"], size["width"]);
  * [base] + patches each through the CLIP steps (resize, center crop, rescale, normalize), channels first.

Output: tests/data/golden/anyres/index.json
  {"variants": {name: preprocessor_config}, "cases": [{"image", "variant", "height", "width", "best",
   "n_tiles", "tile": [h, w], "sha256" (of the float32 LE bytes [n_tiles, 3, h, w]), "first": [8 floats]}]}

Usage: /usr/bin/python3 scripts/gen_anyres_golden.py
"""
import hashlib
import json
import math
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_image_golden import BASE, preprocess  # noqa: E402  (the CLIP steps, transcribed there)

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "..", "tests", "data", "golden", "images")
OUT = os.path.join(HERE, "..", "tests", "data", "golden", "anyres")

# LlavaNextImageProcessor configurations at a small scale: v1.6's pinpoints with 336 -> 16, and a
# {"height", "width"} size whose tiles are resized and cropped again by the CLIP steps.
VARIANTS = {
    "v16_small": {**BASE, "image_processor_type": "LlavaNextImageProcessor", "size": {"shortest_edge": 16},
                  "crop_size": {"height": 16, "width": 16},
                  "image_grid_pinpoints": [[16, 32], [32, 16], [32, 32], [48, 16], [16, 48]]},
    "hw": {**BASE, "image_processor_type": "LlavaNextImageProcessor", "size": {"height": 20, "width": 24},
           "crop_size": {"height": 16, "width": 16}, "image_grid_pinpoints": [[16, 32], [32, 16], [32, 32]]},
    "tiles8": {**BASE, "image_processor_type": "LlavaNextImageProcessor", "size": {"shortest_edge": 8},
               "crop_size": {"height": 8, "width": 8},
               "image_grid_pinpoints": [[8, 16], [16, 8], [16, 16], [24, 8], [8, 24]]},
    "wide": {**BASE, "image_processor_type": "LlavaNextImageProcessor", "size": {"shortest_edge": 16},
             "crop_size": {"height": 16, "width": 16},
             "image_grid_pinpoints": [[16, 48], [48, 16], [32, 64], [64, 32], [48, 48]]},
    "bilinear": {**BASE, "image_processor_type": "LlavaNextImageProcessor", "resample": 2,
                 "size": {"shortest_edge": 16}, "crop_size": {"height": 16, "width": 16},
                 "image_grid_pinpoints": [[16, 32], [32, 16], [32, 32]]},
}
CASES = ["jpeg_rgb_70x52", "l_33x47", "bit1_31x15", "jpeg_gray_40x33", "gray2_13x5", "jpeg_rgb_prog_57x43"]


def select_best_resolution(original_size, possible_resolutions):
    original_height, original_width = original_size
    best_fit, max_effective, min_wasted = None, 0, float("inf")
    for height, width in possible_resolutions:
        scale = min(width / original_width, height / original_height)
        dw, dh = int(original_width * scale), int(original_height * scale)
        effective = min(dw * dh, original_width * original_height)
        wasted = width * height - effective
        if effective > max_effective or (effective == max_effective and wasted < min_wasted):
            max_effective, min_wasted, best_fit = effective, wasted, (height, width)
    return best_fit


def get_patch_output_size(h, w, target):
    th, tw = target
    scale_w, scale_h = tw / w, th / h
    if scale_w < scale_h:
        return min(math.ceil(h * scale_w), th), tw
    return th, min(math.ceil(w * scale_h), tw)


def pil_resize(a, h, w, resample):
    return np.array(Image.fromarray(a).resize((w, h), resample=resample, reducing_gap=None))


def anyres(a, config):
    h, w = a.shape[:2]
    best = select_best_resolution((h, w), config["image_grid_pinpoints"])
    nh, nw = get_patch_output_size(h, w, best)
    resized = pil_resize(a, nh, nw, config["resample"])
    px, rx = divmod(best[1] - nw, 2)
    py, ry = divmod(best[0] - nh, 2)
    padded = np.pad(resized, ((py, py + ry), (px, px + rx), (0, 0)), mode="constant", constant_values=0)
    ps = config["crop_size"]["height"]
    patches = [padded[i:i + ps, j:j + ps] for i in range(0, best[0], ps) for j in range(0, best[1], ps)]
    size = config["size"]
    s = size["shortest_edge"] if "shortest_edge" in size else min(size["height"], size["width"])
    base = pil_resize(a, s, s, config["resample"])
    tiles = [preprocess(x, config, False) for x in [base] + patches]
    return best, np.stack(tiles).astype("<f4")


def main():
    images = {e["name"]: e for e in json.load(open(os.path.join(IMAGES, "index.json")))["images"]}
    os.makedirs(OUT, exist_ok=True)
    index = {"variants": VARIANTS, "cases": []}
    for name in CASES:
        e = images[name]
        a = np.fromfile(os.path.join(IMAGES, name + ".rgb"), dtype=np.uint8).reshape(e["height"], e["width"], 3)
        for v, config in VARIANTS.items():
            best, x = anyres(a, config)
            index["cases"].append({"image": name, "variant": v, "height": e["height"], "width": e["width"],
                                   "best": list(best), "n_tiles": x.shape[0], "tile": list(x.shape[2:]),
                                   "sha256": hashlib.sha256(x.tobytes()).hexdigest(),
                                   "first": [float(f) for f in x.reshape(-1)[:8]]})
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print(f"wrote {len(index['cases'])} cases to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
