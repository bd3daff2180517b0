"""Records the state-dict keys and shapes of torchdistill's CIFAR ResNet, Wide ResNet and DenseNet-BC.

distill/models/models_test.cc checks that libkd's resnet20 and wrn (WRN-16-2) have the same
parameter and buffer names and shapes, so torchdistill's state dicts load into them by name.

    python distill/models/testdata/record_torchdistill_shapes.py \
        > distill/models/testdata/torchdistill_state_shapes.txt

Needs torchdistill (tools/install_deps.sh --peers); recorded with torchdistill 1.1.5.
"""
import torchvision
from torchdistill.models.classification import densenet, resnet, wide_resnet

MODELS = {
    # libkd: resnet20 (shortcut: projection, num_classes 10)
    "resnet20": lambda: resnet.resnet20(num_classes=10),
    # libkd: wrn with depth 16, widen_factor 2
    "wrn_16_2": lambda: wide_resnet.wide_resnet(16, 2, 0.0, 10, False, False),
    # libkd: densenet_bc_k12_depth100 (num_classes 10)
    "densenet_bc_k12_depth100": lambda: densenet.densenet_bc_k12_depth100(num_classes=10),
    # libkd: resnet50 (torchvision's, num_classes 10)
    "tv_resnet50": lambda: torchvision.models.resnet50(num_classes=10),
}

print("# <model> <state-dict key> <shape>: torchdistill's, from record_torchdistill_shapes.py")
for name, make in MODELS.items():
    for key, tensor in make().state_dict().items():
        print(name, key, "x".join(str(d) for d in tensor.shape) or "scalar")
