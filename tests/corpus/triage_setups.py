"""Healthy set-ups for triage only (issue 41): ordinary recipes that triage once accused.

Each builds the user's objects exactly as the recipe it names does (optimizer, lr, schedule,
loss arguments, tuple outputs), small enough for a CPU second, from a fixed seed. None of them
holds a bug: triage must give no warn or fail row on any (tests/recipes/test_healthy.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._loop import TriageSetup, generator, labelled


def _warmup_linear(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> object:
    """transformers' get_linear_schedule_with_warmup, written out (lr 0 at step 0)."""

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class TinyTransformerLM(nn.Module):
    """nanoGPT-style: token + position embeddings, 2 pre-norm encoder layers (causal mask),
    tied head."""

    def __init__(self, vocab: int = 64, width: int = 32, length: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(length, width)
        layer = nn.TransformerEncoderLayer(
            width, 4, 4 * width, dropout=0.1, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.embed(ids) + self.pos(torch.arange(t))
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


def transformer_adamw_warmup() -> TriageSetup:
    """A GPT-style LM as most transformer code trains it: AdamW(lr 5e-4, weight_decay 0.01 on
    every parameter, LayerNorm included), linear warmup from 0 over 100 steps (HF's
    get_linear_schedule_with_warmup), shifted next-token cross-entropy."""
    torch.manual_seed(0)
    model = TinyTransformerLM()
    ids = torch.randint(0, 64, (8, 16), generator=generator(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    scheduler = _warmup_linear(optimizer, 100, 1000)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[:, :-1].reshape(-1, 64), labels[:, 1:].reshape(-1))

    return TriageSetup(model, (ids, ids.clone()), loss_fn, optimizer, scheduler)


class TinySegmenter(nn.Module):
    """conv-BN-ReLU x2 -> 1x1 conv to 5 classes per pixel (torchvision FCN-style head)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
        )
        self.classifier = nn.Conv2d(16, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.body(x))


def segmentation_ignore_index() -> TriageSetup:
    """torchvision references/segmentation: per-pixel CrossEntropyLoss(ignore_index=255), SGD
    momentum 0.9, lr 0.02, weight decay 1e-4; a border of void pixels (255)."""
    torch.manual_seed(0)
    gen = generator(2)
    x = torch.randn(4, 3, 16, 16, generator=gen)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0.5).long()
    y[:, :2], y[:, -2:] = 255, 255
    model = TinySegmenter()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(ignore_index=255), optimizer)


def label_smoothed_classifier() -> TriageSetup:
    """torchvision references/classification: CrossEntropyLoss(label_smoothing=0.1), SGD
    momentum 0.9 lr 0.1 (scaled from 0.5 for batch 1024), a small ResNet-ish CNN."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    x, y = labelled(1, (32, 3, 8, 8), 10, seed=3)[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(label_smoothing=0.1), optimizer)


class MeanPooledEncoder(nn.Module):
    """A sentence-transformers-style classifier: a BERT encoder built from config, mean pooling
    over the tokens (the encoder's pooler is left unused, as MiniLM fine-tunes do), a linear
    head."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=32,
        )
        self.encoder = BertModel(config)
        self.head = nn.Linear(32, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        states = hidden.last_hidden_state
        weights = attention_mask.unsqueeze(-1).float()
        return self.head((states * weights).sum(1) / weights.sum(1))


def bert_fine_tune() -> TriageSetup:
    """The Hugging Face fine-tuning recipe on a small BERT built from config: AdamW lr 5e-5,
    weight decay 0.01 except biases and LayerNorm weights, linear warmup over 10% of steps."""
    torch.manual_seed(0)
    model = MeanPooledEncoder()
    ids = torch.randint(1, 100, (16, 12), generator=generator(4))
    mask = torch.ones_like(ids)
    labels = (ids[:, 0] > 50).long()
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
            "weight_decay": 0.01,
        },
        {
            "params": [p for n, p in model.named_parameters() if n.endswith(no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=5e-5)
    scheduler = _warmup_linear(optimizer, 10, 100)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    return TriageSetup(model, batch, nn.CrossEntropyLoss(), optimizer, scheduler)


class VAE(nn.Module):
    """pytorch/examples vae/main.py: 784-400-20 encoder, returns (recon, mu, logvar)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(64, 48), nn.Linear(48, 8), nn.Linear(48, 8)
        self.fc3, self.fc4 = nn.Linear(8, 48), nn.Linear(48, 64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae_tuple_output() -> TriageSetup:
    """pytorch/examples vae: Adam 1e-3, loss_function(recon, x, mu, logvar) = BCE(sum) + KLD;
    the loss unpacks the model's whole tuple output."""
    torch.manual_seed(0)
    x = torch.rand(32, 64, generator=generator(5))

    def loss_fn(output: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        recon, mu, logvar = output
        bce = F.binary_cross_entropy(recon, target, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return bce + kld

    model = VAE()
    return TriageSetup(model, (x, x.clone()), loss_fn, torch.optim.Adam(model.parameters(), 1e-3))


def sgd_mlp() -> TriageSetup:
    """The PyTorch 60-minute blitz's plain SGD(lr=0.01, momentum=0.9) on a small MLP."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    x, y = labelled(1, (64, 20), 10, seed=6)[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), optimizer)


def tfidf_linear() -> TriageSetup:
    """scikit-learn-style TF-IDF rows (L2-normalised, sparse, std ~0.06) into a linear
    classifier, Adam 1e-3: what a text-classification tutorial does."""
    torch.manual_seed(0)
    gen = generator(7)
    counts = (torch.rand(64, 300, generator=gen) < 0.03).float() * torch.rand(
        64, 300, generator=gen
    )
    y = (counts[:, :150].sum(1) > counts[:, 150:].sum(1)).long()
    x = counts / counts.norm(dim=1, keepdim=True).clamp_min(1e-12)
    model = nn.Linear(300, 2)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))


def imagenet_normalised_cnn() -> TriageSetup:
    """Images in [0, 1] normalised with ImageNet's mean/std (torchvision's Normalize), a
    conv net with a biased conv feeding BatchNorm (as many ports write it), SGD 0.01."""
    torch.manual_seed(0)
    gen = generator(8)
    raw = torch.rand(16, 3, 16, 16, generator=gen) * 0.5
    y = (raw[:, 0].mean((1, 2)) > raw[:, 2].mean((1, 2))).long()
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 2),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return TriageSetup(model, ((raw - mean) / std, y), nn.CrossEntropyLoss(), optimizer)


def frozen_backbone_held() -> TriageSetup:
    """mmpretrain's frozen_stages: the stem frozen with requires_grad=False while the optimizer
    is built from model.parameters() as usual (frozen on purpose; Adam skips .grad None)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
    )
    for p in model[0].parameters():
        p.requires_grad = False
    x, y = labelled(1, (64, 20), 10, seed=9)[0]
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))


def regression_mse() -> TriageSetup:
    """A (N, 1) regression head against (N, 1) targets, Adam 1e-3, MSELoss."""
    torch.manual_seed(0)
    gen = generator(10)
    x = torch.randn(64, 8, generator=gen)
    y = x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(64, 1, generator=gen)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    return TriageSetup(model, (x, y), nn.MSELoss(), torch.optim.Adam(model.parameters()))


def multilabel_bce() -> TriageSetup:
    """Multi-hot targets with BCEWithLogitsLoss(pos_weight=...), Adam 1e-3."""
    torch.manual_seed(0)
    gen = generator(11)
    x = torch.randn(64, 20, generator=gen)
    y = (x[:, :5] > 0.8).float()
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))
    loss = nn.BCEWithLogitsLoss(pos_weight=torch.full((5,), 3.0))
    return TriageSetup(model, (x, y), loss, torch.optim.Adam(model.parameters()))


