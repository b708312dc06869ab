"""``tl.debug``: analyses of a trace, a model or a tensor, each returning a typed report."""

__all__: list[str] = []
