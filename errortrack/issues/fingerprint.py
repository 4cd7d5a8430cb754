"""Grouping: which events are "the same error". Pure functions over the event JSON.

Rules, first match wins (docs/ARCHITECTURE.md "Grouping"), after Sentry's:
1. the SDK's ``fingerprint`` list: ``{{ default }}`` becomes the default parts, Sentry's
   other variables (``{{ transaction }}``, ``{{ type }}``, ``{{ tags.NAME }}``, ...) their
   value or Sentry's placeholder (``<no-transaction>``), anything else stays literal;
2. exceptions with a ``type``: each type in the chain plus its frames, in-app frames only
   unless none is in-app. A frame is its module, else its file (the basename of a path; a
   URL without origin, query and hash or version segments), its function (JavaScript: the
   part after the last ``.``) and, for python, node, javascript, php and ruby, its source
   line when at most 120 characters, whitespace collapsed. Line numbers and variable values
   are left out so that an edit above the crash or a different input does not split an
   issue; a frame repeating the one before it (recursion) is dropped, and a frame with no
   module, file or function does not count. A chain without any frame that counts adds the
   normalised exception value. An exception group keeps one of each distinct child (with
   the group when they differ), so the number of identical failures does not split it;
3. the message template: ``logentry.message``, else the message (or the value of a
   typeless exception, as Node's ``captureMessage`` sends) with URLs, emails, dates and
   times, IP addresses, UUIDs, hex ids and numbers normalised;
4. the stack of the crashed thread (else the current one, else the only one), else a
   top-level ``stacktrace``, frames as in 2.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import orjson

# Sentry's fingerprint variable syntax, any spacing inside the braces ("{{ default}}"
# too); names are whatever Sentry accepts (`\S+`), so "{{ tags.server_name }}" is one.
_VARIABLE = re.compile(r"\{\{\s*(\S+?)\s*\}\}")


def _variable_name(item: Any) -> str | None:
    # Only a string can spell a variable; str() of a deeply nested list would also recurse
    # past Python's limit (a 500 that lost the whole envelope).
    if not isinstance(item, str):
        return None
    match = _VARIABLE.fullmatch(item.strip())
    return match.group(1) if match else None


def _literal(item: Any) -> str:
    """A fingerprint entry as a part: scalars as str() gives them, containers as JSON,
    whose encoder stops at a depth limit instead of exhausting Python's stack."""
    if isinstance(item, list | dict):
        try:
            return orjson.dumps(item).decode()
        except orjson.JSONEncodeError:
            return "<too deep>"
    return str(item)


def is_default_variable(item: Any) -> bool:
    return _variable_name(item) == "default"