def lstm_packed_classifier() -> TriageSetup:
    """pytorch text-classification tutorials: padded token ids packed by their lengths into an
    LSTM, the final hidden state to a linear head; Adam 1e-3."""
    torch.manual_seed(0)
    gen = generator(12)
    lengths = torch.randint(3, 13, (32,), generator=gen)
    ids = torch.randint(1, 24, (32, 12), generator=gen)
    ids[torch.arange(12).expand(32, 12) >= lengths[:, None]] = 0
    labels = ids[torch.arange(32), lengths - 1] // 6

    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(24, 32, padding_idx=0)
            self.rnn = nn.LSTM(32, 48, batch_first=True)
            self.head = nn.Linear(48, 4)

        def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            packed = nn.utils.rnn.pack_padded_sequence(
                self.embed(ids), lengths, batch_first=True, enforce_sorted=False
            )
            _, (hidden, _) = self.rnn(packed)
            return self.head(hidden[-1])

    model = Packed()
    batch = {"ids": ids, "lengths": lengths, "labels": labels}
    return TriageSetup(model, batch, nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: conv-BN-ReLU-conv-BN plus the identity."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + x)


def resnet_nesterov() -> TriageSetup:
    """A CIFAR-style ResNet recipe (kuangliu/pytorch-cifar): SGD(lr 0.1, momentum 0.9,
    nesterov, weight_decay 5e-4) on every parameter, CrossEntropyLoss."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        BasicBlock(16),
        BasicBlock(16),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    x, y = labelled(1, (32, 3, 8, 8), 10, seed=13)[0]
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4
    )
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), optimizer)


class GRURegressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(1, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(x)
        return self.head(states[:, -1])


def gru_time_series() -> TriageSetup:
    """A sequence-to-one forecaster (the usual "predict the next value of a sine" tutorial):
    GRU over 20 steps, the last state to a linear head, MSELoss, Adam 1e-3."""
    torch.manual_seed(0)
    gen = generator(14)
    phase = torch.rand(32, 1, generator=gen) * 6.28
    t = torch.arange(21).float() * 0.3
    wave = torch.sin(phase + t)
    x, y = wave[:, :20].unsqueeze(-1), wave[:, 20:]
    model = GRURegressor()
    return TriageSetup(model, (x, y), nn.MSELoss(), torch.optim.Adam(model.parameters(), 1e-3))


class BagClassifier(nn.Module):
    """The PyTorch text-classification tutorial's EmbeddingBag model."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(50, 16)
        self.fc = nn.Linear(16, 4)
        self.embedding.weight.data.uniform_(-0.5, 0.5)
        self.fc.weight.data.uniform_(-0.5, 0.5)
        self.fc.bias.data.zero_()

    def forward(self, text: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embedding(text, offsets))


def embedding_bag_sgd5() -> TriageSetup:
    """pytorch/tutorials beginner_source/text_sentiment_ngrams_tutorial.py: EmbeddingBag with
    offsets, CrossEntropyLoss, SGD at lr 5 (its recipe, with a StepLR per epoch)."""
    torch.manual_seed(0)
    gen = generator(15)
    lengths = torch.randint(3, 9, (32,), generator=gen)
    text = torch.randint(0, 50, (int(lengths.sum()),), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    labels = torch.stack([t[:1] for t in torch.split(text, lengths.tolist())]).squeeze(1) % 4
    model = BagClassifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    batch = {"text": text, "offsets": offsets, "label": labels}
    return TriageSetup(model, batch, nn.CrossEntropyLoss(), optimizer, scheduler)


def conv_autoencoder() -> TriageSetup:
    """A convolutional autoencoder on [0, 1] images: MSE between the reconstruction and the
    input, Adam 1e-3."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 2, stride=2),
        nn.ReLU(),
        nn.ConvTranspose2d(8, 1, 2, stride=2),
        nn.Sigmoid(),
    )
    coarse = torch.rand(16, 1, 4, 4, generator=generator(16))
    x = F.interpolate(coarse, size=(16, 16), mode="bilinear", align_corners=False)  # smooth
    return TriageSetup(model, (x, x.clone()), nn.MSELoss(), torch.optim.Adam(model.parameters()))


def binary_bce_logits() -> TriageSetup:
    """A binary classifier with one logit, (N, 1) float targets, BCEWithLogitsLoss, Adam."""
    torch.manual_seed(0)
    gen = generator(17)
    x = torch.randn(64, 10, generator=gen)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    return TriageSetup(model, (x, y), nn.BCEWithLogitsLoss(), torch.optim.Adam(model.parameters()))


def tabular_bn_dropout_adamw() -> TriageSetup:
    """A tabular MLP with BatchNorm1d and dropout, AdamW(lr 1e-3, weight_decay 1e-2 on every
    parameter): the fastai-style tabular recipe."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(20, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(64, 32),
        nn.BatchNorm1d(32),
        nn.ReLU(),
        nn.Linear(32, 5),
    )
    x, y = labelled(1, (64, 20), 5, seed=18)[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), optimizer)


