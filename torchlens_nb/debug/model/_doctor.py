"""``tl.report.doctor``: environment and model compatibility rows.

The doctor never runs the model: it inspects the installed stack, the model's parameters,
wrappers and tensors, and the input tree. Statuses are ``pass``, ``known_broken``, ``scope`` and
``not_tested``; severities ``ok``, ``info``, ``warning`` and ``error``. The report classes live in
``report/_model.py``; the spec spells the call ``tl.report.doctor``, served from here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import shutil
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from ..._version import __version__
from ...capture import opaque_modules
from ...report import Finding, Table, Unavailable, frozen_mapping
from ...report._model import FINDING_SEVERITY, DoctorCheck, DoctorReport
from ._belt import BELT, unreached


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def capabilities() -> dict[str, bool]:
    """Feature flags of the running torch, probed without side effects."""
    dynamo = sys.modules.get("torch._dynamo")
    return {
        "HAS_TORCH_FUNCTION_MODE": hasattr(torch.overrides, "TorchFunctionMode"),
        "HAS_GLOBAL_MODULE_HOOKS_ALWAYS_CALL": "always_call"
        in torch.nn.modules.module.register_module_forward_hook.__code__.co_varnames,
        "HAS_SET_STANCE": hasattr(torch.compiler, "set_stance"),
        "HAS_DYNAMO_COMPILE_COUNTERS": dynamo is not None
        or importlib.util.find_spec("torch._dynamo") is not None,
        "HAS_MULTI_GRAD_HOOK": hasattr(torch.autograd.graph, "register_multi_grad_hook"),
        "HAS_POST_ACCUMULATE_GRAD_HOOK": hasattr(
            torch.Tensor, "register_post_accumulate_grad_hook"
        ),
        "HAS_FOREACH_NORM": hasattr(torch, "_foreach_norm"),
        "HAS_FLOP_COUNTER": importlib.util.find_spec("torch.utils.flop_counter") is not None,
        "HAS_CUDA": torch.cuda.is_available(),
        "HAS_DISTRIBUTED": torch.distributed.is_available(),
        "HAS_GRAPHVIZ_DOT": shutil.which("dot") is not None,
        "HAS_GRAPHVIZ_PY": importlib.util.find_spec("graphviz") is not None,
        "HAS_PANDAS": importlib.util.find_spec("pandas") is not None,
        "HAS_PLOTLY": importlib.util.find_spec("plotly") is not None,
        "HAS_ANYWIDGET": importlib.util.find_spec("anywidget") is not None,
        "HAS_TRANSFORMERS": importlib.util.find_spec("transformers") is not None,
    }


def _pytorch_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    return [DoctorCheck("pytorch", "PyTorch", "pass", "ok", True, f"torch {torch.__version__}", "")]


def _capabilities_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    missing = sorted(k for k, v in caps.items() if not v and k not in _OPTIONAL_CAPS)
    optional = sorted(k for k, v in caps.items() if not v and k in _OPTIONAL_CAPS)
    return [
        DoctorCheck(
            "torch_capabilities",
            "torch capabilities",
            "known_broken" if missing else "pass",
            "error" if missing else "ok",
            not missing,
            f"{sum(caps.values())}/{len(caps)} available"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; optional absent: {', '.join(optional)}" if optional else ""),
            "upgrade torch (tested on 2.13)" if missing else "",
        )
    ]


def _wrapper_bindings_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    return [_wrapper_bindings_row()]


def _panel_bundles_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    return [_panel_bundles_row()]


def _belt_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    """How many of the belt's torch callables reach the capture's recorder, measured now
    (``_belt.py``: one capture of the 44 callables of :data:`~._belt.BELT` on tiny tensors)."""
    missed = unreached()
    details = (
        f"{len(BELT) - len(missed)} of {len(BELT)} reach the recorder (torch functions, Tensor "
        "methods, operators and nn.functional calls run on tiny tensors in this process)"
    )
    if missed:
        details += f"; not reaching it: {', '.join(missed)}"
    else:
        details += (
            "; ops inside TorchScript modules, torch.vmap and C++ extensions stay one op each "
            "(the capture_scope row names scripted submodules)"
        )
    return [
        DoctorCheck(
            "mechanical_belt",
            "mechanical belt coverage",
            "scope" if missed else "pass",
            "warning" if missed else "ok",
            not missed,
            details,
            "these callables skip torch-function handling in this process (something replaced "
            "or wrapped them): tl.trace does not record them as ops, and their results enter "
            "the trace as inputs; find the patch (e.g. torch.tanh.__module__) and trace without it"
            if missed
            else "",
        )
    ]


def _cuda_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    return [
        DoctorCheck(
            "cuda",
            "CUDA",
            "pass" if caps["HAS_CUDA"] else "scope",
            "info",
            caps["HAS_CUDA"],
            "available" if caps["HAS_CUDA"] else "no CUDA device: CPU only",
            "",
        )
    ]


def _graphviz_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    return [
        DoctorCheck(
            "graphviz",
            "Graphviz dot",
            "pass" if caps["HAS_GRAPHVIZ_DOT"] else "known_broken",
            "ok" if caps["HAS_GRAPHVIZ_DOT"] else "warning",
            caps["HAS_GRAPHVIZ_DOT"],
            shutil.which("dot") or "the dot binary is not on PATH",
            ""
            if caps["HAS_GRAPHVIZ_DOT"]
            else "install graphviz (apt-get install graphviz) for sketch_grad_fn file renders",
        )
    ]


def _extras_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    rows = []
    for key, dist, purpose in _EXTRAS:
        version = _version(dist)
        rows.append(
            DoctorCheck(
                f"extra_{key}",
                dist,
                "pass" if version else "not_tested",
                "ok" if version else "info",
                version is not None,
                f"{dist} {version}" if version else f"{dist} not installed",
                "" if version else f"optional: pip install {dist} ({purpose})",
            )
        )
    return rows


NO_MODEL = "no model given: tl.report.doctor(model) fingerprints its architecture"
"""The model fingerprint row's details (and the unavailable entry's reason) without a model."""


def _fingerprint_rows(caps: Mapping[str, bool], model: Any) -> list[DoctorCheck]:
    if model is None:
        return [
            DoctorCheck("model_fingerprint", "model fingerprint", "not_tested", "info", False,
                        NO_MODEL, "")
        ]  # fmt: skip
    if not isinstance(model, torch.nn.Module):
        return []  # the model_type row says what is wrong
    return [_fingerprint_row(model)]


ENV_ROWS: tuple[Callable[[Mapping[str, bool], Any], list[DoctorCheck]], ...] = (
    _pytorch_rows,
    _capabilities_rows,
    _wrapper_bindings_rows,
    _panel_bundles_rows,
    _belt_rows,
    _cuda_rows,
    _graphviz_rows,
    _extras_rows,
    _fingerprint_rows,
)
"""The environment rows, in table order: each ``make(capabilities, model or None)`` returns its
rows. A new environment row is one more function here."""


_OPTIONAL_CAPS = frozenset({"HAS_CUDA", "HAS_TRANSFORMERS", "HAS_GRAPHVIZ_DOT", "HAS_PLOTLY"})
_EXTRAS = (
    ("anywidget", "anywidget", "live panels"),
    ("pandas", "pandas", "to_pandas() tables"),
    ("plotly", "plotly", "figure() charts"),
    ("transformers", "transformers", "Hugging Face models"),
    ("safetensors", "safetensors", "checkpoint scans"),
)


def _model_rows(model: Any, inputs: Any) -> list[DoctorCheck]:
    from torch import nn

    if not isinstance(model, nn.Module):
        return [
            DoctorCheck(
                "model_type",
                "model",
                "known_broken",
                "error",
                False,
                f"{type(model).__name__} is not an nn.Module",
                "pass the nn.Module itself",
            )
        ]
    rows: list[DoctorCheck] = []
    compiled = hasattr(model, "_orig_mod")
    rows.append(
        DoctorCheck(
            "wrapper_compile",
            "torch.compile wrapper",
            "scope" if compiled else "pass",
            "info" if compiled else "ok",
            compiled,
            "compiled: capture records the eager original" if compiled else "not compiled",
            "",
        )
    )
    wrapped = type(model).__name__ in (
        "DistributedDataParallel",
        "DataParallel",
        "FullyShardedDataParallel",
    )
    rows.append(
        DoctorCheck(
            "wrapper_distributed",
            "distributed wrapper",
            "scope" if wrapped else "pass",
            "info" if wrapped else "ok",
            wrapped,
            type(model).__name__ if wrapped else "none",
            "",
        )
    )
    params = list(model.parameters())
    meta = [p for p in params if p.device.type == "meta"]
    odd = [p for p in params if p.is_sparse or p.is_quantized]
    rows.append(
        DoctorCheck(
            "tensor_variants",
            "parameter tensor variants",
            "known_broken" if meta or odd else "pass",
            "warning" if meta or odd else "ok",
            bool(meta or odd),
            f"{len(params)} parameters; {len(meta)} on meta; {len(odd)} sparse/quantized",
            "materialise meta parameters (model.to_empty(device=...) and load weights) before "
            "capture"
            if meta
            else "",
        )
    )
    rows.append(_capture_scope_row(model))
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
    rows.append(
        DoctorCheck(
            "param_dtypes",
            "parameter dtypes",
            "pass",
            "ok",
            True,
            ", ".join(dtypes) or "no parameters",
            "",
        )
    )
    dist_on = torch.distributed.is_available() and torch.distributed.is_initialized()
    rows.append(
        DoctorCheck(
            "distributed_state",
            "torch.distributed",
            "scope" if dist_on else "pass",
            "info" if dist_on else "ok",
            dist_on,
            "process group initialised" if dist_on else "not initialised",
            "",
        )
    )
    if inputs is not None:
        tensors = _input_tensors(inputs)
        rows.append(
            DoctorCheck(
                "inputs",
                "inputs",
                "pass" if tensors else "known_broken",
                "ok" if tensors else "warning",
                bool(tensors),
                f"{len(tensors)} tensors: "
                + ", ".join(
                    f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in tensors[:4]
                ),
                "" if tensors else "pass a tensor, a tuple or a dict of keyword arguments",
            )
        )
    return rows


class _SeenCalls(TorchFunctionMode):
    """Counts the calls a torch-function mode receives (the doctor's binding probe)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def _panel_bundles_row() -> DoctorCheck:
    """Whether the panels can render: every bundle the registry needs is installed, built for
    this package version (a wheel always carries them; a source checkout needs ``make bundle``)."""
    from ...widgets import bundle_status

    status = bundle_status()
    if status.matches(__version__):
        return DoctorCheck(
            "panel_bundles",
            "panel bundles",
            "pass",
            "ok",
            True,
            f"all panel bundles present, built for torchlens_nb {status.built_version}",
            "",
        )
    problem = (
        f"missing: {', '.join(status.missing)}"
        if status.missing
        else f"built for torchlens_nb {status.built_version or '(unknown)'}, "
        f"the package is {__version__}"
    )
    return DoctorCheck(
        "panel_bundles",
        "panel bundles",
        "known_broken",
        "warning",
        False,
        f"reports fall back to their text card; {problem}",
        "reinstall torchlens_nb (pip install --force-reinstall torchlens_nb); in a source "
        "checkout run `make bundle`",
    )


def _wrapper_bindings_row() -> DoctorCheck:
    """Whether torch calls reach a torch-function mode (the binding every capture rests on), and
    whether another tool's mode is active now (its ops would run inside ours)."""
    foreign = [type(mode).__name__ for mode in _get_current_function_mode_stack()]
    probe = _SeenCalls()
    with probe, torch.no_grad():
        torch.add(torch.zeros(1), 1)
    bound = probe.calls > 0
    details = f"torch calls reach a TorchFunctionMode ({probe.calls} calls seen by the probe)"
    if foreign:
        details += f"; another mode is active: {', '.join(foreign)}"
    return DoctorCheck(
        "torch_wrapper_bindings",
        "torch wrapper bindings",
        "known_broken" if not bound else "scope" if foreign else "pass",
        "error" if not bound else "warning" if foreign else "ok",
        bound,
        details if bound else "torch calls do not reach a TorchFunctionMode",
        "" if bound and not foreign else "leave the other tool's mode before tracing",
    )


def _capture_scope_row(model: torch.nn.Module) -> DoctorCheck:
    """The submodules the capture cannot see into (TorchScript), found without running."""
    opaque = opaque_modules(model)
    names = ", ".join(f"{address or '(root)'} ({kind})" for address, kind in opaque[:4])
    more = f" and {len(opaque) - 4} more" if len(opaque) > 4 else ""
    return DoctorCheck(
        "capture_scope",
        "capture scope",
        "scope" if opaque else "pass",
        "warning" if opaque else "ok",
        bool(opaque),
        f"opaque to the capture: {names}{more}; only their outputs are checked"
        if opaque
        else "every submodule runs its ops in Python, where the capture sees them",
        "trace the eager module (before torch.jit.script / torch.jit.trace) to see inside"
        if opaque
        else "",
    )


def _fingerprint_row(model: torch.nn.Module) -> DoctorCheck:
    """A structural fingerprint (names, shapes and dtypes of parameters and buffers; no values):
    two reports with the same fingerprint describe the same architecture."""
    digest = hashlib.sha256()
    count = 0
    for kind, named in (("p", model.named_parameters()), ("b", model.named_buffers())):
        for name, tensor in named:
            count += 1
            digest.update(f"{kind}:{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
    return DoctorCheck(
        "model_fingerprint",
        "model fingerprint",
        "pass",
        "ok",
        True,
        f"{type(model).__name__} {digest.hexdigest()[:12]} ({count} tensors; names, shapes and "
        "dtypes, no values)",
        "",
    )


def _input_tensors(value: Any, depth: int = 0) -> list[Any]:

    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 4 or isinstance(value, (str, bytes)):
        return []
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _input_tensors(item, depth + 1)]
    return []


def doctor(model: Any = None, inputs: Any = None) -> DoctorReport:
    """Check the environment and, optionally, a model's compatibility (the model is not run).

    The environment rows are :data:`ENV_ROWS`; ``mechanical_belt`` runs one capture of a
    tiny probe model (``_belt.py``), never the user's model. Without a model the
    ``model_fingerprint`` row is ``not_tested`` and the report carries it as ``unavailable``.

    Example:
        >>> report = doctor()
        >>> report.check("pytorch").status
        'pass'
    """

    caps = capabilities()
    rows = [row for make in ENV_ROWS for row in make(caps, model)]
    if model is not None:
        rows += _model_rows(model, inputs)
    findings = tuple(
        Finding(
            f"doctor_{row.key}",
            FINDING_SEVERITY[row.severity],
            row.details,
            remedy=row.suggestion or None,
            fields={"status": row.status},
        )
        for row in rows
        if row.severity in ("warning", "error")
    )
    broken = [row for row in rows if row.status == "known_broken"]
    warned = [row for row in rows if row.status != "known_broken" and row.severity == "warning"]
    table = Table.from_dicts(
        "checks",
        [vars(row) for row in rows],
        ("key", "label", "status", "severity", "is_detected", "details", "suggestion"),
    )
    return DoctorReport(
        subject=f"torch {torch.__version__}"
        + (f", {type(model).__name__}" if model is not None else ""),
        status="warn" if broken or warned else "ok",
        lead=(
            f"{len(broken)} of {len(rows)} rows known broken"
            if broken
            else f"{len(warned)} of {len(rows)} rows need attention: "
            + ", ".join(row.label for row in warned)
            if warned
            else f"all {len(rows)} rows pass or are out of scope"
            + ("; no model given, so no model rows" if model is None else "")
        ),
        findings=findings,
        tables=(table,),
        unavailable=(Unavailable("model_fingerprint", NO_MODEL, "no_model"),)
        if model is None
        else (),
        checks=tuple(rows),
        torch_version=torch.__version__,
        model_type=None
        if model is None
        else f"{type(model).__module__}.{type(model).__qualname__}",
        capabilities=frozen_mapping(caps),
    )
