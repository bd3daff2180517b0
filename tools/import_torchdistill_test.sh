#!/bin/bash
# //tools:import_torchdistill end to end: a translated config on stdout (exit 0), what has no
# translation on stderr at its line and column (exit 1, the config still written), bad YAML as
# one line (exit 2).
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
tool="$root/tools/import_torchdistill"
data="$root/distill/torchdistill/testdata"

out=$("$tool" --yaml="$data/student_kd.yaml" --seed=1 2>"$TEST_TMPDIR/err"); rc=$?
check "student_kd: exit 0" test "$rc" -eq 0
check "student_kd: the config" grep -q 'key: "KDLoss"' <<<"$out"
check "student_kd: the seed" grep -q 'seed: 1' <<<"$out"
check "student_kd: notes only" test "$(grep -vc '^note: ' "$TEST_TMPDIR/err")" -eq 0
check "student_kd: a note at its position" grep -q "student_kd.yaml:14:25: .*download: left out" "$TEST_TMPDIR/err"

"$tool" --yaml="$data/at.yaml" --out="$TEST_TMPDIR/at.pbtxt" 2>/dev/null; rc=$?
check "--out: exit 0" test "$rc" -eq 0
check "--out: written" grep -q 'name: "at_loss_pair2"' "$TEST_TMPDIR/at.pbtxt"

cat >"$TEST_TMPDIR/resnet.yaml" <<'YAML'
models:
  teacher_model:
    key: 'vit_b_16'
  student_model:
    key: 'fashion_cnn'
train:
  num_epochs: 1
  warmup: 3
YAML
out=$("$tool" --yaml="$TEST_TMPDIR/resnet.yaml" 2>"$TEST_TMPDIR/err"); rc=$?
check "unsupported: exit 1" test "$rc" -eq 1
check "unsupported: still written" grep -q 'key: "vit_b_16"' <<<"$out"
check "unsupported: the model" grep -q "resnet.yaml:3:10: models.teacher_model vit_b_16 is not supported: not a libkd model: export" "$TEST_TMPDIR/err"
check "unsupported: the key" grep -q "resnet.yaml:8:11: train.warmup is not supported" "$TEST_TMPDIR/err"
check "unsupported: validation names what to supply" grep -q 'model key "vit_b_16"\|no model "vit_b_16"' "$TEST_TMPDIR/err"

printf 'train:\n  num_epochs: !repeat 3\n' >"$TEST_TMPDIR/bad.yaml"
expect_exact_error "unknown tag" "$TEST_TMPDIR/bad.yaml:2:15: unknown tag !repeat; torchdistill's tags are !join, !pathjoin, !expanduser, !abspath, !import_get, !import_call, !import_call_method, !call_method, !getattr, !setattr, !access_by_index_or_key" --yaml="$TEST_TMPDIR/bad.yaml"
printf 'train:\n  num_epochs: [1\n' >"$TEST_TMPDIR/syntax.yaml"
expect_error "syntax error" "syntax.yaml:3:1: " --yaml="$TEST_TMPDIR/syntax.yaml"
printf 'train:\n  num_epochs: ten\n' >"$TEST_TMPDIR/type.yaml"
expect_exact_error "wrong type" "$TEST_TMPDIR/type.yaml:2:15: train.num_epochs must be an integer, not a string 'ten'" --yaml="$TEST_TMPDIR/type.yaml"
expect_error "missing file" "none.yaml: cannot open: No such file or directory" --yaml="$TEST_TMPDIR/none.yaml"
mkfifo "$TEST_TMPDIR/fifo"
expect_error "a FIFO" "fifo: is a FIFO (named pipe); libkd reads only regular files" --yaml="$TEST_TMPDIR/fifo"
expect_error "no --yaml" "--yaml is required"