class CharGRU(nn.Module):
    """A char-rnn: embedding -> 2-layer GRU -> per-step logits."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(30, 32)
        self.rnn = nn.GRU(32, 64, num_layers=2, batch_first=True)
        self.head = nn.Linear(64, 30)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(self.embed(ids))
        return self.head(states)


def char_gru_lm() -> TriageSetup:
    """karpathy/char-rnn's recipe in PyTorch: next-character cross-entropy over (B*T), inputs
    and targets shifted by one in the batch itself, Adam 2e-3."""
    torch.manual_seed(0)
    text = torch.randint(0, 30, (8, 33), generator=generator(19))

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1))

    model = CharGRU()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    return TriageSetup(model, (text[:, :-1], text[:, 1:]), loss_fn, optimizer)


def rmsprop_mlp() -> TriageSetup:
    """An MLP with RMSprop(lr 1e-3), the Keras-era default, CrossEntropyLoss."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    x, y = labelled(1, (64, 20), 10, seed=20)[0]
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), optimizer)


def adagrad_logistic() -> TriageSetup:
    """Multinomial logistic regression with Adagrad(lr 0.1), F.cross_entropy as the loss."""
    torch.manual_seed(0)
    model = nn.Linear(20, 3)
    x, y = labelled(1, (64, 20), 3, seed=21)[0]
    return TriageSetup(model, (x, y), F.cross_entropy, torch.optim.Adagrad(model.parameters(), 0.1))


