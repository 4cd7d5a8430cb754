"""Generated input, end to end in process (hypothesis), for what the hand-picked cases
of test_ingest_adversarial.py may miss:
- any log item gets a 200 or a 400 in the common error shape; a 200's logs are all
  stored (none quarantined) and the API gives back each one's body, level, trace and
  attributes as sent; a 400 stores nothing;
- any typed attribute whose value fits its type is found by its own ``attr[...]`` filter;
- any event gets a 200 or a 400; a 200's event is grouped (none quarantined), counted
  once, and its payload reads back as the bytes sent.
The first fails on the read path before the fifteenth session, which turned attributes
holding an integer beyond a double's range into a 500 for every page holding them.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from errortrack.ingest.logs import INT64_MAX, INT64_MIN, SEVERITY
from errortrack.logs.filters import MAX_ATTR_NAME, MAX_ATTR_VALUE
from tests.ingest_support import ingest_auth

# Examples per run; CI runs a fixed (derandomized) set. A longer random search:
# ERRORTRACK_PROPERTY_EXAMPLES=2000 ERRORTRACK_PROPERTY_RANDOM=1 pytest this file.
EXAMPLES = int(os.environ.get("ERRORTRACK_PROPERTY_EXAMPLES", "60"))
RANDOM = os.environ.get("ERRORTRACK_PROPERTY_RANDOM") == "1"
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    database=None,
    # Each example runs against the test's own stores (function-scoped fixtures).
    suppress_health_check=list(HealthCheck),
)

# Integers at the edges of what the typed maps and JSON libraries hold.
EDGE_INTEGERS = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**53 + 1, 10**400]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(EDGE_INTEGERS)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
TYPES = ["string", "integer", "double", "boolean", "array"]


@st.composite
def typed_attribute(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(TYPES) | values)
    value = draw(
        {
            "string": st.text(max_size=12),
            "integer": st.integers() | st.sampled_from(EDGE_INTEGERS) | st.integers().map(str),
            "double": st.floats(allow_nan=False, allow_infinity=False),
            "boolean": st.booleans(),
        }.get(kind, values)
        if isinstance(kind, str)
        else values
    )
    attribute = {"value": value, "type": kind}
    if draw(st.booleans()):
        attribute["unit"] = draw(values)
    return attribute


attribute_maps = st.dictionaries(st.text(max_size=10), typed_attribute() | values, max_size=5)
trace_ids = st.sampled_from(["ab" * 16, "0" * 32]) | values
span_ids = st.sampled_from(["cd" * 8, ""]) | values

logs = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": st.floats(min_value=1.7e9, max_value=1.9e9) | values,
        "level": st.sampled_from([*SEVERITY, "warning", "NOTICE"]) | values,
        "body": st.text() | values,
        "trace_id": trace_ids,
        "span_id": span_ids,
        "attributes": attribute_maps | st.none() | values,
        "severity_number": values,
    },
)


def _encode(value: Any, ascii_only: bool, spaced: bool) -> bytes:
    # The standard library writes integers of any size, as SDKs in other languages may.
    separators = (", ", ": ") if spaced else (",", ":")
    return json.dumps(value, ensure_ascii=ascii_only, separators=separators).encode()


@st.composite
def envelopes(draw: st.DrawFn) -> tuple[bytes, list[Any]]:
    sent = draw(st.lists(logs, min_size=1, max_size=4))
    payload = _encode({"items": sent}, draw(st.booleans()), draw(st.booleans()))
    if draw(st.booleans()):  # as Python sends it (length, final newline) or as Node does
        header = _encode({"type": "log", "length": len(payload)}, True, False)
        return b"{}\n" + header + b"\n" + payload + b"\n", sent
    return b'{}\n{"type":"log"}\n' + payload, sent


def _expected_trace(log: dict[str, Any]) -> tuple[Any, Any]:
    span = log.get("span_id")
    attributes = log.get("attributes")
    if not span and isinstance(attributes, dict):
        parent = attributes.get("sentry.trace.parent_span_id")
        span = parent.get("value") if isinstance(parent, dict) else None
    if not span or not isinstance(span, str):
        return None, None
    trace = log.get("trace_id")
    return (trace if isinstance(trace, str) and trace else None), span


def _expected(log: dict[str, Any]) -> dict[str, Any]:
    level = log.get("level")
    level = level if isinstance(level, str) else ""
    attributes = log.get("attributes")
    trace_id, span_id = _expected_trace(log)
    return {
        "level": level,
        "severity_number": SEVERITY.get(level),
        "body": log.get("body"),
        "trace_id": trace_id,
        "span_id": span_id,
        "attributes": attributes if isinstance(attributes, dict) else {},
    }


def _matches(read: dict[str, Any], sent: dict[str, Any]) -> bool:
    """A stored log as the API gives it against one expected from what was sent: a body
    that is not a string is stored as its JSON text, a missing one as ""."""
    body = sent["body"]
    if body is None:
        body_ok = read["body"] == ""
    elif isinstance(body, str):
        body_ok = read["body"] == body
    else:
        try:
            body_ok = json.loads(read["body"]) == body
        except ValueError:
            body_ok = False
    return body_ok and all(read[key] == value for key, value in sent.items() if key != "body")


# Names a filter can spell (attr[<name>]: no brackets) and values of each declared type.
filter_names = st.text(min_size=1, max_size=12).filter(lambda n: "[" not in n and "]" not in n)
fitting = st.one_of(
    st.tuples(st.just("string"), st.text(max_size=12)),
    st.tuples(st.just("integer"), st.integers(INT64_MIN, INT64_MAX)),
    st.tuples(st.just("integer"), st.integers(INT64_MIN, INT64_MAX).map(str)),
    st.tuples(st.just("double"), st.floats(allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("double"), st.integers(INT64_MIN, INT64_MAX)),
    st.tuples(st.just("boolean"), st.booleans()),
)
typed_maps = st.dictionaries(filter_names, fitting, min_size=1, max_size=4)


def _filter_text(value: Any) -> str:
    """How a user writes the value in a filter: JSON's spelling for booleans, Python's
    shortest round-trip text for numbers (what a client's own number printing gives)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def test_every_accepted_log_reads_back_as_sent(ingest_world):
    world = ingest_world
    writer = world.state.ingest.writer
    checked = {"stored": 0, "refused": 0}

    @given(envelope=envelopes())
    # Hypothesis's generation depends on what else the process has loaded (it draws
    # constants from loaded modules), so each outcome also has a fixed example.
    @example(envelope=(b'{}\n{"type":"log"}\n{"items":[{"body":"kept"}]}', [{"body": "kept"}]))
    @example(envelope=(b'{}\n{"type":"log"}\n{"items":[{"attributes":[]}]}', [{"attributes": []}]))
    @PROPERTY
    def run(envelope: tuple[bytes, list[Any]]) -> None:
        body, sent = envelope
        pid = world.add_project()
        resp = world.client.simulate_post(
            f"/api/{pid}/envelope/", body=body, headers=ingest_auth(world.factory, pid)
        )
        assert resp.status_code in (200, 400), resp.text
        writer.drain()
        assert writer.quarantined == 0
        page = world.call("viewer", "GET", f"/api/projects/{pid}/logs?per_page=10")
        assert page.status_code == 200, page.text
        # The standard library reads integers of any size, as a client may.
        items = json.loads(page.text)["items"]
        if resp.status_code == 400:
            assert set(json.loads(resp.text)) == {"error"}
            assert items == []
            checked["refused"] += 1
            return
        assert len(items) == len(sent)
        unmatched = [_expected(log) for log in sent]
        for item in items:
            match = next((i for i, log in enumerate(unmatched) if _matches(item, log)), None)
            assert match is not None, (item, unmatched)
            unmatched.pop(match)
        checked["stored"] += 1

    run()
    # Both outcomes were exercised, so neither property held vacuously.
    assert checked["stored"] > 0 and checked["refused"] > 0, checked


def test_every_typed_attribute_is_found_by_its_own_filter(ingest_world):
    """The typed maps, the filter's parsing and the string pairs' text index agree: any
    attribute of a declared type whose value fits it matches ``attr[name]=value``."""
    world = ingest_world
    writer = world.state.ingest.writer
    pid = world.add_project()
    auth = ingest_auth(world.factory, pid)
    serial = iter(range(10**6))

    @given(attributes=typed_maps)
    @PROPERTY
    def run(attributes: dict[str, tuple[str, Any]]) -> None:
        body = f"log {next(serial)}"
        log = {
            "body": body,
            "attributes": {n: {"value": v, "type": t} for n, (t, v) in attributes.items()},
        }
        payload = json.dumps({"items": [log]}).encode()
        resp = world.client.simulate_post(
            f"/api/{pid}/envelope/", body=b'{}\n{"type":"log"}\n' + payload, headers=auth
        )
        assert resp.status_code == 200, resp.text
        writer.drain()
        for name, (kind, value) in attributes.items():
            text = _filter_text(value)
            if len(name) > MAX_ATTR_NAME or len(text) > MAX_ATTR_VALUE:
                continue
            query = urllib.parse.urlencode({f"attr[{name}]": text, "q": body, "per_page": 100})
            page = world.call("viewer", "GET", f"/api/projects/{pid}/logs?{query}")
            assert page.status_code == 200, page.text
            assert body in [item["body"] for item in page.json["items"]], (name, value, text)
            # And not by another value: q alone narrows the list to this log, so without
            # this a filter that matched everything (or was ignored) passed.
            other = _other_text(kind, value)
            query = urllib.parse.urlencode({f"attr[{name}]": other, "q": body, "per_page": 100})
            page = world.call("viewer", "GET", f"/api/projects/{pid}/logs?{query}")
            assert page.status_code == 200, page.text
            assert body not in [item["body"] for item in page.json["items"]], (name, value, other)

    run()


def _other_text(kind: str, value: Any) -> str:
    """A filter text no type reads as ``value``: another string, the other boolean, or a
    number of the other sign (so distinct as a double too, however large)."""
    if kind == "boolean":
        return "false" if value else "true"
    if kind == "string":
        return value + "x"
    number = int(value) if isinstance(value, str) else value
    return repr(-number - 1 if number >= 0 else -number + 1)


texts = st.text(max_size=16)
frames = st.fixed_dictionaries(
    {},
    optional={
        "filename": texts | values,
        "module": texts | values,
        "abs_path": texts | values,
        "function": texts | values,
        "lineno": st.integers(0, 10**6) | values,
        "in_app": st.booleans() | values,
    },
)
exception_values = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["ValueError", "TypeError", ""]) | texts | values,
        "value": texts | values,
        "module": texts | values,
        "stacktrace": st.fixed_dictionaries({"frames": st.lists(frames, max_size=4) | values})
        | values,
        "mechanism": values,
    },
)
events = st.fixed_dictionaries(
    {},
    optional={
        "event_id": st.sampled_from(["ef" * 16, "EF" * 16]) | st.uuids().map(str) | values,
        "timestamp": st.floats(min_value=1.7e9, max_value=1.9e9)
        | st.sampled_from(["2026-11-01T12:00:00Z", "2026-11-01T12:00:00.5+01:00", "now"])
        | values,
        "level": st.sampled_from(["error", "warning", "warn", "fatal", "critical", " Info "])
        | values,
        "platform": st.sampled_from(["python", "node"]) | values,
        "release": texts | values,
        "environment": texts | values,
        "message": texts | values,
        "logentry": st.fixed_dictionaries(
            {}, optional={"message": texts | values, "formatted": texts | values}
        )
        | values,
        "exception": st.fixed_dictionaries({"values": st.lists(exception_values, max_size=3)})
        | values,
        "fingerprint": st.lists(st.sampled_from(["{{ default }}", "{{default}}"]) | texts | values)
        | values,
        "transaction": texts | values,
        "culprit": texts | values,
        "contexts": st.fixed_dictionaries(
            {},
            optional={
                "trace": st.fixed_dictionaries(
                    {}, optional={"trace_id": trace_ids, "span_id": span_ids}
                )
            },
        )
        | values,
        "tags": values,
        "extra": values,
    },
)


