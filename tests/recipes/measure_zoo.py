"""Re-measure the zoo's ground truth: train every case and twin, score held-out data.

Each case trains its own model with its own optimizer and loss for ``zoo.MEASURE_STEPS`` steps
on 16 batches of its task in turn (seeds 1-16; seed 1 is the one triage reads), in the mode the
caller left it in, then scores held-out
data (seed 99): accuracy of the argmax, next-token accuracy for the language model. Prints one
line per case; the numbers are copied into ``zoo.MEASURED``. Not a test (minutes of CPU):

    PYTHONPATH=. .venv/bin/python tests/recipes/measure_zoo.py
"""

from __future__ import annotations

import math

import torch

from tests.recipes import zoo
from torchlens_nb.recipes._batches import call_model, primary_output, split_batch


def _accuracy(case: zoo.Case, model: torch.nn.Module) -> float:
    inputs, targets = split_batch(case.data(seed=99))
    with torch.no_grad():
        logits = primary_output(call_model(model, inputs))
    if logits.dim() == 3:  # next-token accuracy: position t predicts token t+1
        return float((logits[:, :-1].argmax(-1) == targets[:, 1:]).float().mean())
    return float((logits.argmax(-1) == targets).float().mean())


def measure(case: zoo.Case) -> str:
    arguments = case.arguments()
    model, optimizer, loss_fn = arguments["model"], arguments["optimizer"], arguments["loss_fn"]
    batches = [split_batch(case.data(seed=seed)) for seed in range(1, 17)]
    losses = []
    for step in range(zoo.MEASURE_STEPS):
        inputs, targets = batches[step % len(batches)]
        optimizer.zero_grad()
        loss = loss_fn(primary_output(call_model(model, inputs)), targets)
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            break
        loss.backward()
        optimizer.step()
    model.eval()
    last = sum(losses[-16:]) / len(losses[-16:])  # the mean over the last pass of the batches
    return f"loss {losses[0]:.3g} -> {last:.3g}, held-out acc {_accuracy(case, model):.2f}"


def main() -> None:
    torch.set_num_threads(1)
    for case in [*zoo.TWINS.values(), *(bug.case for bug in zoo.ZOO)]:
        print(f"{case.name!r}: {measure(case)!r},", flush=True)


if __name__ == "__main__":
    main()