# Issue 49: the output is never the input, never a link, never in /dev.
cp "$data/at.yaml" "$TEST_TMPDIR/self.yaml"
before=$(sha256sum <"$TEST_TMPDIR/self.yaml")
expect_exact_error "--out is --yaml" "import_torchdistill: --out $TEST_TMPDIR/self.yaml is --yaml's file: the import would overwrite what it reads; give --out a file of its own" --yaml="$TEST_TMPDIR/self.yaml" --out="$TEST_TMPDIR/self.yaml"
ln -s self.yaml "$TEST_TMPDIR/self_link.yaml"
expect_exact_error "--out links to --yaml" "import_torchdistill: --out $TEST_TMPDIR/self_link.yaml is --yaml's file: the import would overwrite what it reads; give --out a file of its own" --yaml="$TEST_TMPDIR/self.yaml" --out="$TEST_TMPDIR/self_link.yaml"
check "--out is --yaml: the YAML kept" test "$(sha256sum <"$TEST_TMPDIR/self.yaml")" = "$before"
ln -s /dev/stdout "$TEST_TMPDIR/stdout_link"
expect_exact_error "--out a link" "import_torchdistill: --out: $TEST_TMPDIR/stdout_link: is a symbolic link; libkd neither writes through a link nor replaces it: give the path of a file" --yaml="$data/at.yaml" --out="$TEST_TMPDIR/stdout_link"
check "--out a link: still a link" test -L "$TEST_TMPDIR/stdout_link"
expect_exact_error "--out in /dev" "import_torchdistill: --out: /dev/libkd_import.pbtxt: is in /dev, which holds the system's devices and state, not files; give the path of a file elsewhere" --yaml="$data/at.yaml" --out=/dev/libkd_import.pbtxt
check "--out in /dev: nothing made" test ! -e /dev/libkd_import.pbtxt

