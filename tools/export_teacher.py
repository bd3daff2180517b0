"""Exports a Python teacher as an AOTInductor package that libkd runs as a teacher, with the
values of the module paths a config will hook as extra outputs.

torch.export captures no forward hooks, so the exported program returns them: the model is
wrapped so that each call of a hooked module appends its input (its positional tensor
arguments) and/or its output to the returned values, then exported (batch dimension dynamic),
compiled and packaged by torch._inductor.aoti_compile_and_package. The package's own metadata
holds the manifest libkd reads (key "libkd.manifest", proto text of kd.AotiManifest): the
model's output count, each extra output's module path, io ("input"/"output"), call number,
argument number, shape and dtype, and every module path of the model with its type.

  python tools/export_teacher.py --model=tests.testdata.make_fixtures:SmallCNN \\
      --state=tests/testdata/small_cnn.state.pt --input_shape=2,1,28,28 \\
      --hooks=stem:output,layer1.0.relu:output,layer2.0:input --out=small_cnn.pt2

A Hugging Face causal LM (a local folder, nothing downloaded) exports the same way, its
logits the output and the hooked modules' values (a decoder layer's hidden states) beside:

  python tools/export_teacher.py --model=hf:models/llama --input_shape=2,16 \
      --hooks=model.layers.1:output --out=llama_teacher.pt2

Flags: --model=MODULE:FACTORY (an importable callable returning the nn.Module), a
torchvision model name (--model=torchvision:resnet18) or a Hugging Face causal LM folder
(--model=hf:FOLDER; the input is token ids [batch, tokens], both dimensions dynamic, and the
output the logits); --kwargs=NAME=VALUE,... (the factory's
keyword arguments, Python literals); --state=FILE (torch.save of its
state_dict; optional); --input_shape=N,C,H,W (an example input; dimension 0 is exported
dynamic unless --static); --dtype=float32; --hooks=PATH:IO,... (IO one of input, output, both);
--device=cpu|cuda; --inductor_configs=NAME=VALUE,... (torch._inductor.config settings for the
compilation over the defaults freezing=True,max_autotune=True, e.g. freezing=False);
--out=FILE.pt2. Exit 2 with one line on bad flags or an unknown path.
"""
import argparse
import ast
import difflib
import importlib
import os
import sys

import torch
import torch._inductor.config
import torch.nn as nn

MANIFEST_KEY = "libkd.manifest"
_RECORDED = {}  # id(Hooked) -> [(path, io, arg, tensor)] of the forward running


def fail(message):
    print("export_teacher: " + message, file=sys.stderr)
    sys.exit(2)


