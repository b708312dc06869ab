"""Loss recipes run once, without training: ``init_loss`` and ``random_input_test``."""
