r"""Records what Python's sentencepiece and torch give, for libkd's SentencePiece tests
(distill/data/sentencepiece_test.cc, text_corpus_test.cc), and checks //tools:tokenize's output.

Needs the venv's torch and the PyPI `sentencepiece` package (pip install sentencepiece; 0.2.3
recorded these), and the tool's output on Debian's fortunes corpus:

  bazel run //tools:tokenize -- --corpus=/usr/share/games/fortunes --out_dir=/tmp/spm1024 \
      --vocab_size=1024 --seed=1
  ~/.cache/libkd/venv/bin/python tests/testdata/make_sentencepiece_fixtures.py \
      --tokenized=/tmp/spm1024 [--corpus=/usr/share/games/fortunes]

It
1. reads the corpus as kd::ReadFortunes does and splits it with torch.utils.data.random_split
   (the split kd::SplitDocuments promises), encodes each split with Python's sentencepiece on the
   tool's tokenizer.model, each document followed by eos, and checks the tool's train.bin,
   val.bin and test.bin and meta.json hold exactly that (the whole C++ path against Python's);
2. copies tokenizer.model to sentencepiece/fortunes_bpe1024.model and writes
   sentencepiece/expected.json: Python's ids and decodings of fixed texts (as hex, since some are
   not UTF-8), random_split's parts of small lists, and the corpus's document count.
"""
import argparse
import json
import os
import shutil
import sys

import sentencepiece as spm
import torch
from torch.utils.data import random_split

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "sentencepiece")

TEXTS = [
    b"Hello world.",
    b"",
    b" ",
    b" leading space",
    b"  two leading spaces",
    b"trailing space ",
    b"a  b   c    d",
    b"tab\tseparated\tcolumns",
    b"line one\nline two\n",
    b"\n\nblank lines first",
    "\u00dcn\u00efc\u00f6d\u00e9: stra\u00dfe, caf\u00e9, na\u00efve".encode(),
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8".encode(),
    "emoji \U0001F600\U0001F44D\U0001F3FD done".encode(),
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u041f\u0440\u0438\u0432\u0435\u0442".encode(),
    b"Call 555-1234 in 2024; pi = 3.14159",
    b"_\bW_\bo_\br_\bd overstruck",
    b"control \x01\x02\x7f bytes and a NUL \x00 here",
    b"bad \xff\xfe bytes, a cut \xe2\x82 char, a surrogate \xed\xa0\x80 and overlong \xc0\xaf",
    b"<s> </s> <unk> <0x41> literal specials",
    "\u2581 the block \u2581\u2581 itself".encode(),
    "U+FFFD \ufffd itself".encode(),
    b"   ",
    b"x",
    b"The quick brown fox jumps over the lazy dog. " * 8,
    # Runs of one character: equal-scored merges, which BPE takes leftmost first.
    b"Wow!!!!! Hmm..... ---- ===== ______ 11111 aaaaaaa eeeee",
    b"     five spaces, then      six",
]