def parse_kwargs(text, flag="--kwargs"):
    """--kwargs=width=16,dropout=0.1 -> {"width": 16, "dropout": 0.1} (Python literals);
    --inductor_configs' names may be dotted (cpp.threads)."""
    kwargs = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        parts = name.split(".") if flag == "--inductor_configs" else [name]
        if not sep or not all(part.isidentifier() for part in parts):
            fail(f"{flag}: {item!r} is not NAME=VALUE")
        try:
            kwargs[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[name] = value  # a bare string
    return kwargs


def build_model(spec, state, kwargs):
    if ":" not in spec:
        fail(f"--model={spec}: give MODULE:FACTORY or torchvision:NAME")
    module_name, factory_name = spec.split(":", 1)
    if module_name == "hf":
        import transformers
        if not os.path.isfile(os.path.join(factory_name, "config.json")):
            fail(f"--model={spec}: {factory_name} has no config.json (a Hugging Face folder)")
        model = transformers.AutoModelForCausalLM.from_pretrained(
            factory_name, attn_implementation="eager", **kwargs)
        # Its logits alone (its output object is a dict the export would flatten), the module
        # paths its own.
        full = model.forward
        model.forward = lambda input_ids: full(input_ids, use_cache=False).logits
        model.is_causal_lm = True
        return model.eval()
    if module_name == "torchvision":
        import torchvision.models as tv
        model = getattr(tv, factory_name)(weights=None, **kwargs)
    else:
        sys.path.insert(0, os.getcwd())  # MODULE relative to where the tool runs
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            fail(f"--model={spec}: cannot import {module_name}: {e}")
        if not hasattr(module, factory_name):
            fail(f"--model={spec}: {module_name} has no {factory_name}")
        model = getattr(module, factory_name)(**kwargs)
    if state:
        model.load_state_dict(torch.load(state, map_location="cpu"))
    return model.eval()


class Hooked(nn.Module):
    """`model` returning (its output, the hooked values of each call, in call order). What the
    hooks record is held outside the module (torch.export warns of tensors kept in attributes)."""

    def __init__(self, model, hooks):
        super().__init__()
        self.model = model
        self.hooks = hooks  # path -> (input?, output?)
        _RECORDED[id(self)] = []
        modules = dict(model.named_modules())
        for path, (want_in, want_out) in hooks.items():
            modules[path].register_forward_hook(self._recorder(path, want_in, want_out))

    def _recorder(self, path, want_in, want_out):
        def hook(module, args, output):
            if want_in:
                for i, a in enumerate(args):
                    if isinstance(a, torch.Tensor):
                        _RECORDED[id(self)].append((path, "input", i, a))
            if want_out:
                if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
                    output = output[0]  # a transformers layer's (hidden_states, ...)
                if not isinstance(output, torch.Tensor):
                    raise TypeError(f"{path}'s output is not a tensor")
                _RECORDED[id(self)].append((path, "output", 0, output))
        return hook

    @property
    def recorded(self):
        return _RECORDED[id(self)]

    def forward(self, x):
        self.recorded.clear()
        out = self.model(x)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        # A value the forward later changes in place is recorded as it was returned.
        return tuple(outs) + tuple(v.clone() for (_, _, _, v) in self.recorded)


def describe(recorded):
    """(path, io, call, arg) for each recorded value, the call counted per (path, io, arg)."""
    calls, out = {}, []
    for path, io, arg, _ in recorded:
        n = calls.get((path, io, arg), 0)
        calls[(path, io, arg)] = n + 1
        out.append((path, io, n, arg))
    return out


def quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def manifest_text(num_outputs, entries, values, modules, dynamic_batch):
    lines = [f"num_model_outputs: {num_outputs}", f"dynamic_batch: {str(dynamic_batch).lower()}"]
    for (path, io, call, arg), v in zip(entries, values):
        shape = " ".join(f"shape: {d}" for d in v.shape)
        lines.append(f"values {{ path: {quote(path)} io: {io.upper()} call: {call} arg: {arg} "
                     f"{shape} dtype: {quote(str(v.dtype).replace('torch.', ''))} }}")
    lines += [f"module_paths: {quote(p)}" for p, _ in modules]
    lines += [f"module_types: {quote(type(m).__name__)}" for _, m in modules]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--state", default="")
    parser.add_argument("--kwargs", default="")
    parser.add_argument("--input_shape", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--hooks", default="")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--static", action="store_true")
    parser.add_argument("--inductor_configs", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    # A teacher's weights never change: freezing folds them (and batch norms) into the compiled
    # program, with oneDNN's prepacked convolutions on the CPU (Inductor freezes only a graph
    # compiled without autograd: hence the no_grad around the compilation); max_autotune picks the faster of
    # Inductor's own GEMM kernels and ATen's for each linear layer. Measured on the box
    # benchmark's teacher: docs/benchmarks.md.
    configs = {"freezing": True, "max_autotune": True}
    configs.update(parse_kwargs(args.inductor_configs, "--inductor_configs"))
    for name in configs:
        try:
            torch._inductor.config.__getattr__(name)
        except AttributeError:
            fail(f"--inductor_configs: torch._inductor.config has no {name!r}")

    try:
        shape = [int(d) for d in args.input_shape.split(",")]
    except ValueError:
        fail(f"--input_shape={args.input_shape}: give integers, N,C,H,W")
    if args.model.startswith("hf:") and len(shape) != 2:
        fail(f"--input_shape={args.input_shape}: a causal LM takes [batch, tokens]")
    model = build_model(args.model, args.state, parse_kwargs(args.kwargs))
    module_paths = [p for p, _ in model.named_modules()]
    hooks = {}
    for item in filter(None, args.hooks.split(",")):
        path, _, io = item.rpartition(":")
        if io not in ("input", "output", "both") or not path and item.count(":") == 0:
            fail(f"--hooks: {item!r} is not PATH:IO with IO input, output or both")
        if path not in module_paths:
            near = difflib.get_close_matches(path, module_paths, n=2)
            fail(f"--hooks: the model has no module {path!r}"
                 + (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""))
        want_in, want_out = hooks.get(path, (False, False))
        hooks[path] = (want_in or io in ("input", "both"), want_out or io in ("output", "both"))
    device = torch.device(args.device)
    causal_lm = getattr(model, "is_causal_lm", False)
    if causal_lm:
        example = torch.randint(0, model.config.vocab_size, shape, device=device)
    else:
        example = torch.randn(*shape, dtype=getattr(torch, args.dtype), device=device)
    wrapped = Hooked(model, hooks).to(device).eval()
    with torch.no_grad():
        plain = model(example)
        values = wrapped(example)
    num_outputs = len(plain) if isinstance(plain, (tuple, list)) else 1
    entries = describe(wrapped.recorded)
    dynamic = not args.static and shape[0] > 1
    dynamic_shapes = ({"x": {0: torch.export.Dim("batch", min=1, max=1 << 16)}}
                      if dynamic else None)
    if causal_lm and not args.static:
        dynamic = True  # a batch of any size and length, within the model's positions
        dynamic_shapes = {"x": {0: torch.export.Dim("batch", min=1, max=1 << 16),
                                1: torch.export.Dim("tokens", min=2, max=4096)}}
    program = torch.export.export(wrapped, (example,), dynamic_shapes=dynamic_shapes)
    manifest = manifest_text(num_outputs, entries, values[num_outputs:],
                             list(model.named_modules()), dynamic)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    configs["aot_inductor.metadata"] = {MANIFEST_KEY: manifest}
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(program, package_path=args.out,
                                                 inductor_configs=configs)
    print(f"export_teacher: wrote {args.out}: {num_outputs} output(s) and {len(entries)} "
          f"hooked value(s)")


if __name__ == "__main__":
    main()
