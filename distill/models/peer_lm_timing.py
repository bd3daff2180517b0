"""transformers' side of //distill/models:lm_benchmark: the same Llama shapes, timed here.

Requests (one per line on stdin; one answer line on stdout, "<word> <seconds>"):
  train <hidden> <layers> <heads> <kv_heads> <inter> <vocab> <batch> <seq> <steps>
      seconds per training step (forward, next-token loss, backward, AdamW) after one warm-up
  gen <hidden> <layers> <heads> <kv_heads> <inter> <vocab> <batch> <prompt> <new>
      seconds for generate(do_sample=False, max_new_tokens=new) after one warm-up
Eager attention off: transformers' default (sdpa), as its users run it. One thread.
"""
import sys
import time

import torch
import transformers

torch.set_num_threads(1)
MODELS = {}


def model(hidden, layers, heads, kv, inter, vocab):
    key = (hidden, layers, heads, kv, inter, vocab)
    if key not in MODELS:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(hidden_size=hidden, num_hidden_layers=layers,
                                          num_attention_heads=heads, num_key_value_heads=kv,
                                          intermediate_size=inter, vocab_size=vocab,
                                          max_position_embeddings=1024)
        MODELS[key] = transformers.AutoModelForCausalLM.from_config(config)
    return MODELS[key]


def train(m, batch, seq, steps):
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    ids = torch.randint(0, m.config.vocab_size, (batch, seq))

    def step():
        loss = m(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def gen(m, batch, prompt, new):
    m.eval()
    ids = torch.randint(0, m.config.vocab_size, (batch, prompt))
    kwargs = dict(do_sample=False, max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
    with torch.no_grad():
        m.generate(ids, **kwargs)
        start = time.perf_counter()
        m.generate(ids, **kwargs)
    return time.perf_counter() - start


for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    nums = [int(w) for w in words[1:]]
    m = model(*nums[:6])
    seconds = train(m, *nums[6:]) if words[0] == "train" else gen(m, *nums[6:])
    print(words[0], seconds, flush=True)
