"""The session: ``ChecksSession``, its engine and sites (S-A to S-D), step accounting, the kept
batch and the assembly of the immutable ``CheckReport``."""