# Message parameters, as Sentry's parameterisation replaces them. Order matters: a URL or
# an email is taken whole before its digits could become <num>, a date or an address
# before its numbers. Each pattern but the last three runs only when the text holds the
# character it needs: most messages have none, and ingest pays for every pass.
_URL = re.compile(r"\b(?:wss?|https?|ftp)://[^\s/$.?#][^\s]*")
# A dotted domain ending in letters: "react@18.2.0", "step@build" and "nginx@sha256:..."
# are versions, names and digests, not addresses (each pair merged into "<email>").
# An address is not followed, in its run of [\w.-], by a digit. Checked after the match
# (``_email``), not by a lookahead in it: the lookahead rescanned the rest of the text at
# every backtrack of the domain, quadratic, and one 1 MiB message (1 KB gzipped) held
# the event loop past gunicorn's 60 s, which killed the worker. A shorter domain has a
# longer rest to check, so when the longest match fails the check every shorter one
# does: checking the longest gives what the lookahead gave.
_EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}")
_EMAIL_REST = re.compile(r"[\w.-]*")
_DIGIT = re.compile(r"\d")
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b"
)
# ISO 8601: a date with an optional time and offset; a bare hh:mm:ss time. Both begin with
# a digit class (the boundary is checked after it), which lets the scan skip ahead.
_DATE = re.compile(
    r"\d{4}(?<![\w.]\d{4})-[01]\d-[0-3]\d"
    r"(?:[T ][0-2]\d:[0-5]\d(?::[0-5]\d(?:[.,]\d+)?)?(?:Z|[+-][0-2]\d:?[0-5]\d)?)?(?!\d)"
)
_TIME = re.compile(
    r"[0-2]\d(?<![\d:]\d\d):[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-][0-2]\d:?[0-5]\d)?(?![\d:])"
)
# IPv6: eight groups, or "::" compression; a digit is required so that C++'s or PHP's
# "Cafe::bad" stays text.
_H = "[0-9a-fA-F]{1,4}"
_IPV6 = re.compile(
    rf"(?<![\w:])(?=[0-9a-fA-F:]*\d)(?:(?:{_H}:){{7}}{_H}"
    rf"|{_H}(?::{_H}){{0,6}}::(?:{_H}(?::{_H}){{0,6}})?|::{_H}(?::{_H}){{0,6}})(?![\w:])"
)
# Not inside a longer dotted number (a version); a sentence's full stop may follow.
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?!\w|\.\d)")
_HEX = re.compile(r"\b(?:0x[0-9a-fA-F]+|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,})\b")
# A number standing alone, as Sentry's int, float and duration patterns take it (word
# boundaries both sides; "30s" and "250ms" are durations): digits inside a word stay, so
# "KeyError: 'field1'" and "'field2'" are two issues, as in Sentry (they were merged).
_NUMBER = re.compile(r"(?<!\w)\d+(?:[.,]\d+)*(?:ms|s)?(?!\w)")


def _email(found: re.Match[str]) -> str:
    rest = _EMAIL_REST.match(found.string, found.end())
    followed_by_digit = rest is not None and _DIGIT.search(rest.group()) is not None
    return found.group() if followed_by_digit else "<email>"


# Characters of a message (or an exception's value) that grouping reads. A 1 MB message
# of numbers took ~0.12 s a pass, twice per event with a {{message}} fingerprint (ingest
# review, thirty-first session); 64 Ki characters take ~8 ms. Not Relay's 8,192: the cut
# is made before normalising, so a token of another width early in a longer message (an
# id, a count) moved it, and one 10 KB message became one issue per width (diff review);
# messages that long are rare. Messages that first differ past this point group together.
MESSAGE_MAX = 65_536


def normalise_message(text: str) -> str:
    """The message with the parts that vary per occurrence replaced by placeholders (its
    first ``MESSAGE_MAX`` characters)."""
    text = text[:MESSAGE_MAX]
    if "://" in text:
        text = _URL.sub("<url>", text)
    if "@" in text:
        text = _EMAIL.sub(_email, text)
    text = _UUID.sub("<uuid>", text)
    if "-" in text:
        text = _DATE.sub("<date>", text)
    if ":" in text:
        text = _TIME.sub("<date>", text)
    if "::" in text or text.count(":") >= 7:
        text = _IPV6.sub("<ip>", text)
    if "." in text:
        text = _IPV4.sub("<ip>", text)
    text = _HEX.sub("<hex>", text)
    return _NUMBER.sub("<num>", text).strip()


def values_of(container: Any) -> list[dict[str, Any]]:
    """The objects of a list interface (``exception``, ``threads``) as Relay reads one
    (``Values::from_value``): a list, ``{"values": [...]}``, or one object without
    ``values`` standing for a list of itself (raven-js 1.x and old PHP clients send a
    single exception so: it was read as none, and every such error was one issue)."""
    if isinstance(container, dict):
        if "values" in container:
            container = container["values"]
        elif container:
            container = [container]
    if not isinstance(container, list):
        return []
    return [v for v in container if isinstance(v, dict)]


