"""``teamrl report``: one self-contained HTML page per set of runs, with learning curves, per-role
contribution by phase, per-role credit, sample episodes rendered as conversations between roles,
and a side-by-side comparison of several runs (LLM-team runs and classic-MARL runs alike).

    from teamrl.report import write_report
    write_report(["runs/E9", "runs/E10"], "runs/report")

Imports are lazy: importing the package does not import matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReportError", "ReportServer", "write_report"]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from teamrl.report.page import write_report

        return write_report
    if name == "ReportError":
        from teamrl.report.load import ReportError

        return ReportError
    if name == "ReportServer":
        from teamrl.report.serve import ReportServer

        return ReportServer
    raise AttributeError(name)
