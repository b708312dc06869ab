"""Fine-tunes through a trainer that owns the loop: the Hugging Face Trainer with its defaults
(``adamw_torch_fused``, lr 5e-5, linear schedule) plus a long warm-up and gradient accumulation,
on a tiny BERT built from a config (no download)."""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from torch import nn

from ._loop import Attach, HealthyLoop, LoopRun, attached, generator


class _Examples(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Token sequences whose label is whether token 7 occurs (learnable)."""

    def __init__(self, count: int) -> None:
        gen = generator(3)
        self.ids = torch.randint(8, 100, (count, 12), generator=gen)
        marked = torch.rand(count, generator=gen) < 0.5
        self.ids[marked, 3] = 7
        self.labels = marked.long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones_like(self.ids[i]),
            "labels": self.labels[i],
        }


def hf_trainer(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:huggingface/transformers src/transformers/trainer.py with TrainingArguments'
    defaults (``adamw_torch_fused``, lr 5e-5, weight decay 0, linear schedule) plus
    ``warmup_steps=4000`` and ``gradient_accumulation_steps=2``; BERT (2 layers, hidden 32) from
    ``BertConfig``. The optimizer is made the Trainer's way (``create_optimizer_and_scheduler``)
    before ``train()``, which keeps it. The twin's callback re-initialises the classifier at
    every step begin (a "reset head" callback left in)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    config.num_labels = 2
    model = transformers.BertForSequenceClassification(config)
    run = LoopRun()

    class Record(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if planted:
                classifier = model.classifier
                assert isinstance(classifier, nn.Linear)
                classifier.reset_parameters()

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            if logs and "loss" in logs:
                run.losses.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=2,
            warmup_steps=4000,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        )
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=_Examples(16 * steps), callbacks=[Record()]
        )
        trainer.remove_callback(transformers.PrinterCallback)  # the logs stay in the run
        trainer.create_optimizer_and_scheduler(num_training_steps=steps)
        with attached(attach, [(model, trainer.optimizer)], run):
            trainer.train()
    return run


def accelerate_loop(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:huggingface/accelerate examples/by_feature/gradient_accumulation.py: AdamW lr
    2e-5 there (1e-3 here for a short run), ``accelerator.prepare``, ``with
    accelerator.accumulate(model)`` around each batch (2 per step), ``accelerator.backward``,
    ``optimizer.step(); optimizer.zero_grad()`` every batch (the wrapper skips the inner step
    until the accumulation is complete). The session is handed the prepared optimizer (an
    ``AcceleratedOptimizer``). The twin forgets ``optimizer.zero_grad()``."""
    import accelerate

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accelerator = accelerate.Accelerator(gradient_accumulation_steps=2, cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    gen = generator(5)
    projection = torch.randn(16, 4, generator=gen)
    data = []
    for _ in range(4):
        x = torch.randn(16, 16, generator=gen)
        data.append((x, (x @ projection).argmax(1)))
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for i in range(2 * steps):
            x, y = data[i % len(data)]
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                if not planted:
                    optimizer.zero_grad()
            run.losses.append(loss.item())
    accelerate.state.AcceleratorState._reset_state()
    accelerate.state.PartialState._reset_state()
    return run


def lightning_loop(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:Lightning-AI/pytorch-lightning docs (the LightningModule quick start): a module
    whose ``configure_optimizers`` returns Adam lr 1e-3, ``Trainer(max_steps=...)`` with
    automatic optimization (Lightning zeroes, and steps through ``optimizer.step(closure)``).
    The optimizer is made first and returned by ``configure_optimizers``, so the session can be
    handed it. The twin switches to manual optimization and forgets ``opt.zero_grad()``."""
    import lightning as pl

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    run = LoopRun()

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.automatic_optimization = not planted

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            run.losses.append(loss.item())
            if planted:
                opt = self.optimizers()
                assert not isinstance(opt, list)
                self.manual_backward(loss)
                opt.step()  # the planted bug: no opt.zero_grad()
                return None
            return loss

        def configure_optimizers(self) -> Any:
            return optimizer

    gen = generator(9)
    projection = torch.randn(16, 4, generator=gen)
    xs = torch.randn(16 * steps, 16, generator=gen)
    dataset = torch.utils.data.TensorDataset(xs, (xs @ projection).argmax(1))
    loader = torch.utils.data.DataLoader(dataset, batch_size=16)
    module = Classifier()
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with attached(attach, [(module, optimizer)], run):
        trainer.fit(module, loader)
    return run


LOOPS = (
    HealthyLoop(
        "hf_trainer",
        "github:huggingface/transformers src/transformers/trainer.py",
        "trainer",
        "a callback re-initialises the classifier at every step",
        "param_written_outside_step",
        hf_trainer,
        steps=4,
    ),
    HealthyLoop(
        "accelerate",
        "github:huggingface/accelerate examples/by_feature/gradient_accumulation.py",
        "trainer",
        "optimizer.zero_grad() forgotten",
        "grads_not_reset",
        accelerate_loop,
    ),
    HealthyLoop(
        "lightning",
        "github:Lightning-AI/pytorch-lightning docs (LightningModule)",
        "trainer",
        "manual optimization without opt.zero_grad()",
        "grads_not_reset",
        lightning_loop,
    ),
)
