"""What the HTTP API accepts, its limits, and its JSON errors.

Every 4xx and 5xx answer has the body

    {"error": {"code", "message", "field", "fix"}, "request_id"}

where ``field`` names the part of the request at fault (``"k"``, ``"history[2]"``; null when
the whole request is) and ``fix`` says what to send instead.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

#: Largest k one request may ask for.
MAX_K = 1000
#: Baskets one history may hold (new baskets of a known customer included).
MAX_BASKETS = 1000
#: Items one basket may hold.
MAX_BASKET_ITEMS = 10_000
#: Customers one batch request may ask for.
MAX_CUSTOMERS = 10_000

ItemId = StrictStr | StrictInt
Basket = Annotated[list[ItemId], Field(max_length=MAX_BASKET_ITEMS)]
Baskets = Annotated[list[Basket], Field(max_length=MAX_BASKETS)]
K = Annotated[int, Field(ge=1, le=MAX_K, strict=True)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HistoryRequest(_Strict):
    """``POST /v1/next-basket``: any history in original item ids, oldest basket first."""

    history: Baskets
    k: K = 10
    exclude: list[ItemId] = []
    reasons: bool = True
    customer_id: StrictStr | None = None  # echoed in the answer; the history is not looked up


class RecentRequest(_Strict):
    """``POST /v1/customers/{id}/next-basket``: a stored customer plus the baskets bought since
    the data was prepared, oldest first."""

    recent: Baskets = []
    k: K = 10
    exclude: list[ItemId] = []
    reasons: bool = True


class BatchEntry(_Strict):
    """One customer of a batch: a stored ``customer_id``, its ``recent`` baskets, or a whole
    ``history`` of a customer the data does not hold."""

    customer_id: StrictStr | None = None
    recent: Baskets | None = None
    history: Baskets | None = None
    exclude: list[ItemId] = []


class BatchRequest(_Strict):
    """``POST /v1/next-baskets``: many customers in one call."""

    customers: Annotated[list[BatchEntry], Field(min_length=1, max_length=MAX_CUSTOMERS)]
    k: K = 10
    exclude: list[ItemId] = []
    reasons: bool = False


class ReloadRequest(_Strict):
    """``POST /admin/reload``: a new checkpoint (default: the one served, read again) and data
    (default: what the new checkpoint records, else the data served)."""

    checkpoint: StrictStr | None = None
    data: StrictStr | None = None


#: What to send instead, by the field at fault (the last named part of its location).
FIXES: dict[str, str] = {
    "k": f"send k as a whole number from 1 to {MAX_K}, e.g. \"k\": 10",
    "history": 'send history as a list of baskets, each a list of item ids, oldest first: '
    '[["milk", "bread"], ["milk"]]',
    "recent": 'send recent as a list of baskets bought since the data was prepared, each a list '
    'of item ids: [["milk"]]',
    "exclude": 'send exclude as a list of item ids: ["bread"]',
    "customers": f'send customers as a list of 1 to {MAX_CUSTOMERS} entries, each '
    '{"customer_id": "C1"} or {"history": [["milk"]]}; split larger batches',
    "customer_id": "send customer_id as a string",
    "reasons": "send reasons as true or false",
    "checkpoint": "send checkpoint as the path of a best.pt on the server",
    "data": "send data as the path of a prepared dataset folder on the server",
}


def error_body(code: str, message: str, request_id: str, field: str | None = None, fix: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field, "fix": fix}, "request_id": request_id}


def describe_validation(errors: list[dict[str, Any]]) -> tuple[str, str, str | None, str | None]:
    """The first of pydantic's errors as (code, message, field, fix): malformed JSON is
    ``bad_json``, the rest ``invalid_request``."""
    e = errors[0]
    if e.get("type") == "json_invalid":
        where = e.get("ctx", {}).get("error", "")
        return "bad_json", f"the body is not valid JSON ({where})", None, "send a JSON object, e.g. {\"history\": [[\"milk\"]], \"k\": 10}"
    loc = [p for p in e.get("loc", ()) if p not in ("body", "query", "path")]
    # Drop pydantic's union branch names (e.g. 'str', 'int') from the location.
    loc = [p for p in loc if not (isinstance(p, str) and p in ("str", "int", "function-after[...]"))]
    field = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc)) or None
    names = [p for p in loc if isinstance(p, str)]
    fix = next((FIXES[n] for n in reversed(names) if n in FIXES), None)
    if e.get("type") == "missing" and not names and not loc:
        return "invalid_request", "the request has no JSON body", None, "send a JSON object"
    if e.get("type") == "model_attributes_type" or (e.get("type") == "dict_type" and not loc):
        return "invalid_request", "the body must be a JSON object", None, "send a JSON object, e.g. {\"history\": [[\"milk\"]], \"k\": 10}"
    msg = e.get("msg", "invalid value")
    if e.get("type") == "too_long":
        ctx = e.get("ctx", {})
        most = ctx.get("max_length")
        msg = f"{ctx.get('actual_length', 'too many')} entries; at most {most} are read per request"
        fix = {"history": f"send the last {most} baskets", "recent": f"send the last {most} baskets",
               "customers": f"split the batch into calls of at most {most} customers"}.get(names[-1] if names else "", fix)  # fmt: skip
        if len(names) and isinstance(loc[-1], int):
            fix = f"send baskets of at most {most} items"
    if e.get("type") == "extra_forbidden":
        msg = f"unknown field {names[-1] if names else field!r}"
        fix = "leave it out; the fields are listed at /docs"
    return "invalid_request", f"{field or 'request'}: {msg}", field, fix
