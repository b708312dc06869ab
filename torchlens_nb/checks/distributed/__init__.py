"""The checks kit under ``torch.distributed``: ranks, DTensor / FSDP2 evidence, the gather."""