# Issue 49: YAML that would hang, take gigabytes, or import a wrong value. Each ends within
# seconds, exit 2, one line.
T="$TEST_TMPDIR"
{
  echo 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
  prev=a
  for n in b c d e f g h i; do
    printf '%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n' $n $n $prev $prev $prev $prev $prev $prev $prev $prev $prev $prev
    prev=$n
  done
  echo 'train: {num_epochs: 1}'
} >"$T/laughs.yaml"
expect_error "billion laughs" "values once its aliases are expanded (an alias repeated within aliases?); no config needs that many" --yaml="$T/laughs.yaml"
{
  echo 'a: &a !join [xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx, xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]'
  prev=a
  for n in b c d e f g h i j k l m n o p q r s t u v w x y z; do
    printf '%s: &%s !join [*%s, *%s]\n' $n $n $prev $prev
    prev=$n
  done
} >"$T/join_bomb.yaml"
expect_error "!join bomb" "!join makes a string of more than 65536 bytes; no config needs one" --yaml="$T/join_bomb.yaml"
{
  echo 'm0: &m0 {k0: 1, k1: 1, k2: 1, k3: 1, k4: 1, k5: 1, k6: 1, k7: 1, k8: 1, k9: 1}'
  prev=m0
  for i in $(seq 1 40); do
    printf 'm%d: &m%d {<<: [*%s, *%s, *%s, *%s], x%d: *%s, y%d: *%s}\n' $i $i $prev $prev $prev $prev $i $prev $i $prev
    prev=m$i
  done
} >"$T/merge_bomb.yaml"
expect_error "merge-key bomb" "values once its aliases are expanded" --yaml="$T/merge_bomb.yaml"
head -c $((60 << 20)) /dev/zero | tr '\0' x | { printf 'train:\n  name: '; cat; } >"$T/huge_scalar.yaml"
expect_exact_error "a 60 MB scalar" "$T/huge_scalar.yaml: is 60.0 MiB, more than the 4.0 MiB this file may hold; check the path" --yaml="$T/huge_scalar.yaml"
{ printf 'train:\n  name: '; head -c 100000 /dev/zero | tr '\0' x; echo; } >"$T/long_scalar.yaml"
expect_exact_error "a 100 KB scalar" "$T/long_scalar.yaml:2:9: a scalar of 100000 bytes, more than the 65536 a config's value may hold" --yaml="$T/long_scalar.yaml"
# (an implicit key is at most 1024 characters in YAML: a long one is an explicit "? key".)
{ printf 'train:\n  ? '; head -c 100000 /dev/zero | tr '\0' k; printf '\n  : 1\n'; } >"$T/long_key.yaml"
expect_exact_error "a 100 KB key" "$T/long_key.yaml:2:5: a key of 100000 bytes, more than the 65536 a config's key may hold" --yaml="$T/long_key.yaml"
{ echo 'junk:'; seq -f '  k%.0f: 1' 1 200000; echo 'junk: 2'; } >"$T/many_keys.yaml"
start=$SECONDS
expect_exact_error "200,000 keys, one repeated" "$T/many_keys.yaml:200002:1: duplicate key \"junk\"" --yaml="$T/many_keys.yaml"
check "200,000 keys: under 20 s" test $((SECONDS - start)) -lt 20
printf 'train:\n  num_epochs: 4294967297\n' >"$T/big_int.yaml"
expect_exact_error "an int32 field past its range" "$T/big_int.yaml:2:15: train.num_epochs 4294967297 is out of range: libkd takes -2147483648 to 2147483647" --yaml="$T/big_int.yaml"
printf 'train:\n  num_epochs: 99999999999999999999\n' >"$T/huge_int.yaml"
expect_exact_error "an integer past 64 bits" "$T/huge_int.yaml:2:15: integer 99999999999999999999 does not fit in 64 bits" --yaml="$T/huge_int.yaml"
printf 'train:\n  <<: 5\n  num_epochs: 1\n' >"$T/merge_scalar.yaml"
expect_exact_error "a merge of a scalar" "$T/merge_scalar.yaml:2:7: a merge key (<<) takes a mapping or a list of them, not an integer" --yaml="$T/merge_scalar.yaml"
printf 'train:\n  num_epochs: 1\x00\n' >"$T/nul.yaml"
expect_exact_error "a NUL byte" "$T/nul.yaml:2:16: byte 0x00: a control character, which YAML text may not hold" --yaml="$T/nul.yaml"
printf 'train:\n  optimizer: {key: S\xffGD}\n' >"$T/latin1.yaml"
expect_exact_error "not UTF-8" "$T/latin1.yaml:2:21: byte 0xff: not UTF-8 text; save the file as UTF-8" --yaml="$T/latin1.yaml"
python3 -c "print('train: ' + '['*3000 + ']'*3000)" >"$T/deep_flow.yaml"
expect_error "nesting past yaml-cpp's depth" "nested more than 256 levels deep" --yaml="$T/deep_flow.yaml"
python3 -c "print('train:\n  num_epochs: 1\n' + ''.join('  k%d: 1\n' % i for i in range(150000)))" >"$T/train_keys.yaml"
start=$SECONDS
"$tool" --yaml="$T/train_keys.yaml" >/dev/null 2>"$T/train_keys.err"; rc=$?
check "150,000 unknown train keys: exit 1" test "$rc" -eq 1
check "150,000 unknown train keys: each reported" test "$(grep -c 'is not supported' "$T/train_keys.err")" -eq 150000
check "150,000 unknown train keys: under 20 s" test $((SECONDS - start)) -lt 20
printf 'train:\n  num_epochs: 1\n---\ntrain:\n  num_epochs: 2\n' >"$T/two_docs.yaml"
expect_exact_error "a second document" "$T/two_docs.yaml:4:1: a second YAML document; torchdistill reads one (PyYAML's load refuses more): keep one config a file" --yaml="$T/two_docs.yaml"
printf 'train:\n  num_epochs: 1\n  "\\e[31mred\\e[0m": 1\n' >"$T/escape.yaml"
"$tool" --yaml="$T/escape.yaml" >/dev/null 2>"$T/escape.err"
check "control bytes: none reach the terminal" test "$(tr -d '\n' <"$T/escape.err" | LC_ALL=C grep -c $'\x1b')" -eq 0
check "control bytes: shown escaped" grep -qF '\x1b[31mred' "$T/escape.err"
printf 'train:\n  num_epochs: 1\n  "\xe2\x80\xaeevil": 1\n' >"$T/bidi.yaml"
"$tool" --yaml="$T/bidi.yaml" >/dev/null 2>"$T/bidi.err"
check "a bidi control: not echoed raw" test "$(LC_ALL=C grep -c $'\xe2\x80\xae' "$T/bidi.err")" -eq 0
check "a bidi control: shown escaped" grep -qF '\u202eevil' "$T/bidi.err"

finish import_torchdistill_test
