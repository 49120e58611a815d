"""The model zoo: the small CPU models and the CIFAR networks of the papers.

- `cnn1d`: the MNIST-1D convolutional net (conv 1-25-25-25, linear 250-10, ~6.5K params).
- `cnn1d_wide`: the same convolutions with a 1,024-unit hidden layer before the classifier
  (linear 250-1024-10, 271,224 params): Flexible Top-k's small scale, where c = 0.001 must
  still keep a few hundred values per worker and step (271 here).
- `mlp`: a two-layer perceptron for the synthetic workload and fast tests.
- `resnet20`: He et al. 2016's CIFAR ResNet (3 stages of 3 basic blocks, 16/32/64 channels).
- `resnet18`, `resnet50`: ImageNet ResNets with the usual CIFAR stem (3x3 conv, no max-pool),
  as in the Top-k paper's CIFAR-100 runs and AdaComm's ResNet-50 runs.
- `vgg16`: VGG-16 with batch norm and a single 512->classes classifier, AdaComm's CIFAR VGG.
- `toy_quadratic`: Horovod's Adasum toy model x^2 + p0 x + p1 with p starting at [1, -1].
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from repro.errors import require_choice
from repro.workload import worker_layers
from repro.workload.config import MODELS


class CNN1D(nn.Module):
    """Three convolutions over the length-40 signal, then a linear classifier; `hidden` > 0
    puts a ReLU layer of that width between them (the parameters then sit mostly there, as
    ResNet-18's sit mostly in its last stage)."""

    def __init__(self, num_classes: int = 10, channels: int = 25, hidden: int = 0):
        super().__init__()
        self.conv1 = nn.Conv1d(1, channels, 5, stride=2, padding=2)
        self.conv2 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(channels, channels, 3, stride=1, padding=1)
        features = channels * 10
        self.hidden = nn.Linear(features, hidden) if hidden else None
        self.fc = nn.Linear(hidden or features, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x)).flatten(1)
        if self.hidden is not None:
            x = F.relu(self.hidden(x))
        return self.fc(x)

    def forward_workers(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """`forward` for every worker at once, the simulated engine's fast path
        (`trainer.vectorize=stacked`, `repro.workload.worker_layers`): `params` maps each
        parameter's name to its (workers, *shape) stack, x is (workers, batch, 1, length);
        the result is (workers, batch, classes)."""
        h = x.transpose(2, 3)
        for name in ("conv1", "conv2", "conv3"):
            conv = getattr(self, name)
            w, b = params[f"{name}.weight"], params[f"{name}.bias"]
            h = worker_layers.conv1d(h, w, b, conv.stride[0], conv.padding[0], relu=True)
        # forward's flatten(1) is channel-major; h is channels-last
        h = h.transpose(2, 3).flatten(2)
        if self.hidden is not None:
            h = F.relu(worker_layers.linear(h, params["hidden.weight"], params["hidden.bias"]))
        return worker_layers.linear(h, params["fc.weight"], params["fc.bias"])


class MLP(nn.Module):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x):
        return self.net(x)


class ToyQuadratic(nn.Module):
    """y = x^2 + p0 x + p1, p = [1, -1] at the start (Horovod's Adasum toy problem).

    Fitting x^2 - 20x + 50 drives p to [-20, 50]; the two parameters form one tensor, so
    Adasum combines them with one pair of coefficients, as Horovod's example does.
    """

    def __init__(self):
        super().__init__()
        self.param = nn.Parameter(torch.tensor([1.0, -1.0]))

    def forward(self, x):
        x = x.reshape(-1)
        return x * x + self.param[0] * x + self.param[1]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet20(nn.Module):
    def __init__(self, num_classes: int = 10, blocks: int = 3):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(blocks):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


_VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


class VGG16(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in _VGG16:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [
                    nn.Conv2d(cin, v, 3, padding=1),
                    nn.BatchNorm2d(v),
                    nn.ReLU(inplace=True),
                ]
                cin = v
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def _cifar_torchvision(name: str, num_classes: int) -> nn.Module:
    from torchvision import models

    net = getattr(models, name)(num_classes=num_classes)
    net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    net.maxpool = nn.Identity()
    return net


def build_model(name: str, num_classes: int, in_dim: int = 16) -> nn.Module:
    require_choice("workload.model", name, MODELS)
    if name == "cnn1d":
        return CNN1D(num_classes)
    if name == "cnn1d_wide":
        return CNN1D(num_classes, hidden=1024)
    if name == "mlp":
        return MLP(in_dim, num_classes)
    if name == "resnet20":
        return ResNet20(num_classes)
    if name == "vgg16":
        return VGG16(num_classes)
    if name == "toy_quadratic":
        return ToyQuadratic()
    return _cifar_torchvision(name, num_classes)  # resnet18, resnet50
