"""libkd's native fashion_cnn (distill/models/small_models.cc) in PyTorch: the same layers and
parameter names, so a state dict libkd saves (kd::Model::SaveState) loads into it. The peers'
benchmark runs it (distill/boxes/peer_box_timing.py), and tools/export_teacher.py exports a
trained libkd teacher through it:

  python tools/export_teacher.py --model=distill.models.fashion_cnn:FashionCnn \\
      --kwargs=width=16 --state=runs/default/teacher/model.pt --input_shape=2,1,28,28 ...
"""
import torch.nn as nn

NUM_CLASSES = 10


def conv_bn_relu(cin, cout, stride=1):
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU()]


class FashionCnn(nn.Module):
    """libkd's fashion_cnn: stem (conv stride 2), layer1, layer2 (conv, maxpool, conv), head."""

    def __init__(self, width, num_classes=NUM_CLASSES, in_channels=1, dropout=0.0):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn_relu(in_channels, width, stride=2))
        self.layer1 = nn.Sequential(*conv_bn_relu(width, width))
        self.layer2 = nn.Sequential(*conv_bn_relu(width, 2 * width), nn.MaxPool2d(2),
                                    *conv_bn_relu(2 * width, 2 * width))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout),
                                  nn.Linear(2 * width * 7 * 7, num_classes))

    def forward(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))))
