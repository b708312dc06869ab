"""Vision loops of pytorch/examples, scaled to seconds on CPU with their recipes kept."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR

from ._loop import Attach, HealthyLoop, LoopRun, TriageSetup, attached, generator, labelled


# ----- mnist -------------------------------------------------------------------------------
class MnistNet(nn.Module):
    """github:pytorch/examples mnist/main.py ``Net``, channels and image scaled down."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def _mnist_setup() -> TriageSetup:
    torch.manual_seed(1)
    model = MnistNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    return TriageSetup(
        model, labelled(1, (16, 1, 14, 14), 10, 1)[0], F.nll_loss, optimizer, scheduler
    )


def mnist(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adadelta lr 1.0, StepLR(gamma=0.7) per epoch, nll_loss on log_softmax; the twin forgets
    ``optimizer.zero_grad()``."""
    setup = _mnist_setup()
    model, optimizer, scheduler = setup.model, setup.optimizer, setup.scheduler
    data = labelled(2, (16, 1, 14, 14), 10, 1)
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        model.train()
        for step in range(steps):
            x, y = data[step % len(data)]
            if not planted:
                optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
            if step % 4 == 3:  # an "epoch" of 4 batches
                scheduler.step()
    return run


# ----- super_resolution ----------------------------------------------------------------------
class SuperResolutionNet(nn.Module):
    """github:pytorch/examples super_resolution/model.py ``Net`` (orthogonal init kept)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 16, 5, 1, 2)
        self.conv2 = nn.Conv2d(16, 16, 3, 1, 1)
        self.conv3 = nn.Conv2d(16, 8, 3, 1, 1)
        self.conv4 = nn.Conv2d(8, upscale_factor**2, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        gain = nn.init.calculate_gain("relu")
        for conv in (self.conv1, self.conv2, self.conv3):
            nn.init.orthogonal_(conv.weight, gain)
        nn.init.orthogonal_(self.conv4.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))


def _sr_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = generator(123)
    out = []
    for _ in range(2):
        high = F.avg_pool2d(torch.rand(8, 1, 16, 16, generator=gen), 3, 1, 1)
        out.append((F.avg_pool2d(high, 2), high))
    return out


