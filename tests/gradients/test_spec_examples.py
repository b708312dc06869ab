"""The spec's examples for grad_health, dead_neurons, dtype_range and trace.audit(), verbatim
except ``import torchlens as tl`` -> ``import torchlens_nb as tl`` (debug_reference.txt)."""

from __future__ import annotations

import textwrap

import pytest

EXAMPLES = {
    "grad_health": (
        """
        import torch
        from torch import nn
        import torchlens_nb as tl
        from torchlens_nb.options import CaptureOptions
        trace = tl.trace(nn.Linear(2, 1), torch.ones(1, 2), capture=CaptureOptions(save_grads=True))
        trace.backward(trace[trace.output_layers[0]].out.sum())
        report = tl.debug.grad_health(trace).to_pandas()
        print(report.shape, report.attrs["bwd"])
    """,
        "(1, 12) 0\n",
    ),
    "dead_neurons": (
        """
        import torch
        from torch import nn
        import torchlens_nb as tl
        trace = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0], [-3.0, 4.0]]))
        report = tl.debug.dead_neurons(trace).to_pandas()
        print(report.columns.tolist())
    """,
        "['op', 'module', 'total_units', 'dead_count', 'dead_frac', 'sample_dead_idx', "
        "'reason', 'source_line']\n",
    ),
    "dtype_range": (
        """
        import torch
        from torch import nn
        import torchlens_nb as tl
        trace = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]]))
        audit = tl.debug.dtype_range(trace)
        print(len(audit.findings), audit.num_audited_ops <= audit.num_ops)
    """,
        "0 True\n",
    ),
    "audit": (
        """
        import torch
        from torch import nn
        import torchlens_nb as tl
        trace = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]]))
        report = trace.audit()
        print(report.checks_run, len(report.skipped) > 0)
    """,
        "('find_nan', 'bisect_nan', 'dtype_range') True\n",
    ),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_spec_example_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    source, expected = EXAMPLES[name]
    exec(compile(textwrap.dedent(source), f"<spec {name}>", "exec"), {})
    assert capsys.readouterr().out == expected
