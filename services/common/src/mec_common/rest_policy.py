"""HTTP rules every REST API of the suite follows: conditional requests and query parameters.

Conditional requests (RFC 9110 §8.8.3 and §13): every individual resource that can be
modified carries a strong ``ETag`` (a digest of its JSON representation), and writes
honour ``If-Match`` / ``If-None-Match``::

    current = load()                       # 404 first: RFC 9110 §13.2.1
    check_preconditions(request, etag_of(current))
    ...write...
    return tagged(request, new_representation)

A store that compares and writes under its own lock takes a ``Precondition`` (from
``preconditions(request)``) and calls it with the current representation.

The ETSI MEC APIs list 412 for a failed condition and never require a condition, so a
write without one proceeds (no 428).

Query parameters: a parameter the operation does not define, or a value it cannot parse,
is a client error (400 naming the parameter), never silently ignored. ``reject_unknown_query``
applies that to every route from what the route declares (its query parameters and the
``parameters`` of its ``openapi_extra``); handlers read values with ``enum_param`` and
``boolean_param``.

Free-form JSON members of a body (``JsonObject``) hold only what can be stored and encoded
again: Unicode text, integers within 64 bits.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from typing import Annotated, Any

import orjson
from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import AfterValidator
from starlette.datastructures import QueryParams

from mec_common.api import ProblemError

_ENTITY_TAG = re.compile(r'\s*(W/)?("[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)')


def _storable(value: Any) -> Any:
    """Refuse what a free-form member could hold but nothing after the parser can store or
    encode again (each was a 500 after the write, found by schemathesis): strings (keys
    included) with unpaired UTF-16 surrogates (JSON's ``\\ud800`` escapes decode to them)
    and integers beyond 64 bits (Python's parser takes any size)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValueError("text with an unpaired UTF-16 surrogate is not Unicode") from None
    elif isinstance(value, int) and not -(2**63) <= value < 2**64:
        raise ValueError(f"integer {value} is outside the 64-bit range")
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(key)
            _storable(item)
    elif isinstance(value, list):
        for item in value:
            _storable(item)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_storable)]
"""A free-form JSON object member of a request body (its typed members are pydantic's)."""


def etag_of(representation: Any) -> str:
    """A strong entity tag of a JSON representation (equal bodies, equal tags)."""
    canonical = orjson.dumps(representation, option=orjson.OPT_SORT_KEYS)
    return '"' + hashlib.sha256(canonical).hexdigest()[:32] + '"'


def _tags(header: str) -> list[tuple[bool, str]] | None:
    """``(weak, opaque-tag)`` pairs of an If-Match / If-None-Match list; None if malformed."""
    tags, pos = [], 0
    while pos < len(header):
        match = _ENTITY_TAG.match(header, pos)
        if match is None:
            return None
        tags.append((match.group(1) is not None, match.group(2)))
        pos = match.end()
    return tags


def _if_match_holds(header: str, current: str | None) -> bool:
    if header.strip() == "*":
        return current is not None
    tags = _tags(header)
    if tags is None:
        raise ProblemError(400, f"If-Match is not a list of entity tags: {header!r}")
    # strong comparison (§8.8.3.2): a weak tag never matches
    return current is not None and any(not weak and tag == current for weak, tag in tags)


def _if_none_match_holds(header: str, current: str | None) -> bool:
    if header.strip() == "*":
        return current is None
    tags = _tags(header)
    if tags is None:
        raise ProblemError(400, f"If-None-Match is not a list of entity tags: {header!r}")
    return not any(tag == current for _weak, tag in tags)  # weak comparison


def check_preconditions(request: Request, current: str | None) -> None:
    """Evaluate If-Match, then If-None-Match, for a state-changing request (RFC 9110 §13.2.2).

    ``current`` is the ETag of the resource's current representation (None: it has none).
    Raises 412 when a condition is false; a request without conditions passes.
    """
    if_match = request.headers.get("if-match")
    if if_match is not None and not _if_match_holds(if_match, current):
        have = current or "no representation"
        raise ProblemError(412, f"If-Match does not match the current ETag ({have}); "
                           "GET the resource again and retry")  # fmt: skip
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and not _if_none_match_holds(if_none_match, current):
        raise ProblemError(412, "If-None-Match matches the resource's current ETag")


Precondition = Callable[[Any], None]
"""Called with a resource's current representation before a write; raises 412 if false."""


def unconditional(_current: Any) -> None:
    """The precondition of a write made without a request (internal callers)."""


def preconditions(request: Request) -> Precondition:
    """The request's If-Match / If-None-Match as a Precondition on a representation."""
    if "if-match" not in request.headers and "if-none-match" not in request.headers:
        return unconditional
    return lambda current: check_preconditions(request, etag_of(current))


def tagged(request: Request, representation: Any, status: int = 200,
           headers: dict[str, str] | None = None) -> Response:  # fmt: skip
    """The JSON representation with its ETag; a GET whose If-None-Match matches gets 304."""
    etag = etag_of(representation)
    if request.method in ("GET", "HEAD") and status == 200:
        if_none_match = request.headers.get("if-none-match")
        if if_none_match is not None and not _if_none_match_holds(if_none_match, etag):
            return Response(status_code=304, headers={"ETag": etag})
    return JSONResponse(representation, status, headers={**(headers or {}), "ETag": etag})


# --- query parameters ------------------------------------------------------------------------

_declared: dict[int, frozenset[str]] = {}


def declared_query_parameters(route: APIRoute) -> frozenset[str]:
    """The query parameters a route defines: its signature's and its openapi_extra's."""
    names = _declared.get(id(route))
    if names is None:
        extra = (route.openapi_extra or {}).get("parameters", [])
        names = frozenset([*_query_names(route.dependant),
                           *(p["name"] for p in extra if p.get("in") == "query")])  # fmt: skip
        _declared[id(route)] = names
    return names


def _query_names(dependant: Dependant) -> list[str]:
    names = [field.alias for field in dependant.query_params]
    for sub in dependant.dependencies:
        names += _query_names(sub)
    return names


async def reject_unknown_query(request: Request) -> None:
    """A dependency of every route: 400 for a query parameter the operation does not define."""
    if not request.url.query:
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    check_query(request.query_params, declared_query_parameters(route))


def check_query(params: QueryParams, allowed: Iterable[str]) -> None:
    """400 naming the first parameter that is not in ``allowed``."""
    allowed = set(allowed)
    for name in params:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ProblemError(400, f"unknown query parameter {name!r} (this operation "
                               f"takes: {known})")  # fmt: skip


def enum_param(params: QueryParams, name: str, values: Iterable[str]) -> str | None:
    """A parameter whose value is an enumeration; 400 naming it and its values otherwise."""
    value = params.get(name)
    allowed = list(values)
    if value is not None and value not in allowed:
        raise ProblemError(400, f"query parameter {name!r} must be one of {', '.join(allowed)} "
                           f"(got {value!r})")  # fmt: skip
    return value


def boolean_param(params: QueryParams, name: str) -> bool | None:
    value = params.get(name)
    if value is None:
        return None
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise ProblemError(400, f"query parameter {name!r} must be true or false (got {value!r})")
