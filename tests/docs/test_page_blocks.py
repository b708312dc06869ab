"""How the docs-run test reads a page: its Python blocks, and the values comments state."""

from __future__ import annotations

import pathlib

import pytest

from tests.docs import _page_blocks, _run_page

PAGE = """# A page

```python
x = [1, 2]
x  # [1, 2]
len(x)  # the length, in words
```

```bash
make docs
```

```{code-block} python
:caption: `torchlens_nb/x.py` (an excerpt: not run)

not_run()
```
"""


def test_only_python_fences_are_blocks_in_page_order() -> None:
    (block,) = _page_blocks.python_blocks(PAGE)
    assert block.source == "x = [1, 2]\nx  # [1, 2]\nlen(x)  # the length, in words\n"
    assert block.line == 4  # the page line of `x = [1, 2]`


def test_a_literal_comment_states_a_value_and_prose_does_not() -> None:
    (block,) = _page_blocks.python_blocks(PAGE)
    assert _page_blocks.stated_values(block.source) == {2: "[1, 2]"}


def test_a_stated_value_that_the_code_does_not_give_fails_the_block() -> None:
    checked = _page_blocks.with_checks("x = 3\nx  # 4\n", "check")
    with pytest.raises(_run_page.StatedValueError, match=r"states 4, got 3"):
        exec(checked, {"check": _run_page._check})
    exec(_page_blocks.with_checks("x = 4\nx  # 4\n", "check"), {"check": _run_page._check})


def test_every_python_excerpt_that_is_not_run_names_its_file() -> None:
    # a `{code-block} python` is how a page shows code that is not typed into a notebook
    root = pathlib.Path(__file__).resolve().parents[2]
    uncaptioned = [
        page.name
        for page in (root / "docs").rglob("*.md")
        for part in page.read_text(encoding="utf-8").split("```{code-block} python\n")[1:]
        if not part.lstrip(" ").startswith(":caption:")
    ]
    assert uncaptioned == []