def inverse_weighted_ce() -> TriageSetup:
    """An imbalanced 3-class task with CrossEntropyLoss(weight = max_count / count): the rare
    classes get the large weights, as the PyTorch forum recommends."""
    torch.manual_seed(0)
    gen = generator(22)
    x = torch.randn(64, 20, generator=gen)
    score = x[:, 0] + 0.5 * x[:, 1]
    y = torch.zeros(64, dtype=torch.long)
    y[score > 1.2] = 1
    y[score < -1.5] = 2
    counts = torch.bincount(y, minlength=3).float().clamp_min(1)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3))
    loss = nn.CrossEntropyLoss(weight=counts.max() / counts)
    return TriageSetup(model, (x, y), loss, torch.optim.Adam(model.parameters()))


def dropout_mlp_sgd() -> TriageSetup:
    """The dropout paper's MLP recipe (Srivastava et al. 2014): 4 hidden ReLU layers of 128,
    dropout 0.5, SGD momentum 0.9 at lr 0.1."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    width = 20
    for _ in range(4):
        layers += [nn.Linear(width, 128), nn.ReLU(), nn.Dropout(0.5)]
        width = 128
    model = nn.Sequential(*layers, nn.Linear(128, 10))
    x, y = labelled(1, (64, 20), 10, seed=23)[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return TriageSetup(model, (x, y), nn.CrossEntropyLoss(), optimizer)


SETUPS: dict[str, Callable[[], TriageSetup]] = {
    "transformer_adamw_warmup": transformer_adamw_warmup,
    "segmentation_ignore_index": segmentation_ignore_index,
    "label_smoothed_classifier": label_smoothed_classifier,
    "bert_fine_tune": bert_fine_tune,
    "vae_tuple_output": vae_tuple_output,
    "sgd_mlp": sgd_mlp,
    "tfidf_linear": tfidf_linear,
    "imagenet_normalised_cnn": imagenet_normalised_cnn,
    "frozen_backbone_held": frozen_backbone_held,
    "regression_mse": regression_mse,
    "multilabel_bce": multilabel_bce,
    "lstm_packed_classifier": lstm_packed_classifier,
    "resnet_nesterov": resnet_nesterov,
    "gru_time_series": gru_time_series,
    "embedding_bag_sgd5": embedding_bag_sgd5,
    "conv_autoencoder": conv_autoencoder,
    "binary_bce_logits": binary_bce_logits,
    "tabular_bn_dropout_adamw": tabular_bn_dropout_adamw,
    "char_gru_lm": char_gru_lm,
    "rmsprop_mlp": rmsprop_mlp,
    "adagrad_logistic": adagrad_logistic,
    "inverse_weighted_ce": inverse_weighted_ce,
    "dropout_mlp_sgd": dropout_mlp_sgd,
}
"""23 healthy triage-only set-ups; with the corpus loops' ``triage_setup()`` the population."""
