"""Generative loops: two networks, one optimizer each (a session per pair), or a VAE."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._loop import Attach, HealthyLoop, LoopRun, attached, generator

NZ, NGF, NDF = 8, 8, 8


def weights_init(m: nn.Module) -> None:
    """github:pytorch/examples dcgan/main.py ``weights_init``."""
    name = type(m).__name__
    if name.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)  # type: ignore[arg-type]
    elif name.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)  # type: ignore[arg-type]
        nn.init.zeros_(m.bias)  # type: ignore[arg-type]


def generator_net() -> nn.Module:
    """dcgan's ``Generator`` for 16 px images: ConvTranspose / BatchNorm / ReLU, Tanh out."""
    net = nn.Sequential(
        nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False),
        nn.BatchNorm2d(NGF * 2),
        nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False),
        nn.BatchNorm2d(NGF),
        nn.ReLU(True),
        nn.ConvTranspose2d(NGF, 1, 4, 2, 1, bias=False),
        nn.Tanh(),
    )
    net.apply(weights_init)
    return net


def discriminator_net(sigmoid: bool = True) -> nn.Module:
    """dcgan's ``Discriminator`` for 16 px images: strided Conv / BatchNorm / LeakyReLU."""
    layers: list[nn.Module] = [
        nn.Conv2d(1, NDF, 4, 2, 1, bias=False),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),
        nn.BatchNorm2d(NDF * 2),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),
    ]
    net = nn.Sequential(*layers, *([nn.Sigmoid()] if sigmoid else []), nn.Flatten(0))
    net.apply(weights_init)
    return net


def _images(seed: int) -> list[torch.Tensor]:
    gen = generator(seed)
    base = torch.linspace(-1, 1, 16)
    return [
        (
            base[None, None, :, None] * base[None, None, None, :]
            + 0.1 * torch.randn(8, 1, 16, 16, generator=gen)
        ).clamp(-1, 1)
        for _ in range(2)
    ]


def dcgan(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:pytorch/examples dcgan/main.py: Adam lr 2e-4 betas (0.5, 0.999) for both, BCELoss;
    D's step, then G's loss back through D (its gradient lands in D's ``.grad`` after D's step,
    and D zeroes before its own next backward). The twin forgets ``netD.zero_grad()``."""
    torch.manual_seed(0)
    net_g, net_d = generator_net(), discriminator_net()
    criterion = nn.BCELoss()
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    data = _images(0)
    run = LoopRun()
    with attached(attach, [(net_d, opt_d), (net_g, opt_g)], run):
        for i in range(steps):
            real = data[i % len(data)]
            if not planted:
                net_d.zero_grad()
            label = torch.full((len(real),), 1.0)
            err_real = criterion(net_d(real), label)
            err_real.backward()
            fake = net_g(torch.randn(len(real), NZ, 1, 1))
            label.fill_(0.0)
            err_fake = criterion(net_d(fake.detach()), label)
            err_fake.backward()
            opt_d.step()
            net_g.zero_grad()
            label.fill_(1.0)
            err_g = criterion(net_d(fake), label)
            err_g.backward()
            opt_g.step()
            run.losses.append((err_real + err_fake).item())
    return run


def wgan(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:martinarjovsky/WassersteinGAN main.py: RMSprop lr 5e-5, the critic's weights
    clamped to [-0.01, 0.01] through ``p.data`` before each critic step, 5 critic iterations per
    generator step, ``one`` / ``mone`` backwards. The twin forgets ``netD.zero_grad()``."""
    torch.manual_seed(0)
    net_g, net_d = generator_net(), discriminator_net(sigmoid=False)
    opt_d = torch.optim.RMSprop(net_d.parameters(), lr=5e-5)
    opt_g = torch.optim.RMSprop(net_g.parameters(), lr=5e-5)
    data = _images(1)
    run = LoopRun()
    with attached(attach, [(net_d, opt_d), (net_g, opt_g)], run):
        for i in range(steps):
            for p in net_d.parameters():
                p.requires_grad = True
            for j in range(5):
                for p in net_d.parameters():
                    p.data.clamp_(-0.01, 0.01)
                if not planted:
                    net_d.zero_grad()
                real = data[(i + j) % len(data)]
                err_real = net_d(real).mean()
                err_real.backward(torch.tensor(1.0))
                fake = net_g(torch.randn(len(real), NZ, 1, 1)).detach()
                err_fake = net_d(fake).mean()
                err_fake.backward(torch.tensor(-1.0))
                opt_d.step()
            for p in net_d.parameters():
                p.requires_grad = False  # the critic's gradients are not computed for G's step
            net_g.zero_grad()
            err_g = net_d(net_g(torch.randn(8, NZ, 1, 1))).mean()
            err_g.backward(torch.tensor(1.0))
            opt_g.step()
            run.losses.append((err_real - err_fake).item())
    return run


class VAE(nn.Module):
    """github:pytorch/examples vae/main.py ``VAE`` at 64 pixels, 8 hidden, 2 latents."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, 4)
        self.fc22 = nn.Linear(32, 4)
        self.fc3 = nn.Linear(4, 32)
        self.fc4 = nn.Linear(32, 64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h1 = F.relu(self.fc1(x.view(-1, 64)))
        mu, logvar = self.fc21(h1), self.fc22(h1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae_loss(
    recon: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor
) -> torch.Tensor:
    bce = F.binary_cross_entropy(recon, x.view(-1, 64), reduction="sum")
    return bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def vae(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adam lr 1e-3, BCE (sum) + KLD; the twin's step is a hand-written update that rebinds
    ``p.data = p - lr * g`` copies (a custom step the optimizer never writes through)."""
    torch.manual_seed(1)
    model = VAE()
    optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if planted:
        optimizer = _RebindingSGD(model.parameters(), lr=1e-3)
    gen = generator(1)
    data = [(torch.rand(16, 64, generator=gen) > 0.5).float() for _ in range(2)]
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x = data[step % len(data)]
            optimizer.zero_grad()
            recon, mu, logvar = model(x)
            loss = vae_loss(recon, x, mu, logvar)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item() / len(x))
    return run


class _RebindingSGD(torch.optim.Optimizer):
    """A custom step that computes the update out of place and writes nothing back."""

    def __init__(self, params: object, lr: float) -> None:
        super().__init__(params, {"lr": lr})  # type: ignore[arg-type]

    @torch.no_grad()
    def step(self, closure: object = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p = p - group["lr"] * p.grad  # the planted bug


LOOPS = (
    HealthyLoop(
        "dcgan",
        "github:pytorch/examples dcgan/main.py",
        "gan",
        "netD.zero_grad() forgotten",
        "grads_not_reset",
        dcgan,
    ),
    HealthyLoop(
        "wgan_weight_clipping",
        "github:martinarjovsky/WassersteinGAN main.py",
        "gan",
        "netD.zero_grad() forgotten",
        "grads_not_reset",
        wgan,
        steps=3,
    ),
    HealthyLoop(
        "vae",
        "github:pytorch/examples vae/main.py",
        "supervised",
        "a custom step that rebinds p instead of writing it",
        "step_did_not_move",
        vae,
    ),
)
