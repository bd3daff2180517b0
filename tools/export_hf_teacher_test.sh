#!/bin/bash
# tools/export_teacher.py --model=hf:FOLDER end to end: transformers' Llama of
# tests/testdata/lm/llama (make_lm_fixtures.py) exported as an AOTInductor package with a decoder
# layer's hidden states beside the logits, then run by libkd (//tools:capture, kd::LoadAotiModel)
# on token ids of another batch size and length than the export's example: the hidden states
# equal those transformers recorded, within 1e-5 of their scale. Bad input: a folder without
# config.json, a shape that is not [batch, tokens].
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
python="$root/external/libtorch/python.sh"
tool=$(python_tool export_teacher.py)
llama="$root/tests/testdata/lm/llama"

expect_error "not a Hugging Face folder" "has no config.json (a Hugging Face folder)" \
  --model=hf:"$TEST_TMPDIR" --input_shape=2,8 --out="$TEST_TMPDIR/x.pt2"
expect_error "not token ids" "a causal LM takes [batch, tokens]" \
  --model=hf:"$llama" --input_shape=2,1,8 --out="$TEST_TMPDIR/x.pt2"

package="$TEST_TMPDIR/llama.pt2"
check "export" "$tool" --model=hf:"$llama" --input_shape=3,5 --hooks=model.layers.1:output \
  --inductor_configs=max_autotune=False --out="$package"
"$python" -c "
import torch
e = torch.load('$llama/expected.pt')
torch.save(e['input_ids'], '$TEST_TMPDIR/ids.pt')" || check "ids saved" false
check "libkd runs it" "$root/tools/capture" --model="$package" --input="$TEST_TMPDIR/ids.pt" \
  --paths=model.layers.1 --out="$TEST_TMPDIR/captured.pt"
check "hidden states equal transformers'" "$python" -c "
import sys, torch
e = torch.load('$llama/expected.pt')
got = torch.load('$TEST_TMPDIR/captured.pt')['model.layers.1']['output']
want = e['hidden.1']
diff = (got - want).abs().max().item()
print('max |difference|', diff, 'scale', want.abs().max().item())
sys.exit(0 if got.shape == want.shape and diff <= 1e-5 * want.abs().max().item() else 1)"

finish export_hf_teacher_test
