"""The autouse fixture of ``tests/conftest.py``: a test that leaks process state is the one
test that fails, the state is put back, and the next test runs on a clean process."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PLANTED = """
import signal

import torch
import torch.nn.modules.module as module_globals


def test_a_leak_of_grad_mode_a_hook_and_the_sigint_handler():
    torch.set_grad_enabled(False)
    module_globals.register_module_forward_hook(lambda module, args, output: None)
    signal.signal(signal.SIGINT, lambda signum, frame: None)


def test_the_next_test_finds_autograd_on_and_no_hook_left():
    assert torch.is_grad_enabled()
    assert len(module_globals._global_forward_hooks) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    x = torch.ones(2, requires_grad=True)
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
"""


def test_a_planted_leak_fails_its_own_test_only(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a subprocess: an in-process run drops the modules it imported from sys.modules
    # afterwards, torch._dynamo among them, whose C++ operator registrations stay, so this
    # process's next lazy import of it failed ("Only a single TORCH_LIBRARY", in
    # torch.optim's first use when this file ran first)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    pytester.makeconftest("from tests.conftest import leaves_the_process_as_it_found_it\n")
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    # the leaking test passes its call and fails at its teardown; the next one passes
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_a_leak_of_grad_mode_a_hook_and_the_sigint_handler*",
            "*flag grad_enabled: True -> False*",
            "*_global_forward_hooks: 0 -> 1 entries*",
            "*SIGINT handler*",
        ]
    )
