"""The checks kit where people train: trainer callbacks, each importing its framework lazily.

* ``torchlens_nb.integrations.transformers.ChecksCallback``: a ``transformers.TrainerCallback``
  for the Hugging Face ``Trainer`` (extra ``torchlens_nb[transformers]``);
* ``torchlens_nb.integrations.lightning.ChecksCallback``: a ``lightning.pytorch.Callback`` for
  ``lightning.Trainer.fit`` (extra ``torchlens_nb[lightning]``).

Accelerate needs no adapter: ``tl.debug.ChecksSession(model, optimizer,
scaler=accelerator.scaler)`` takes what ``accelerator.prepare`` returns (docs/integrations).
Importing this package imports no framework; importing a submodule imports its own.
"""

__all__ = ["lightning", "transformers"]
"""The submodules, one per trainer (a star import of this package imports both frameworks)."""