def read_fortunes(path, separator="%"):
    """kd::ReadFortunes: every regular file without an extension, in name order."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if "." not in n and not os.path.islink(os.path.join(path, n))
                       and os.path.isfile(os.path.join(path, n)))
    else:
        files = [path]
    documents = []
    for f in files:
        with open(f, "rb") as fh:
            documents += split_separated(fh.read(), separator.encode())
    return documents


def split_separated(text, separator):
    """kd::SplitSeparatedText on bytes."""
    documents, current = [], None
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for line in lines:
        if (line[:-1] if line.endswith(b"\r") else line) == separator:
            if current:
                documents.append(current)
            current = None
            continue
        current = line if current is None else current + b"\n" + line
    if current:
        documents.append(current)
    return documents


def check_tokenized(folder, corpus, sp):
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    documents = read_fortunes(corpus)
    g = torch.Generator().manual_seed(meta["seed"])
    parts = random_split(documents, meta["split"], generator=g)
    dtype = {"uint16": "<u2", "uint32": "<u4"}[meta["dtype"]]
    width = 2 if meta["dtype"] == "uint16" else 4
    for name, part in zip(["train", "val", "test"], parts):
        expected = []
        for i in part.indices:
            expected += sp.encode(documents[i]) + [sp.eos_id()]
        with open(os.path.join(folder, name + ".bin"), "rb") as f:
            data = f.read()
        got = [int.from_bytes(data[k:k + width], "little") for k in range(0, len(data), width)]
        info = meta["splits"][name]
        assert got == expected, f"{name}.bin differs from Python's encoding"
        assert info["tokens"] == len(expected) and info["documents"] == len(part)
        assert info["bytes"] == sum(len(documents[i]) for i in part.indices)
        print(f"{name}.bin: {len(part)} documents, {len(expected)} tokens: equal to Python's")
    assert meta["vocab_size"] == sp.vocab_size() and meta["eos_id"] == sp.eos_id()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenized", required=True, help="//tools:tokenize's --out_dir")
    parser.add_argument("--corpus", default="/usr/share/games/fortunes")
    args = parser.parse_args()
    model_path = os.path.join(args.tokenized, "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=model_path)
    check_tokenized(args.tokenized, args.corpus, sp)
    corpus_documents = read_fortunes(args.corpus)

    os.makedirs(OUT, exist_ok=True)
    name = f"fortunes_bpe{sp.vocab_size()}.model"
    shutil.copyfile(model_path, os.path.join(OUT, name))
    cases = []
    for text in TEXTS:
        ids = sp.encode(text)
        cases.append({"text_hex": text.hex(), "ids": ids,
                      "decoded_hex": sp.decode(ids).encode().hex()})
    # Decoding what an encoder never gives: stray and cut byte pieces, specials mid-text.
    byte = lambda b: sp.piece_to_id(f"<0x{b:02X}>")
    hello = sp.encode("hello")
    id_lists = [
        [byte(0xE2), byte(0x82)],                  # a cut character
        [byte(0xE2), byte(0x82), byte(0xAC)] + hello,  # a whole one: the euro sign
        [byte(0xFF)] + hello + [byte(0x41)],
        [sp.bos_id()] + hello + [sp.eos_id()] + hello,
        [sp.unk_id()] + hello + [sp.unk_id(), sp.unk_id()],
        [sp.eos_id()] + sp.encode(" spaced") + sp.encode(" again"),
        sp.encode("  two") + sp.encode("  more"),
        [byte(0x20)] + hello,
    ]
    decodes = [{"ids": ids, "decoded_hex": sp.decode(ids).encode().hex()} for ids in id_lists]
    splits = []
    for n, fractions, seed in [(23, [0.9, 0.05, 0.05], 1), (10, [0.5, 0.3, 0.2], 7),
                               (7, [0.34, 0.33, 0.33], 0)]:
        parts = random_split(list(range(n)), fractions, generator=torch.Generator().manual_seed(seed))
        splits.append({"n": n, "fractions": fractions, "seed": seed,
                       "parts": [list(p.indices) for p in parts]})
    expected = {
        "made_by": "tests/testdata/make_sentencepiece_fixtures.py",
        "sentencepiece": spm.__version__, "torch": torch.__version__,
        "model": name, "vocab_size": sp.vocab_size(), "eos_id": sp.eos_id(),
        "bos_id": sp.bos_id(), "unk_id": sp.unk_id(), "pad_id": sp.pad_id(),
        "cases": cases, "decodes": decodes, "random_split": splits,
        # kd::ReadFortunes on the corpus (Debian's fortunes package), for a test that reads it.
        "corpus": args.corpus, "corpus_documents": len(corpus_documents),
        "corpus_bytes": sum(len(d) for d in corpus_documents),
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}/{name} and expected.json ({len(cases)} texts)")


if __name__ == "__main__":
    sys.exit(main())
