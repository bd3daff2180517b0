"""Small JPEG and PNG files in every form a decoder meets, and what PIL (Pillow, the pinned venv's,
as torchvision's ImageFolder reads images) decodes each to with .convert("RGB"), for
distill/data/image_codec_test.cc. Writes tests/testdata/images/<name>.<jpg|png> and
tests/testdata/images/expected.json: {name: {"file", "width", "height", "rgb": hex of the
height x width x 3 bytes}}. Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_image_fixtures.py
"""
import json
import os
import struct
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "images")
W, H = 29, 17


def picture(channels, seed, dtype=np.uint8, top=255):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W]
    base = np.stack([(x * 9 + y * 3 + 40 * c) % (top + 1) for c in range(channels)], -1)
    noise = rng.integers(0, max(2, (top + 1) // 8), size=(H, W, channels))
    return np.clip(base + noise, 0, top).astype(dtype)


def write_png16(path, pixels):
    """A 16-bit PNG (colour type 2 with 3 channels, 0 with 1), written here: Pillow writes none."""
    height, width, channels = pixels.shape

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\0" + pixels[y].astype(">u2").tobytes() for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 16, 2 if channels == 3 else 0, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def main():
    os.makedirs(OUT, exist_ok=True)
    rgb = Image.fromarray(picture(3, 1))
    made = {
        "rgb_420.jpg": lambda p: rgb.save(p, quality=90),  # 4:2:0 subsampling, Pillow's default
        "rgb_444.jpg": lambda p: rgb.save(p, quality=95, subsampling=0),
        "rgb_progressive.jpg": lambda p: rgb.save(p, quality=85, progressive=True),
        "gray.jpg": lambda p: Image.fromarray(picture(1, 2)[..., 0]).save(p, quality=90),
        "rgb8.png": lambda p: rgb.save(p),
        "rgba8.png": lambda p: Image.fromarray(picture(4, 3), "RGBA").save(p),
        "gray8.png": lambda p: Image.fromarray(picture(1, 4)[..., 0]).save(p),
        "gray_alpha8.png": lambda p: Image.fromarray(picture(2, 5), "LA").save(p),
        "bilevel.png": lambda p: Image.fromarray(picture(1, 6)[..., 0] > 128).save(p),
        "palette.png": lambda p: rgb.convert("P", palette=Image.ADAPTIVE, colors=16).save(p),
        "palette_trns.png": lambda p: rgb.convert("P", palette=Image.ADAPTIVE, colors=16).save(
            p, transparency=3),
        "rgb16.png": lambda p: write_png16(p, picture(3, 7, np.uint16, 65535)),
        "gray16.png": lambda p: write_png16(p, picture(1, 8, np.uint16, 1023)),
    }
    expected = {}
    for name, save in made.items():
        path = os.path.join(OUT, name)
        save(path)
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        expected[name.rsplit(".", 1)[0]] = {"file": name, "width": pixels.shape[1],
                                           "height": pixels.shape[0],
                                           "rgb": pixels.tobytes().hex()}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
