"""Sequence loops of pytorch/examples: a word-level LSTM and LBFGS on sine waves."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._loop import Attach, HealthyLoop, LoopRun, TriageSetup, attached, generator

NTOKENS, BPTT, BATCH = 50, 8, 4


class RNNModel(nn.Module):
    """github:pytorch/examples word_language_model/model.py ``RNNModel`` (LSTM, tied off):
    embedding, dropout, LSTM, linear decoder, log_softmax; uniform(-0.1, 0.1) init."""

    def __init__(
        self, ntoken: int = NTOKENS, ninp: int = 16, nhid: int = 16, nlayers: int = 2
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.2)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(
        self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch.zeros(self.nlayers, bsz, self.nhid),
            torch.zeros(self.nlayers, bsz, self.nhid),
        )


def _tokens() -> torch.Tensor:
    """A repeating token stream (learnable), batchified as ``batchify`` does."""
    gen = generator(1111)
    pattern = torch.randint(0, NTOKENS, (23,), generator=gen)
    stream = pattern.repeat(12)
    return stream[: (len(stream) // BATCH) * BATCH].view(BATCH, -1).t().contiguous()


def word_language_model(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """The default recipe: lr 20 plain SGD (written there as ``p.data.add_(p.grad, alpha=-lr)``,
    here ``torch.optim.SGD(lr=20)``: the same update through an optimizer a session can hook),
    ``clip_grad_norm_(0.25)``, NLLLoss, the hidden state repackaged each batch. The twin forgets
    ``model.zero_grad()``."""
    torch.manual_seed(1111)
    model = RNNModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=20)
    data = _tokens()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        model.train()
        hidden = model.init_hidden(BATCH)
        for step in range(steps):
            i = (step * BPTT) % (len(data) - 1 - BPTT)
            x, targets = data[i : i + BPTT], data[i + 1 : i + 1 + BPTT].reshape(-1)
            if not planted:
                model.zero_grad()
            hidden = (hidden[0].detach(), hidden[1].detach())
            output, hidden = model(x, hidden)
            loss = F.nll_loss(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            run.losses.append(loss.item())
    return run


class Sequence(nn.Module):
    """github:pytorch/examples time_sequence_prediction/train.py ``Sequence``: two LSTMCells
    and a linear head, in double precision (hidden 12 for 51)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 12)
        self.lstm2 = nn.LSTMCell(12, 12)
        self.linear = nn.Linear(12, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = c1 = h2 = c2 = torch.zeros(x.size(0), 12, dtype=torch.double)
        outputs = []
        for x_t in x.split(1, dim=1):
            h1, c1 = self.lstm1(x_t, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


def _sine() -> torch.Tensor:
    """generate_sine_wave.py: shifted sine waves, period 20, length 12 (1,000 there)."""
    shift = torch.randint(-80, 80, (4, 1), generator=generator(2)).double()
    return torch.sin((torch.arange(12, dtype=torch.double) + shift) / 20 * 2 * torch.pi / 3.14)


def _sine_setup() -> TriageSetup:
    torch.manual_seed(0)
    seq = Sequence().double()
    data = _sine()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)  # max_iter 20 as there
    return TriageSetup(seq, (data[:, :-1], data[:, 1:]), nn.MSELoss(), optimizer)


def time_sequence_prediction(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """LBFGS lr 0.8 with a closure that zeroes, runs forward and backward (up to 20 backwards
    per ``step``), MSELoss, float64. The twin's closure forgets ``optimizer.zero_grad()``."""
    setup = _sine_setup()
    seq, optimizer = setup.model, setup.optimizer
    x, target = setup.batch
    criterion = nn.MSELoss()
    run = LoopRun()
    with attached(attach, [(seq, optimizer)], run):
        for _ in range(steps):

            def closure() -> float:
                if not planted:
                    optimizer.zero_grad()
                loss = criterion(seq(x), target)
                loss.backward()
                return loss.item()

            run.losses.append(float(optimizer.step(closure)))
    return run


LOOPS = (
    HealthyLoop(
        "word_language_model",
        "github:pytorch/examples word_language_model/main.py",
        "supervised",
        "model.zero_grad() forgotten",
        "grads_not_reset",
        word_language_model,
    ),
    HealthyLoop(
        "time_sequence_prediction",
        "github:pytorch/examples time_sequence_prediction/train.py",
        "supervised",
        "the closure forgets optimizer.zero_grad()",
        "grads_not_reset",
        time_sequence_prediction,
        _sine_setup,
        steps=3,
    ),
)