def exceptions(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The exception chain, oldest first (the last value is the one that was raised)."""
    values = values_of(event.get("exception"))
    # An exception's stack trace under its legacy name (raven-python), as Relay reads it.
    return [
        {**v, "stacktrace": v[_LEGACY_STACKTRACE]}
        if _LEGACY_STACKTRACE in v and "stacktrace" not in v
        else v
        for v in values
    ]


_LEGACY_STACKTRACE = "sentry.interfaces.Stacktrace"


def _text(value: Any) -> str:
    """A scalar as text; "" for anything else (the payload is whatever the SDK sent)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _raw_frames(stacktrace: Any) -> list[Any]:
    frames = stacktrace.get("frames") if isinstance(stacktrace, dict) else None
    return frames if isinstance(frames, list) else []


def frames_of(exception: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in _raw_frames(exception.get("stacktrace")) if isinstance(f, dict)]


def message_text(event: dict[str, Any]) -> str:
    """The message as a template when the SDK sent one (logentry), else as sent."""
    for key in ("logentry", "message"):
        value = event.get(key)
        if isinstance(value, dict):
            value = value.get("message") or value.get("formatted")
        if isinstance(value, str) and value.strip():
            return value
    # Node's captureMessage sends a typeless (synthetic) exception holding the message.
    for exc in reversed(exceptions(event)):
        value = exc.get("value")
        if isinstance(value, str) and value.strip():
            return value
    return ""


# --- frames -------------------------------------------------------------------------

# Sentry's "javascript" behaviour family, and the platforms whose source line it trusts.
_JS_PLATFORMS = frozenset(("javascript", "node"))
_CONTEXT_LINE_PLATFORMS = frozenset(("python", "javascript", "node", "php", "ruby"))
_CONTEXT_LINE_MAX = 120
# Names that say "no name": counted as a function they merged unrelated errors.
_UNKNOWN_FUNCTIONS = frozenset(
    ("?", "<anonymous>", "<anonymous function>", "Anonymous function", "<unknown>", "<redacted>")
)
_NOT_A_FILE = frozenset(("<anonymous>", "[native code]", "native code", "eval code", ""))
# Browser frames of these say nothing about the application's code (Sentry drops them).
_JS_LOW_QUALITY_PATHS = frozenset(("[native code]", "native code", "eval code", "<anonymous>"))
# file: is left out on purpose: a local path, grouped by its basename like any path.
_URL_PREFIXES = ("http:", "https:", "applewebdata:", "blob:", "webpack:", "app:")

# Sentry's "module from URL": leading folders that only say where bundles are served from,
# version and hash directories, and a trailing content hash ("main.9f8e7d6c").
_URL_PREFIX_FOLDER = re.compile(
    r"(?:java)?scripts?|js|build|static|node_modules|bower_components|[_.~].*", re.I
)
_URL_HASH = (
    r"[a-f0-9]{32}|[a-f0-9]{40}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)
_URL_VERSION_FOLDER = re.compile(rf"v?\d+(?:\.\d+)*|[a-f0-9]{{7,8}}|{_URL_HASH}", re.I)
# A file named by a digest or UUID alone (a blob: URL's object) has no stable name at all.
_URL_HASH_FILE = re.compile(_URL_HASH, re.I)
# A content hash among the file name's dot or dash separated parts: "main.9f8e7d6c",
# also CRA's "main.9f8e7d6c.chunk" (Sentry only strips one at the end).
_URL_HASH_PART = re.compile(r"[-.](?=[a-f]*\d)[a-f0-9]{7,}(?=[-.]|$)", re.I)
# Rollup/Vite's and esbuild's "[name]-[hash]": 8 characters of base64url (Vite,
# "index-DiwrgTda") or base32 (esbuild, "index-5QO5ZDFF") at the end. Taken for a hash
# only with a digit or two capitals in it, so "api-handlers" or "My-Settings" stay
# names; ~0.7 % of Vite's hashes have neither and still split.
_URL_BASE64_HASH = re.compile(r"-(?=[A-Za-z_-]*\d|(?:[^A-Z]*[A-Z]){2})[A-Za-z0-9_-]{8}$")


URL_MAX = 1024


@functools.lru_cache(maxsize=2048)
def _url_module(url: str) -> str:
    """A URL's file as a module name: no origin, query, extension, hash or version.

    Every deploy renames a bundle (main.9f8e7d6c.js), a CDN moves, a cache buster is
    appended: hashed as sent, each started new issues. Cached: a page's frames share a
    few bundles.
    """
    if url.startswith("blob:"):
        url = url[5:]
    try:
        path = urlsplit(url).path
    except ValueError:  # an invalid IPv6 host: keep what follows the origin
        path = url.split("://", 1)[-1].partition("/")[2]
    name, dot, ext = path.rpartition(".")
    if dot and "/" not in ext:
        path = name
    if path.endswith(".min"):
        path = path[:-4]
    *folders, file = path.split("/")
    tokens = [t for t in folders if t and not _URL_VERSION_FOLDER.fullmatch(t)]
    while tokens and _URL_PREFIX_FOLDER.fullmatch(tokens[0]):
        del tokens[0]
    # The file's own name stays, even numeric (a chunk id), but not a content hash.
    if file and not _URL_HASH_FILE.fullmatch(file):
        name = _URL_HASH_PART.sub("", file)
        # Only the last 9 characters can match (the pattern is anchored there): on the
        # whole name its lookahead scanned to the end from every "-", quadratic in a
        # name an SDK sends (990 frames of 1,000 dashes held the loop for 12.6 s).
        hashless = name[:-9] + _URL_BASE64_HASH.sub("", name[-9:])
        tokens.append(hashless or name or file)
    return "/".join(tokens) or "<unknown module>"


def _frame_where(frame: dict[str, Any]) -> tuple[str, bool]:
    """The frame's module, else its file; and whether the file is a URL."""
    module = frame.get("module")
    if isinstance(module, str) and module:
        return module, False
    abs_path = frame.get("abs_path")
    filename = frame.get("filename")
    for path in (abs_path, filename):
        if isinstance(path, str) and path.startswith(_URL_PREFIXES):
            # Cut first: the cache (and urlsplit's own) keeps its keys alive, and a
            # sender could fill 2,048 entries with URLs of megabytes each (+600 MB in a
            # reviewer's probe). No real script URL is this long; a longer one groups by
            # its first URL_MAX characters.
            return _url_module(path[:URL_MAX]), True
    path = filename if isinstance(filename, str) and filename else abs_path
    if not isinstance(path, str) or path in _NOT_A_FILE:
        return "", False
    # Paths differ by host, checkout or release directory; the basename does not (Sentry
    # also lowercases it).
    return path.rsplit("/", 1)[-1].rsplit("\\", 1)[-1].lower(), False


def _frame_part(frame: dict[str, Any], platform: str) -> str | None:
    """The frame as one grouping part; None when nothing in it names code."""
    own = frame.get("platform")
    if isinstance(own, str) and own:
        platform = own
    js = platform in _JS_PLATFORMS
    func = frame.get("function") or frame.get("raw_function")
    if not isinstance(func, str):
        func = ""
    if js:
        # Chrome says "HTMLButtonElement.onClick" where Firefox says "onClick".
        if "." in func:
            func = func[func.rfind(".") + 1 :]
        abs_path = frame.get("abs_path")
        if func == "eval" or (isinstance(abs_path, str) and abs_path in _JS_LOW_QUALITY_PATHS):
            return None
        if func.endswith("/<"):  # Firefox's anonymous functions
            func = ""
    if func in _UNKNOWN_FUNCTIONS:
        func = ""
    where, is_url = _frame_where(frame)
    if not where and not func:
        return None
    part = f"{where or '?'}:{func or '?'}"
    if platform in _CONTEXT_LINE_PLATFORMS:
        # The source line tells apart two raises of one type in one function. Longer lines
        # are minified or generated code; a nameless browser frame's line is a bundle's.
        line = frame.get("context_line")
        if (
            isinstance(line, str)
            and line
            and len(line) <= _CONTEXT_LINE_MAX
            and not (js and is_url and not func)
        ):
            line = line.strip()
            if "  " in line or "\t" in line or "\n" in line or "\r" in line:
                line = " ".join(line.split())  # rare: most lines only have indentation
            if line:
                part = f"{part}:{line}"
    return part


def _is_recursion(frame: dict[str, Any], previous: dict[str, Any]) -> bool:
    """Sentry's test: every field that places the call is the same. Spelled out rather
    than looped: it runs for every frame, and function or line usually differ."""
    get, was = frame.get, previous.get
    return (
        get("function") == was("function")
        and get("lineno") == was("lineno")
        and get("module") == was("module")
        and get("filename") == was("filename")
        and get("abs_path") == was("abs_path")
        and get("colno") == was("colno")
        and get("package") == was("package")
    )


def _counted_frames(stacktrace: Any, platform: str) -> list[tuple[bool, str]]:
    """(in_app, part) of each frame that names code, recursion collapsed to one call."""
    counted: list[tuple[bool, str]] = []
    previous: dict[str, Any] | None = None
    for frame in _raw_frames(stacktrace):
        if not isinstance(frame, dict):
            continue
        # A recursion's depth depends on the input, not on the bug (Sentry drops repeats).
        if previous is not None and _is_recursion(frame, previous):
            continue
        previous = frame
        part = _frame_part(frame, platform)
        if part is not None:
            counted.append((frame.get("in_app") is True, part))
    return counted


def _any_in_app(stacks: list[list[tuple[bool, str]]]) -> bool:
    for counted in stacks:
        for in_app, _ in counted:
            if in_app:
                return True
    return False


def _add_frames(parts: list[str], counted: list[tuple[bool, str]], in_app_only: bool) -> None:
    # In-app frames only when there are some: a framework upgrade does not split issues.
    if in_app_only:
        parts += [part for in_app, part in counted if in_app]
    else:
        parts += [part for _, part in counted]


# --- exceptions ---------------------------------------------------------------------


def _exception_id(exc: dict[str, Any], key: str) -> int | None:
    mechanism = exc.get("mechanism")
    value = mechanism.get(key) if isinstance(mechanism, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_group(exc: dict[str, Any]) -> bool:
    mechanism = exc.get("mechanism")
    return isinstance(mechanism, dict) and mechanism.get("is_exception_group") is True


def _exception_group_filter(
    chain: list[dict[str, Any]], counted: list[list[tuple[bool, str]]]
) -> tuple[list[int], int | None] | None:
    """Indices of the exceptions to hash, in hashing order, and the main exception (the
    one the issue is titled by) when there is one; None to keep the whole chain.

    Sentry's filter_exceptions_for_exception_groups: rebuild the tree from the mechanism's
    exception_id / parent_id, take the first exceptions below the root that are not
    groups; if they are all alike, hash one of them and its first-child chain (it is the
    main exception), else one of each distinct kind, by type descending, plus the root
    group. Otherwise a group of five identical failures and one of two were two issues,
    and a TaskGroup's failures (listed in the order the tasks failed) one per order.
    """
    if len(chain) < 2:
        return None
    index_of: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    # Reversed as Sentry builds it, so that "first child" means the same thing.
    for i in range(len(chain) - 1, -1, -1):
        exception_id = _exception_id(chain[i], "exception_id")
        if exception_id is None:
            return None  # an SDK without exception ids: nothing to rebuild
        index_of.setdefault(exception_id, i)
        parent_id = _exception_id(chain[i], "parent_id")
        if parent_id is not None and parent_id != exception_id:
            children.setdefault(parent_id, []).append(i)
    root = index_of.get(0)
    if root is None:
        return None

    def child_indices(i: int) -> list[int]:
        exception_id = _exception_id(chain[i], "exception_id")
        return children.get(exception_id, []) if exception_id is not None else []

    # Depth first, children in order; `seen` guards against ids that form a cycle. The
    # children of an id are pushed once: groups sharing an id pushed them each again, K
    # groups and C children K x C entries, 4.6 s for one 1 MB event (DoS review). With
    # ids unique, as SDKs send them, every group was expanded once anyway.
    top_level: list[int] = []
    seen: set[int] = set()
    expanded: set[int | None] = set()
    stack = [root]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if _is_group(chain[i]):
            exception_id = _exception_id(chain[i], "exception_id")
            if exception_id not in expanded:
                expanded.add(exception_id)
                stack.extend(reversed(child_indices(i)))
        else:
            top_level.append(i)
    # Alike: the same type and frames (the value only when there is no frame), as Sentry
    # compares the exceptions' own grouping components.
    distinct: dict[tuple[str, tuple[tuple[bool, str], ...], str], int] = {}
    for i in top_level:
        exc, frames = chain[i], counted[i]
        value = "" if frames else normalise_message(_text(exc.get("value")))
        distinct.setdefault((_text(exc.get("type")), tuple(frames), value), i)
    if len(distinct) == 1:
        [main] = distinct.values()
        path: set[int] = set()
        i = main
        while i not in path:
            path.add(i)
            below = child_indices(i)
            if not below:
                break
            i = below[0]
        return sorted(path), main
    # By type descending as Sentry sorts them; kinds of one type by their frames and
    # value, so that those too come in one order whatever failed first.
    kinds = sorted(sorted(distinct), key=lambda kind: kind[0], reverse=True)
    return [distinct[kind] for kind in kinds if distinct[kind] != root] + [root], None


def main_exception(event: dict[str, Any]) -> dict[str, Any] | None:
    """The exception an issue is titled by: the one raised (the chain's last) or, in an
    exception group whose top-level exceptions are all alike, that one, which alone is
    hashed (Sentry's ``main_exception_id``); None without exceptions."""
    chain = exceptions(event)
    if not chain:
        return None
    if any(_is_group(exc) for exc in chain):
        platform = _platform(event)
        counted = [_counted_frames(exc.get("stacktrace"), platform) for exc in chain]
        selected = _exception_group_filter(chain, counted)
        if selected is not None and selected[1] is not None:
            return chain[selected[1]]
    return chain[-1]


def _exception_parts(values: list[dict[str, Any]], platform: str) -> list[str] | None:
    counted = [_counted_frames(exc.get("stacktrace"), platform) for exc in values]
    selected = _exception_group_filter(values, counted)
    if selected is not None:
        values = [values[i] for i in selected[0]]
        counted = [counted[i] for i in selected[0]]
    typed = [i for i, exc in enumerate(values) if isinstance(exc.get("type"), str) and exc["type"]]
    if not typed:
        return None
    stacks = [counted[i] for i in typed]
    in_app_only = _any_in_app(stacks)
    parts: list[str] = ["exception"]
    for i, frames in zip(typed, stacks, strict=True):
        parts.append(f"type:{values[i]['type']}")
        _add_frames(parts, frames, in_app_only)
    if not any(stacks):
        # Without any frame, the type alone would merge every KeyError of a project.
        value = values[typed[-1]].get("value")
        parts.append(normalise_message(value) if isinstance(value, str) else "")
    return parts


# --- threads and a bare stacktrace ---------------------------------------------------


def _thread_stacktrace(event: dict[str, Any]) -> Any:
    """Sentry's choice: the one crashed thread, else the one current, else the only one."""
    candidates = values_of(event.get("threads"))
    for flag in ("crashed", "current"):
        chosen = [t for t in candidates if t.get(flag) is True]
        if len(chosen) == 1:
            return chosen[0].get("stacktrace")
    return candidates[0].get("stacktrace") if len(candidates) == 1 else None


def _stacktrace_parts(event: dict[str, Any], platform: str) -> list[str] | None:
    for stacktrace in (_thread_stacktrace(event), event.get("stacktrace")):
        counted = _counted_frames(stacktrace, platform)
        if counted:
            parts = ["stacktrace"]
            _add_frames(parts, counted, _any_in_app([counted]))
            return parts
    return None


def _platform(event: dict[str, Any]) -> str:
    platform = event.get("platform")
    return platform if isinstance(platform, str) else ""


def default_parts(event: dict[str, Any]) -> list[str]:
    """The components that the default fingerprint hashes."""
    values = exceptions(event)
    if any(isinstance(e.get("type"), str) and e["type"] for e in values):
        parts = _exception_parts(values, _platform(event))
        if parts is not None:
            return parts
    message = message_text(event)
    if message:
        return ["message", normalise_message(message)]
    # A threads-only event (a native crash, attach_stacktrace) was one "fallback" issue
    # per project, whatever crashed.
    return _stacktrace_parts(event, _platform(event)) or ["fallback"]


# --- fingerprint variables -----------------------------------------------------------


def _crash_frame(event: dict[str, Any]) -> dict[str, Any] | None:
    """Sentry's crash frame: the innermost in-app frame of the raised exception's stack
    (else of the top-level or only thread's stack), else its innermost frame."""
    values = exceptions(event)
    frames = _raw_frames(values[-1].get("stacktrace")) if values else []
    if not frames:
        frames = _raw_frames(event.get("stacktrace"))
    if not frames:
        threads = values_of(event.get("threads"))
        if len(threads) == 1:
            frames = _raw_frames(threads[0].get("stacktrace"))
    fallback = None
    for frame in reversed(frames):
        if isinstance(frame, dict):
            if frame.get("in_app") is True:
                return frame
            if fallback is None:
                fallback = frame
    return fallback


def _canonical_message(event: dict[str, Any]) -> str:
    logentry = event.get("logentry")
    if isinstance(logentry, dict):
        for key in ("formatted", "message"):
            if text := _text(logentry.get(key)):
                return text
    message = event.get("message")
    if isinstance(message, dict):
        message = message.get("formatted") or message.get("message")
    if text := _text(message):
        return text
    values = exceptions(event)
    return _text(values[-1].get("value")) if values else ""


class _Tags:
    """An event's tags by name, for ``{{tags.X}}`` variables. Sentry's list shape
    (``[[name, value], ...]``) is walked once, on the first lookup, keeping each name's
    first pair with a text value: walked per variable, 64 variables over 500,000 tags (a
    977 KB event, 1.3 KB gzipped) took 2.3 s of the event loop (ingest review,
    thirty-first session)."""

    __slots__ = ("_by_name", "_tags")

    def __init__(self, event: dict[str, Any]) -> None:
        self._tags = event.get("tags")
        self._by_name: dict[str, str] | None = None

    def get(self, name: str) -> str:
        tags = self._tags
        if isinstance(tags, dict):
            return _text(tags.get(name))
        if not isinstance(tags, list):
            return ""
        if self._by_name is None:
            found: dict[str, str] = {}
            for pair in tags:
                if (
                    isinstance(pair, list | tuple)
                    and len(pair) == 2
                    and isinstance(pair[0], str)
                    and pair[0] not in found
                    and (text := _text(pair[1]))
                ):
                    found[pair[0]] = text
            self._by_name = found
        return self._by_name.get(name, "")


# Variables read from the crash frame: (frame field, Sentry's placeholder when missing).
_FRAME_VARIABLES = {
    "function": ("function", "<no-function>"),
    "stack.function": ("function", "<no-function>"),
    "module": ("module", "<no-module>"),
    "stack.module": ("module", "<no-module>"),
    "package": ("package", "<no-package>"),
    "stack.package": ("package", "<no-package>"),
    "path": ("abs_path", "<no-abs-path>"),
    "stack.abs_path": ("abs_path", "<no-abs-path>"),
    "stack.filename": ("filename", "<no-filename>"),
}


def _resolve(name: str, event: dict[str, Any], tags: _Tags | None = None) -> str | None:
    """A variable's value, or Sentry's placeholder when the event has none; None when the
    name is not one of Sentry's (the entry then stays literal, as Sentry's older configs
    keep it)."""
    if name == "transaction":
        return _text(event.get("transaction")) or "<no-transaction>"
    if name in ("message", "raw_message"):
        message = _canonical_message(event)
        return normalise_message(message) if message else "<no-message>"
    if name in ("type", "error.type", "value", "error.value", "raw_value", "error.raw_value"):
        values = exceptions(event)
        if name.endswith("type"):
            return (_text(values[-1].get("type")) if values else "") or "<no-type>"
        return (_text(values[-1].get("value")) if values else "") or "<no-value>"
    if name in ("level", "logger"):
        return _text(event.get(name)) or f"<no-{name}>"
    if name.startswith("tags."):
        tag = name[5:]
        return (tags or _Tags(event)).get(tag) or f"<no-value-for-tag-{tag}>"
    if name not in _FRAME_VARIABLES:
        return None
    field, missing = _FRAME_VARIABLES[name]
    frame = _crash_frame(event)
    if frame is None:
        return missing
    if field == "abs_path":
        value = _text(frame.get("abs_path")) or _text(frame.get("filename"))
    elif field == "filename":
        value = _text(frame.get("filename")) or _text(frame.get("abs_path"))
    else:
        value = _text(frame.get(field))
        if field == "package" and value:
            value = value.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    return value or missing


# Entries of an SDK's fingerprint that count; those after them are left out. SDKs send a
# few; 80,000 "{{message}}" (1 MB) each normalised the whole message again and hashed
# another copy of it, minutes on the event loop (DoS review, twenty-ninth session).
FINGERPRINT_MAX = 64


def expand(custom: Iterable[Any], event: dict[str, Any]) -> list[str]:
    parts: list[str] = ["custom"]
    # Each variable read once: a name used again costs a reference, not the event again.
    resolved: dict[str, str | None] = {}
    tags = _Tags(event)
    default: list[str] | None = None
    for item in itertools.islice(custom, FINGERPRINT_MAX):
        name = _variable_name(item)
        if name == "default":
            if default is None:
                default = default_parts(event)
            parts.extend(default)
            continue
        if name is not None and name not in resolved:
            resolved[name] = _resolve(name, event, tags)
        value = resolved[name] if name is not None else None
        parts.append(_literal(item) if value is None else value)
    return parts


def fingerprint_parts(event: dict[str, Any]) -> list[str]:
    custom = event.get("fingerprint")
    if isinstance(custom, list) and custom:
        if all(is_default_variable(item) for item in custom):
            return default_parts(event)
        return expand(custom, event)
    return default_parts(event)


def hash_parts(parts: Iterable[str]) -> str:
    # Hashing the JSON list keeps part boundaries: ["a b"] and ["a", "b"] differ. Fed a
    # part at a time, the same bytes as orjson.dumps(list(parts)), without a second copy
    # of them all (64 references to a 1 MB message made one of 64 MB).
    digest = hashlib.blake2b(digest_size=16)
    digest.update(b"[")
    for i, part in enumerate(parts):
        if i:
            digest.update(b",")
        digest.update(orjson.dumps(part))
    digest.update(b"]")
    return digest.hexdigest()


def fingerprint(event: dict[str, Any]) -> str:
    """32 hex characters; same value for events that belong to the same issue."""
    return hash_parts(fingerprint_parts(event))
