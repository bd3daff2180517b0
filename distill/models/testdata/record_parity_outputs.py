"""Records reference outputs for libkd's CIFAR ResNets and Wide ResNet (models_test.cc).

Each model is built in Python, its parameters are filled deterministically (the parameter with
index i in sorted-name order gets 0.1 * sin(0.37 * arange(numel) + i)), and it runs one forward
in training mode (batch-norm batch statistics) on x = sin(0.01 * arange(numel)) shaped
[2, 3, 32, 32] ([2, 1, 28, 28] for fashion_cnn). The test fills libkd's model the same way and
compares the logits.

    python distill/models/testdata/record_parity_outputs.py \
        > distill/models/testdata/parity_outputs.txt

References (torchdistill 1.1.5, tools/install_deps.sh --peers):
- resnet20: torchdistill's resnet20 as is (option B shortcuts: 1x1 conv + BN).
- resnet20_zero_pad: the same with option A shortcuts (x[:, :, ::2, ::2], channels zero-padded
  on both sides), as akamaster/pytorch_resnet_cifar10's LambdaLayer.
- wrn_16_2: torchdistill's WRN-16-2 with its block's forward as the WRN authors' code (and
  RepDistiller's wrn.py) computes it: the 1x1 shortcut reads relu(bn1(x)), and dropout sits
  between bn2-relu and conv2.
- densenet_bc_k12_depth100: torchdistill's DenseNet-BC for CIFAR as is.
- tv_resnet18, tv_resnet50, tv_densenet121, tv_alexnet, tv_mobilenet_v2, tv_mobilenet_v3_large,
  tv_mobilenet_v3_small, tv_efficientnet_b0, tv_inception_v3: torchvision's ImageNet models
  (10 classes) as they are, dropout and stochastic depth off; tv_inception_v3_aux with its
  auxiliary classifier and transform_input, whose training output (logits, aux_logits) is
  printed as one row.
- fashion_cnn_w4: libkd's fashion_cnn (width 4, dropout 0) written in Python below, so a
  model trained in Python with this definition loads into libkd's by name.

The td_custom_* lines (HND/GHND's custom_resnet152 and custom_densenet169 in training mode,
custom_inception_v3 in eval mode, as its fixed dropout draws in training; 10 classes, inputs
[2, 3, 64, 64] and [2, 3, 75, 75]) were recorded the same way from torchdistill's in-package
definitions (models/custom/bottleneck/classification/{resnet,densenet,inception}.py at commits
355c28e8, 02e759ad, 02226f85), which torchdistill 1.1.5's package no longer ships: they are not
recorded by this script, which keeps the lines as they are when it is rerun
(`grep ^td_custom_`).
"""
import torch
import torch.nn.functional as F
import torchvision
from torchdistill.models.classification import densenet, resnet, wide_resnet


class ZeroPad(torch.nn.Module):
    def __init__(self, planes):
        super().__init__()
        self.pad = planes // 4

    def forward(self, x):
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad), "constant", 0)


def zero_pad_resnet20():
    model = resnet.resnet20(num_classes=10)
    for layer in (model.layer2, model.layer3):
        layer[0].downsample = ZeroPad(layer[0].conv1.out_channels)
    return model


def authors_wide_block_forward(self, x):
    o = self.relu(self.bn1(x))
    y = self.conv2(self.dropout(self.relu(self.bn2(self.conv1(o)))))
    return y + (self.shortcut(o) if len(self.shortcut) > 0 else x)


def wrn_16_2():
    wide_resnet.WideBasicBlock.forward = authors_wide_block_forward
    return wide_resnet.wide_resnet(16, 2, 0.0, 10, False, False)


class FashionCNN(torch.nn.Module):
    """libkd's fashion_cnn (distill/models/small_models.cc) in Python."""

    def __init__(self, width=16, num_classes=10, in_channels=1, dropout=0.0):
        super().__init__()
        nn = torch.nn

        def conv_bn_relu(i, o, stride=1):
            return [nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(o),
                    nn.ReLU()]

        w = width
        self.stem = nn.Sequential(*conv_bn_relu(in_channels, w, stride=2))
        self.layer1 = nn.Sequential(*conv_bn_relu(w, w))
        self.layer2 = nn.Sequential(*conv_bn_relu(w, 2 * w), nn.MaxPool2d(2),
                                    *conv_bn_relu(2 * w, 2 * w))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout),
                                  nn.Linear(2 * w * 7 * 7, num_classes))

    def forward(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))))


MODELS = {
    "resnet20": lambda: resnet.resnet20(num_classes=10),
    "resnet20_zero_pad": zero_pad_resnet20,
    "wrn_16_2": wrn_16_2,
    "fashion_cnn_w4": lambda: FashionCNN(width=4),
    "densenet_bc_k12_depth100": lambda: densenet.densenet_bc_k12_depth100(num_classes=10),
    "tv_resnet18": lambda: torchvision.models.resnet18(num_classes=10),
    "tv_resnet50": lambda: torchvision.models.resnet50(num_classes=10),
    "tv_densenet121": lambda: torchvision.models.densenet121(num_classes=10),
    # Dropout and stochastic depth off: the forward is deterministic in training mode.
    "tv_alexnet": lambda: torchvision.models.alexnet(num_classes=10, dropout=0.0),
    "tv_mobilenet_v2": lambda: torchvision.models.mobilenet_v2(num_classes=10, dropout=0.0),
    "tv_mobilenet_v3_large":
        lambda: torchvision.models.mobilenet_v3_large(num_classes=10, dropout=0.0),
    "tv_mobilenet_v3_small":
        lambda: torchvision.models.mobilenet_v3_small(num_classes=10, dropout=0.0),
    "tv_efficientnet_b0": lambda: torchvision.models.efficientnet_b0(
        num_classes=10, dropout=0.0, stochastic_depth_prob=0.0),
    "tv_inception_v3": lambda: torchvision.models.inception_v3(
        num_classes=10, aux_logits=False, dropout=0.0, init_weights=True),
    # In training mode with aux_logits: (logits, aux_logits), printed one after the other.
    "tv_inception_v3_aux": lambda: torchvision.models.inception_v3(
        num_classes=10, aux_logits=True, transform_input=True, dropout=0.0, init_weights=True),
}

SHAPES = {
    "tv_alexnet": (2, 3, 64, 64),
    "tv_mobilenet_v2": (2, 3, 64, 64),
    "tv_mobilenet_v3_large": (2, 3, 64, 64),
    "tv_mobilenet_v3_small": (2, 3, 64, 64),
    "tv_efficientnet_b0": (2, 3, 64, 64),
    "tv_inception_v3": (2, 3, 75, 75),
    "tv_inception_v3_aux": (2, 3, 299, 299),
}

print("# <case> <logits [2, 10], row-major>: from record_parity_outputs.py")
for name, make in MODELS.items():
    shape = SHAPES.get(name, (2, 1, 28, 28) if name.startswith("fashion_cnn") else (2, 3, 32, 32))
    x = torch.sin(0.01 * torch.arange(torch.Size(shape).numel(), dtype=torch.float32)).reshape(shape)
    model = make().train()
    with torch.no_grad():
        for i, (_, p) in enumerate(sorted(model.named_parameters())):
            p.copy_((0.1 * torch.sin(0.37 * torch.arange(p.numel()) + i)).reshape(p.shape))
        out = model(x)
    outs = list(out) if isinstance(out, tuple) else [out]
    print(name, " ".join(repr(v) for o in outs for v in o.flatten().tolist()))