def _sr_setup() -> TriageSetup:
    torch.manual_seed(123)
    model = SuperResolutionNet(upscale_factor=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return TriageSetup(model, _sr_batches()[0], nn.MSELoss(), optimizer)


def super_resolution(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adam lr 0.01 on MSELoss; the twin swaps the last conv for a new one after the optimizer
    was built (the new layer trains under no optimizer)."""
    setup = _sr_setup()
    model, optimizer = setup.model, setup.optimizer
    if planted:
        model.conv4 = nn.Conv2d(8, 4, 3, 1, 1)
    criterion = nn.MSELoss()
    data = _sr_batches()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
    return run


# ----- siamese_network -----------------------------------------------------------------------
class SiameseNetwork(nn.Module):
    """github:pytorch/examples siamese_network/main.py: a shared encoder (a tiny CNN for the
    ResNet-18 there) whose two embeddings are concatenated into a sigmoid head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()
        )
        self.fc = nn.Sequential(nn.Linear(64, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))
        self.sigmoid = nn.Sigmoid()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = self.fc(torch.cat((self.encoder(a), self.encoder(b)), 1))
        return self.sigmoid(out)


def _pairs() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = generator(1)
    out = []
    for _ in range(2):
        a = torch.randn(16, 1, 8, 8, generator=gen)
        same = torch.rand(16, generator=gen) < 0.5
        b = torch.where(same[:, None, None, None], a + 0.1 * torch.randn_like(a), -a)
        out.append((a, b, same.float()[:, None]))
    return out


def siamese_network(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adadelta lr 1.0, StepLR(gamma=0.7), BCELoss on the sigmoid; the twin re-initialises the
    head inside the loop (a ``reset_parameters()`` left in the epoch loop)."""
    torch.manual_seed(1)
    model = SiameseNetwork()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = nn.BCELoss()
    data = _pairs()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            a, b, target = data[step % len(data)]
            if planted and step % 4 == 2:
                head = model.fc[2]
                assert isinstance(head, nn.Linear)
                head.reset_parameters()
            optimizer.zero_grad()
            loss = criterion(model(a, b), target)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
            if step % 4 == 3:
                scheduler.step()
    return run


# ----- imagenet (a tiny ResNet) ----------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + x)


class TinyResNet(nn.Module):
    """torchvision's resnet18 shape (stem, basic blocks, pooled fc) at 8 channels."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        )
        self.layers = nn.Sequential(BasicBlock(8), BasicBlock(8))
        self.fc = nn.Linear(8, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


def _imagenet_setup() -> TriageSetup:
    torch.manual_seed(0)
    model = TinyResNet()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    batch = labelled(1, (16, 3, 8, 8), 10, 0)[0]
    return TriageSetup(model, batch, nn.CrossEntropyLoss(), optimizer, scheduler)


def imagenet(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:pytorch/examples imagenet/main.py: SGD lr 0.1 momentum 0.9 wd 1e-4,
    StepLR(30, 0.1), CrossEntropyLoss; the twin steps an optimizer built over a copy of the
    model (``deepcopy`` after the optimizer: the trained model is not the optimized one)."""
    setup = _imagenet_setup()
    model, optimizer, scheduler = setup.model, setup.optimizer, setup.scheduler
    assert scheduler is not None
    if planted:
        other = TinyResNet()
        optimizer = torch.optim.SGD(other.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    data = labelled(2, (16, 3, 8, 8), 10, 0)
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        model.train()
        for step in range(steps):
            x, y = data[step % len(data)]
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
        scheduler.step()
    return run


# ----- fast_neural_style -----------------------------------------------------------------------
class TransformerNet(nn.Module):
    """github:pytorch/examples fast_neural_style/neural_style/transformer_net.py, one residual
    block and 8 channels: conv / InstanceNorm / ReLU, upsample, conv."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU()
        )
        self.res = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1),
            nn.InstanceNorm2d(8, affine=True),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.InstanceNorm2d(8, affine=True),
        )
        self.up = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(x)
        return self.up(y + self.res(y))


def gram_matrix(y: torch.Tensor) -> torch.Tensor:
    b, ch, h, w = y.size()
    features = y.view(b, ch, w * h)
    return features.bmm(features.transpose(1, 2)) / (ch * h * w)


def fast_neural_style(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adam lr 1e-3 on content + style losses through a frozen feature net (VGG-16 there, a
    frozen random conv stack here, ``requires_grad=False`` and not in the optimizer); the twin
    builds the optimizer over the feature net instead of the transformer."""
    torch.manual_seed(42)
    transformer = TransformerNet()
    vgg = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
    vgg.requires_grad_(False)
    optimizer = torch.optim.Adam((vgg if planted else transformer).parameters(), lr=1e-3)
    gen = generator(42)
    style = torch.rand(1, 3, 12, 12, generator=gen)
    gram_style = gram_matrix(vgg(style))
    content_weight, style_weight = 1e5 / 1e5, 1e10 / 1e8  # the ratio kept, scaled for 12 px
    data = [torch.rand(4, 3, 12, 12, generator=gen) for _ in range(2)]
    run = LoopRun()
    with attached(attach, [(transformer, optimizer)], run):
        for step in range(steps):
            x = data[step % len(data)]
            optimizer.zero_grad()
            y = transformer(x)
            features_y, features_x = vgg(y), vgg(x)
            content_loss = content_weight * F.mse_loss(features_y, features_x)
            style_loss = style_weight * F.mse_loss(
                gram_matrix(features_y), gram_style.expand(len(x), -1, -1)
            )
            total = content_loss + style_loss
            total.backward()
            optimizer.step()
            run.losses.append(total.item())
    return run


LOOPS = (
    HealthyLoop(
        "mnist",
        "github:pytorch/examples mnist/main.py",
        "supervised",
        "optimizer.zero_grad() forgotten",
        "grads_not_reset",
        mnist,
        _mnist_setup,
    ),
    HealthyLoop(
        "super_resolution",
        "github:pytorch/examples super_resolution/main.py",
        "supervised",
        "a layer replaced after the optimizer was built",
        "params_trained_by_no_optimizer",
        super_resolution,
        _sr_setup,
    ),
    HealthyLoop(
        "siamese_network",
        "github:pytorch/examples siamese_network/main.py",
        "supervised",
        "the head re-initialised inside the loop",
        "param_written_outside_step",
        siamese_network,
    ),
    HealthyLoop(
        "imagenet",
        "github:pytorch/examples imagenet/main.py",
        "supervised",
        "the optimizer holds another model's parameters",
        "params_trained_by_no_optimizer",
        imagenet,
        _imagenet_setup,
    ),
    HealthyLoop(
        "fast_neural_style",
        "github:pytorch/examples fast_neural_style/neural_style/neural_style.py",
        "supervised",
        "the optimizer built over the frozen feature net",
        "optimizer_has_nothing_to_train",
        fast_neural_style,
    ),
)