def test_every_accepted_event_is_grouped_and_reads_back_as_sent(ingest_world):
    """Any event an SDK may send: a 200 or a 400; a 200's event goes through the grouping
    hook (no quarantine), is counted once in one issue, and its payload reads back as
    the bytes sent."""
    world = ingest_world
    writer = world.state.ingest.writer
    checked = {"stored": 0, "refused": 0}

    @given(event=events, ascii_only=st.booleans())
    # Fixed examples for each outcome, as in the logs property above.
    @example(event={"message": "kept"}, ascii_only=True)
    @example(event={"event_id": 5}, ascii_only=True)
    @PROPERTY
    def run(event: dict[str, Any], ascii_only: bool) -> None:
        pid = world.add_project()
        auth = ingest_auth(world.factory, pid)
        payload = _encode(event, ascii_only, False)
        body = b'{}\n{"type":"event","length":%d}\n' % len(payload) + payload + b"\n"
        resp = world.client.simulate_post(f"/api/{pid}/envelope/", body=body, headers=auth)
        assert resp.status_code in (200, 400), resp.text
        writer.drain()
        assert writer.quarantined == 0
        issues = world.call("viewer", "GET", f"/api/projects/{pid}/issues")
        assert issues.status_code == 200, issues.text
        if resp.status_code == 400:
            assert set(json.loads(resp.text)) == {"error"}
            assert issues.json["items"] == []
            checked["refused"] += 1
            return
        (issue,) = issues.json["items"]
        assert issue["count"] == 1
        page = world.call("viewer", "GET", f"/api/projects/{pid}/issues/{issue['id']}/events")
        assert page.status_code == 200, page.text
        assert b'"payload":' + payload + b"}" in page.content
        checked["stored"] += 1

    run()
    assert checked["stored"] > 0 and checked["refused"] > 0, checked
