#!/bin/bash
# Imports every YAML under a folder (torchdistill's configs/sample, from a checkout of its
# repository) with //tools:import_torchdistill and sums up: per file its exit code, how many keys
# were reported, and whether what is reported is only datasets and models to supply (ImageNet's
# ImageFolder, torchvision models, downloaded weights), or also a method's wiring.
#
#   bazel build //tools:import_torchdistill
#   tools/import_torchdistill_samples.sh ~/torchdistill/configs/sample/ilsvrc2012 [...]
set -uo pipefail
tool="$(dirname "$0")/../bazel-bin/tools/import_torchdistill"
[[ -x "$tool" ]] || { echo "build it first: bazel build //tools:import_torchdistill" >&2; exit 2; }
supply='ImageFolder|models\.(teacher_model|student_model|model) [A-Za-z_0-9]+ is not supported|kwargs\.(weights|pretrained) '
total=0; ok=0; only_supply=0; more=0; refused=0
while IFS= read -r file; do
  total=$((total + 1))
  err=$("$tool" --yaml="$file" 2>&1 >/dev/null); rc=$?
  reported=$(grep -c ' is not supported: ' <<<"$err")
  others=$(grep ' is not supported: ' <<<"$err" | grep -cvE "$supply")
  case $rc in
    0) ok=$((ok + 1)); kind="translated" ;;
    1) if ((others == 0)); then only_supply=$((only_supply + 1)); kind="supply datasets/models"
       else more=$((more + 1)); kind="also $others method key(s)"; fi ;;
    *) refused=$((refused + 1)); kind="refused: $(head -c 160 <<<"$err")" ;;
  esac
  printf '%s\texit %d\t%d reported\t%s\n' "$file" "$rc" "$reported" "$kind"
done < <(find "$@" -name '*.yaml' | sort)
echo "$total files: $ok translated and valid, $only_supply need only datasets/models supplied," \
  "$more also a method's wiring, $refused refused (exit 2)"
