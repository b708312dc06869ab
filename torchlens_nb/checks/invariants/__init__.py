"""The per-step invariants: fresh gradients, frozen parameters, the optimizer roster, steps that
move what they were given, writes outside the step, replicas that agree."""
