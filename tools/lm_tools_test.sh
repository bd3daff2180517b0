#!/bin/bash
# //tools:generate and //tools:tokenize: bad input is one line on stderr and exit code 2.
# (Generation itself is held to transformers' greedy tokens in distill/models:causal_lm_test, the
# tokenizer to Python's sentencepiece in distill/data:sentencepiece_test.)
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
data="$root/tests/testdata"
spm="$data/sentencepiece/fortunes_bpe1024.model"

tool="$root/tools/generate"
expect_error "no flags" "--model and --tokenizer are required"
expect_error "missing tokenizer" "no SentencePiece model /x.model; make one with bazel run //tools:tokenize" \
  --model="$data/lm/llama" --tokenizer=/x.model --prompt=hi
expect_error "not a tokenizer" "is not a SentencePiece model" \
  --model="$data/lm/llama" --tokenizer="$data/lm/llama/config.json" --prompt=hi
expect_error "missing model" "/nonexistent/config.json: cannot open" \
  --model=/nonexistent --tokenizer="$spm" --prompt=hi
expect_error "vocabularies differ" "the tokenizer has 1024 pieces, the model 64 tokens" \
  --model="$data/lm/llama" --tokenizer="$spm" --prompt=hi
expect_error "two prompt sources" "give one of --prompt and --prompts_file" \
  --model="$data/lm/llama" --tokenizer="$spm" --prompt=hi --prompts_file=p.txt
expect_error "unknown flag" "top_q" --top_q=0.5

tool="$root/tools/tokenize"
mkdir -p "$TEST_TMPDIR/taken" && echo x >"$TEST_TMPDIR/taken/file"
corpus="$TEST_TMPDIR/corpus.txt"
printf 'one fortune\n%%\nanother one\n%%\n' >"$corpus"
expect_error "no corpus flag" "--corpus is required"
expect_error "missing corpus" "--corpus: no corpus /nonexistent" \
  --corpus=/nonexistent --out_dir="$TEST_TMPDIR/out1"
expect_error "folder taken" "holds files; give an empty or new folder, or --overwrite" \
  --corpus="$corpus" --out_dir="$TEST_TMPDIR/taken"
expect_error "vocabulary too small" "--vocab_size must be in [260, 2^31]" \
  --corpus="$corpus" --out_dir="$TEST_TMPDIR/out2" --vocab_size=2
ln -s "$TEST_TMPDIR/taken" "$TEST_TMPDIR/link"
expect_error "a symbolic link" "link" --corpus="$corpus" --out_dir="$TEST_TMPDIR/link"
check "nothing written after refusals" test ! -e "$TEST_TMPDIR/out1" -a ! -e "$TEST_TMPDIR/out2"

finish lm_tools_test
