"""Reports: the plain, immutable results every diagnostic returns (``tl.report``)."""

from ._base import SCHEMA, Exit, Finding, Report, Table, Unavailable, Where, frozen_mapping
from .doctor import DoctorCheck, DoctorReport, capabilities, doctor

__all__ = [
    "SCHEMA", "DoctorCheck", "DoctorReport", "Exit", "Finding", "Report", "Table", "Unavailable",
    "Where", "capabilities", "doctor", "frozen_mapping",
]
