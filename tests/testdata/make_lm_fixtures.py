"""Reference values of small random-init causal LMs from Hugging Face transformers, for
distill/models' parity tests (nothing is downloaded: each model is made from a config here).

  ~/.cache/libkd/venv/bin/python tests/testdata/make_lm_fixtures.py

For each of llama (grouped-query attention, untied head), qwen2 (biases on q/k/v, tied head)
and gpt2 (tied head) it writes tests/testdata/lm/<name>/:
  config.json, model.safetensors   save_pretrained's folder (what libkd loads)
  expected.pt   torch.save'd dict:
    "weights.<param>"       every parameter, as transformers names them in the state dict
    "input_ids"             int64 [2, 7]
    "logits"                model(input_ids).logits, eval mode
    "hidden.<i>"            decoder layer i's output (a forward hook on model.layers.<i> /
                            transformer.h.<i>)
    "attention_mask"        [2, 7], the second row left-padded by 3
    "masked_logits"         model(input_ids, attention_mask).logits
    "loss"                  model(input_ids, labels=input_ids).loss (the mean next-token NLL)
    "grad.<param>"          d loss / d param
    "prompt", "prompt_mask" a batch of two prompts, the second left-padded
    "greedy"                generate(prompt, attention_mask, do_sample=False, max_new_tokens=6)
                            (all tokens, the prompt's included); eos_token_id None: no early stop
Models run in float32 with the eager attention, on the CPU, one thread.
"""
import os

import torch
import transformers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm")


def configs():
    # A wide initialization: logits far from uniform, so that greedy decoding varies.
    common = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  initializer_range=0.3)
    return {
        "llama": transformers.LlamaConfig(intermediate_size=48, num_key_value_heads=2,
                                          max_position_embeddings=64, **common),
        "qwen2": transformers.Qwen2Config(intermediate_size=48, num_key_value_heads=4,
                                          max_position_embeddings=64, tie_word_embeddings=True,
                                          **common),
        "gpt2": transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                        n_positions=64, bos_token_id=0, eos_token_id=0,
                                        initializer_range=0.3),
    }


def layers_of(model):
    return model.transformer.h if hasattr(model, "transformer") else model.model.layers


def record(name, config):
    torch.manual_seed(7)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.eval()
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    for extra in ("generation_config.json",):
        path = os.path.join(folder, extra)
        if os.path.exists(path):
            os.remove(path)

    out = {}
    for key, value in model.state_dict().items():
        out["weights." + key] = value.detach().clone()
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, config.vocab_size, (2, 7), generator=g)
    out["input_ids"] = ids
    hidden = {}
    handles = [layer.register_forward_hook(
        lambda m, a, o, i=i: hidden.__setitem__(i, (o[0] if isinstance(o, tuple) else o).detach()))
        for i, layer in enumerate(layers_of(model))]
    with torch.no_grad():
        out["logits"] = model(ids).logits
    for h in handles:
        h.remove()
    for i, value in hidden.items():
        out["hidden.%d" % i] = value
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    out["attention_mask"] = mask
    with torch.no_grad():
        out["masked_logits"] = model(ids, attention_mask=mask).logits

    loss = model(ids, labels=ids).loss
    loss.backward()
    out["loss"] = loss.detach()
    for key, p in model.named_parameters():
        out["grad." + key] = p.grad.detach().clone()

    prompt = torch.randint(0, config.vocab_size, (2, 5), generator=g)
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[1, :2] = 0
    prompt[1, :2] = 0
    out["prompt"], out["prompt_mask"] = prompt, prompt_mask
    with torch.no_grad():
        out["greedy"] = model.generate(prompt, attention_mask=prompt_mask, do_sample=False,
                                       max_new_tokens=6, eos_token_id=None, pad_token_id=0)
    torch.save(out, os.path.join(folder, "expected.pt"))
    print(name, "logits", tuple(out["logits"].shape), "loss", float(loss))


def main():
    torch.set_num_threads(1)
    for name, config in configs().items():
        record(name, config)


if __name__ == "__main__":
    main()
