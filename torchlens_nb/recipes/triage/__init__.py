"""``tl.recipes.triage`` and what only it uses: its arguments, the checks it runs in order, the
root-cause ranking, its progress line, the training-setup read, the step-size run, the optimizer
rebuild and the output-vs-loss form check."""
