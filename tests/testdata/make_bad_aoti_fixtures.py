"""Bad AOTInductor packages, each small_cnn's package (made by make_aoti_fixtures.py) with one
thing changed, for the checks libkd runs before libtorch's loader sees a package:

  climb_aoti.pt2        an extra entry whose name climbs out of the extraction folder
                        (data/aotinductor/model/../../../../libkd_climbed)
  bad_call_aoti.pt2     the manifest's first value claims call -1
  huge_call_aoti.pt2    the manifest's first value claims call 2000000000
  unknown_isa_aoti.pt2  AOTI_CPU_ISA names an instruction set libkd does not know (AVX10_2)
  cut_metadata_aoti.pt2 its metadata JSON files cut in half (libtorch's metadata reader fails
                        after extracting them)

Run by Bazel (//tests/testdata:bad_aoti_fixtures, not committed):

  python make_bad_aoti_fixtures.py SMALL_CNN_AOTI_PT2 OUT_DIR
"""
import json
import os
import re
import sys
import zipfile


def rewrite(source_path, out_path, edit_metadata=None, extra=None, cut_metadata=False):
    with zipfile.ZipFile(source_path) as source, zipfile.ZipFile(out_path, "w") as out:
        for item in source.infolist():
            data = source.read(item.filename)
            # The package holds its metadata twice (the wrapper's and the kernel's): both edited.
            if edit_metadata and item.filename.endswith("_metadata.json"):
                metadata = json.loads(data)
                edit_metadata(metadata)
                data = json.dumps(metadata).encode()
            if cut_metadata and item.filename.endswith("_metadata.json"):
                data = data[:len(data) // 2]
            out.writestr(item, data)
        for name, data in (extra or {}).items():
            out.writestr(zipfile.ZipInfo(name), data)


def first_call(call):
    def edit(metadata):
        if "libkd.manifest" not in metadata:
            return
        manifest, n = re.subn(r"call: \d+", "call: %d" % call, metadata["libkd.manifest"], count=1)
        assert n == 1, manifest
        metadata["libkd.manifest"] = manifest
    return edit


def main():
    source, out_dir = sys.argv[1], sys.argv[2]
    rewrite(source, os.path.join(out_dir, "climb_aoti.pt2"),
            extra={"data/aotinductor/model/../../../../libkd_climbed": b"outside\n"})
    rewrite(source, os.path.join(out_dir, "bad_call_aoti.pt2"), edit_metadata=first_call(-1))
    rewrite(source, os.path.join(out_dir, "huge_call_aoti.pt2"),
            edit_metadata=first_call(2000000000))

    def unknown_isa(metadata):
        if "AOTI_CPU_ISA" in metadata:
            metadata["AOTI_CPU_ISA"] = "AVX10_2"
    rewrite(source, os.path.join(out_dir, "unknown_isa_aoti.pt2"), edit_metadata=unknown_isa)
    rewrite(source, os.path.join(out_dir, "cut_metadata_aoti.pt2"), cut_metadata=True)


if __name__ == "__main__":
    main()
