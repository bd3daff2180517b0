"""Writes safetensors files with Python's `safetensors` and `transformers` for
base/safetensors_test.cc: libkd must read them with the right values and write the same bytes.

Writes, next to this file:
  safetensors_python.safetensors   safetensors.torch.save_file of one tensor of each dtype libkd
                                   reads, a scalar and an empty tensor, metadata {"format": "pt"}
  safetensors_hf_sharded/          transformers' save_pretrained of a tiny GPT-2 in shards of at
                                   most 1000 bytes: model-0000i-of-0000n.safetensors and
                                   model.safetensors.index.json (config.json dropped)
  safetensors_hf_sharded.expected.json
                                   the GPT-2's state dict as save_pretrained took it: names in
                                   order, shapes, dtypes

Every value is a formula of its flat index i, which the C++ test computes itself:
  floats (F64 F32 F16 BF16 F8_E4M3 F8_E5M2)  (i - 2.5) * 0.5
  C64                                       (i - 2.5) * 0.5 + i * 1j
  signed ints (I8 I16 I32 I64)              (i - 3) * 7
  unsigned ints (U8 U16 U32 U64)            i * 40 + 3
  BOOL                                      i % 3 == 0
  i64_big                                   [2**62 + 1, -(2**62) - 3]
  scalar (F32, shape [])                    3.5
  GPT-2's tensors (F32)                     ((i % 17) - 8) * 0.125
all exact in their dtypes.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_safetensors_fixtures.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file

HERE = (os.path.join(os.environ["BUILD_WORKSPACE_DIRECTORY"], "tests", "testdata")
        if os.environ.get("BUILD_WORKSPACE_DIRECTORY") else
        os.path.dirname(os.path.abspath(__file__)))

FLOATS = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16,
          "bf16": torch.bfloat16, "f8_e4m3": torch.float8_e4m3fn, "f8_e5m2": torch.float8_e5m2}
SIGNED = {"i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64}
UNSIGNED = {"u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32, "u64": torch.uint64}


def all_dtypes():
    i = torch.arange(6, dtype=torch.float64)
    tensors = {}
    for name, dtype in FLOATS.items():
        tensors[name] = ((i - 2.5) * 0.5).to(dtype).reshape(2, 3)
    tensors["c64"] = torch.complex((i - 2.5) * 0.5, i).to(torch.complex64).reshape(2, 3)
    for name, dtype in SIGNED.items():
        tensors[name] = ((torch.arange(6) - 3) * 7).to(dtype).reshape(2, 3)
    for name, dtype in UNSIGNED.items():
        tensors[name] = (torch.arange(6) * 40 + 3).to(dtype).reshape(2, 3)
    tensors["bool"] = (torch.arange(6) % 3 == 0).reshape(2, 3)
    tensors["i64_big"] = torch.tensor([2**62 + 1, -(2**62) - 3], dtype=torch.int64)
    tensors["scalar"] = torch.tensor(3.5, dtype=torch.float32)
    tensors["empty"] = torch.zeros(0, 4, dtype=torch.float32)
    return tensors


def hf_sharded(folder):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=8, n_positions=4, n_embd=4, n_layer=1, n_head=1)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in model.state_dict().values():
            flat = torch.arange(p.numel(), dtype=torch.float64)
            p.copy_((((flat % 17) - 8) * 0.125).reshape(p.shape))
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder, max_shard_size=1000)
    for name in os.listdir(folder):
        if name.startswith("model"):
            os.chmod(os.path.join(folder, name), 0o644)
        else:
            os.remove(os.path.join(folder, name))
    # The tensors in the order save_pretrained split them: the index's weight_map, each shard's
    # header.
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    state = model.state_dict()
    return [{"name": name, "shape": list(state[name].shape), "dtype": "F32"}
            for name in state if name in weight_map]


def main():
    path = os.path.join(HERE, "safetensors_python.safetensors")
    save_file(all_dtypes(), path, metadata={"format": "pt"})
    os.chmod(path, 0o644)  # safetensors writes 0600
    expected = hf_sharded(os.path.join(HERE, "safetensors_hf_sharded"))
    with open(os.path.join(HERE, "safetensors_hf_sharded.expected.json"), "w") as f:
        # One tensor a line.
        f.write('{"tensors": [\n' + ",\n".join(json.dumps(t) for t in expected) + "\n]}\n")


if __name__ == "__main__":
    main()
