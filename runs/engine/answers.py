"""What a tool's answers come to, whichever protocol asked: HTTP (`protocol.py`) or MCP
(`mcp.py`). Both speak these same records, so reconciliation never asks which it was."""

from dataclasses import dataclass, field

from ..states import Verdict


@dataclass
class CallResult:
    outcome: str  # AttemptOutcome
    http_status: int | None = None
    detail: str = ""


@dataclass
class Read:
    verdict: str | None = None  # MISSING or READ_FAILED; None when state was read
    state: dict = field(default_factory=dict)
    version: int | None = None
    detail: str = ""


@dataclass
class Lookup:
    verdict: str  # LOOKUP_APPLIED, LOOKUP_NOT_FOUND or LOOKUP_FAILED
    state: dict | None = None
    version: int | None = None
    http_status: int | None = None
    detail: str = ""


def lookup_applied(record: dict, *, detail: str, http_status: int | None = None) -> Lookup:
    """The tool says it applied the key; its `state` and `version` are kept when
    well-formed (an object and an integer), else left out."""
    state, version = record.get("state"), record.get("version")
    well_formed = isinstance(state, dict) and isinstance(version, int)
    return Lookup(
        Verdict.LOOKUP_APPLIED,
        state=state if well_formed else None,
        version=version if well_formed else None,
        http_status=http_status,
        detail=detail,
    )
