"""Grouping defects found against Sentry's documented behaviour, one block per defect.

Each block has a case that failed on fingerprint.py as it was before the twentieth
session's change (docs/ARCHITECTURE.md "Grouping"); the others (a module winning, line
spacing, long lines, chains without exception ids, ordinary words) guard the fix's limits.
"""

import copy

from errortrack.issues.fingerprint import fingerprint, fingerprint_parts, normalise_message


def event(frames, *, type_="TypeError", value="x is undefined", platform="javascript", **extra):
    exc = {"type": type_, "value": value, "stacktrace": {"frames": frames}}
    return {"platform": platform, "exception": {"values": [exc]}, **extra}


def js_frame(url, function, *, lineno=1, colno=1000, in_app=True, **extra):
    return {
        "filename": url,
        "abs_path": url,
        "function": function,
        "lineno": lineno,
        "colno": colno,
        "in_app": in_app,
        **extra,
    }


def py_frame(function, *, module="app.views", lineno=10, context_line=None, **extra):
    f = {"module": module, "function": function, "lineno": lineno, "in_app": True, **extra}
    if context_line is not None:
        f["context_line"] = context_line
    return f


# 1. Frame location: URLs, paths, JavaScript function names, module first.


def test_a_deploy_a_cdn_host_or_a_query_string_does_not_split_a_browser_issue():
    before = event(
        [
            js_frame("https://cdn-a.example.com/static/js/vendor.1a2b3c4d.js", "dispatch"),
            js_frame("https://cdn-a.example.com/static/js/main.9f8e7d6c.js", "onClick"),
        ]
    )
    after = event(
        [
            js_frame("https://cdn-b.example.net/static/js/vendor.77aa88bb.js?v=2", "dispatch"),
            js_frame("https://cdn-b.example.net/static/js/main.0a1b2c3d.js?v=2#x", "onClick"),
        ]
    )
    assert fingerprint(before) == fingerprint(after)
    assert fingerprint_parts(after)[-1] == "main:onClick"
    # Another bundle is another place in the code.
    other = copy.deepcopy(before)
    other["exception"]["values"][0]["stacktrace"]["frames"][-1]["abs_path"] = (
        "https://cdn-a.example.com/static/js/admin.9f8e7d6c.js"
    )
    other["exception"]["values"][0]["stacktrace"]["frames"][-1]["filename"] = (
        "https://cdn-a.example.com/static/js/admin.9f8e7d6c.js"
    )
    assert fingerprint(other) != fingerprint(before)


def test_hash_and_version_directories_of_a_url_are_left_out():
    a = event([js_frame("https://example.com/assets/1.4.2/app.js", "run")])
    b = event([js_frame("https://example.com/assets/v1.5.0/app.min.js", "run")])
    c = event([js_frame("https://example.com/assets/" + "ab" * 20 + "/app.js", "run")])
    assert fingerprint(a) == fingerprint(b) == fingerprint(c)
    assert fingerprint_parts(a)[-1] == "assets/app:run"
    # A blob: URL's object is new on every page load.
    blob_a = event([js_frame("blob:https://example.com/6fa459ea-ee8a-3ca4-894e-db77e160355e", "w")])
    blob_b = event([js_frame("blob:https://example.com/16fd2706-8baf-433b-82eb-8c7fada847da", "w")])
    assert fingerprint(blob_a) == fingerprint(blob_b)
    # Create React App puts the hash before ".chunk".
    cra_a = event([js_frame("https://example.com/static/js/main.9f8e7d6c.chunk.js", "run")])
    cra_b = event([js_frame("https://example.com/static/js/main.0a1b2c3d.chunk.js", "run")])
    assert fingerprint(cra_a) == fingerprint(cra_b)
    # A numeric chunk name is the file's name, not a version.
    chunk_2 = event([js_frame("https://example.com/static/js/2.chunk.js", "run")])
    chunk_3 = event([js_frame("https://example.com/static/js/3.chunk.js", "run")])
    assert fingerprint(chunk_2) != fingerprint(chunk_3)


def test_a_path_groups_by_its_basename():
    a = event([py_frame("run", filename="/srv/releases/20240101/app/x.py")], platform="python")
    b = event([py_frame("run", filename="/srv/releases/20240201/app/x.py")], platform="python")
    for e in (a, b):
        del e["exception"]["values"][0]["stacktrace"]["frames"][0]["module"]
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint_parts(a)[-1] == "x.py:run"
    c = copy.deepcopy(a)
    c["exception"]["values"][0]["stacktrace"]["frames"][0]["filename"] = "/srv/app/y.py"
    assert fingerprint(c) != fingerprint(a)


def test_javascript_keeps_the_function_name_after_the_last_dot():
    url = "https://example.com/static/js/main.9f8e7d6c.js"
    chrome = event([js_frame(url, "HTMLButtonElement.onClick")])
    firefox = event([js_frame(url, "onClick")])
    node = event([js_frame(url, "Object.onClick")], platform="node")
    assert fingerprint(chrome) == fingerprint(firefox) == fingerprint(node)
    # Python's qualified names stay whole: Cart.total and Order.total are different code.
    py_a = event([py_frame("Cart.total")], platform="python")
    py_b = event([py_frame("total")], platform="python")
    assert fingerprint(py_a) != fingerprint(py_b)


def test_a_module_sent_by_the_sdk_wins_over_the_file():
    a = event([py_frame("run", filename="/srv/a/views.py")], platform="python")
    b = event([py_frame("run", filename="/opt/b/other.py")], platform="python")
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint_parts(a)[-1] == "app.views:run"


# 2. Fingerprint variables.


def custom(fp, **extra):
    base = {
        "platform": "python",
        "exception": {
            "values": [
                {
                    "type": "KeyError",
                    "value": "'id'",
                    "stacktrace": {"frames": [py_frame("load", module="app.db")]},
                }
            ]
        },
        "fingerprint": fp,
    }
    base.update(extra)
    return base


def test_transaction_variable_splits_by_transaction():
    a = custom(["{{ transaction }}"], transaction="/checkout")
    b = custom(["{{transaction}}"], transaction="/cart")
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint_parts(a) == ["custom", "/checkout"]
    assert fingerprint_parts(custom(["{{ transaction }}"])) == ["custom", "<no-transaction>"]


def test_exception_variables():
    e = custom(["{{ type }}", "{{ error.type }}", "{{ value }}", "{{ error.value }}"])
    assert fingerprint_parts(e) == ["custom", "KeyError", "KeyError", "'id'", "'id'"]
    none = {"message": "m", "fingerprint": ["{{ type }}", "{{ value }}"]}
    assert fingerprint_parts(none) == ["custom", "<no-type>", "<no-value>"]


def test_frame_variables_use_the_crash_frame():
    e = custom(["{{ function }}", "{{ module }}", "{{ stack.function }}"])
    assert fingerprint_parts(e) == ["custom", "load", "app.db", "load"]
    none = {"message": "m", "fingerprint": ["{{ function }}", "{{ module }}"]}
    assert fingerprint_parts(none) == ["custom", "<no-function>", "<no-module>"]


def test_level_logger_and_message_variables():
    e = custom(["{{ level }}", "{{ logger }}"], level="warning", logger="app.jobs")
    assert fingerprint_parts(e) == ["custom", "warning", "app.jobs"]
    assert fingerprint_parts(custom(["{{ level }}", "{{ logger }}"])) == [
        "custom",
        "<no-level>",
        "<no-logger>",
    ]
    a = {"message": "order 12 failed", "fingerprint": ["{{ message }}"]}
    b = {"message": "order 99 failed", "fingerprint": ["{{ message }}"]}
    c = {"message": "payment refused", "fingerprint": ["{{ message }}"]}
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    assert fingerprint_parts({"fingerprint": ["{{ message }}"]}) == ["custom", "<no-message>"]


def test_tag_variables_read_dicts_and_pairs():
    a = custom(["{{ tags.tenant }}"], tags={"tenant": "acme"})
    b = custom(["{{ tags.tenant }}"], tags=[["server", "x"], ["tenant", "globex"]])
    assert fingerprint_parts(a) == ["custom", "acme"]
    assert fingerprint_parts(b) == ["custom", "globex"]
    assert fingerprint_parts(custom(["{{ tags.tenant }}"], tags={"other": "1"})) == [
        "custom",
        "<no-value-for-tag-tenant>",
    ]


def test_variables_mix_with_default_and_literals():
    a = custom(["db", "{{ transaction }}", "{{ default }}"], transaction="/a")
    parts = fingerprint_parts(a)
    assert parts[:4] == ["custom", "db", "/a", "exception"]


# 3. The frame's source line.


def raises(line, lineno):
    frames = [py_frame("parse", lineno=lineno, context_line=line)]
    return event(frames, type_="ValueError", value="bad input", platform="python")


def test_two_raise_lines_of_one_type_in_one_function_are_two_issues():
    a = raises("        raise ValueError('empty header')", 20)
    b = raises("        raise ValueError('bad checksum')", 31)
    assert fingerprint(a) != fingerprint(b)


def test_the_source_line_is_compared_without_line_numbers_or_spacing():
    a = raises("        raise ValueError('empty header')", 20)
    b = raises("\traise   ValueError('empty header')  ", 57)
    assert fingerprint(a) == fingerprint(b)


def test_a_source_line_over_120_characters_or_of_another_platform_is_left_out():
    long_a = raises("x = " + "a" * 130, 1)
    long_b = raises("x = " + "b" * 130, 1)
    assert fingerprint(long_a) == fingerprint(long_b)
    go_a, go_b = raises("panic(a)", 1), raises("panic(b)", 1)
    go_a["platform"] = go_b["platform"] = "go"
    assert fingerprint(go_a) == fingerprint(go_b)


# 4. Recursion.


def test_recursion_depth_does_not_split_an_issue():
    walk = py_frame("walk", module="app.tree", lineno=14, context_line="return walk(node.left)")
    leaf = py_frame("leaf", module="app.tree", lineno=3, context_line="return node.value / 0")
    shallow = event([walk, leaf], platform="python", type_="ZeroDivisionError")
    deep = event([walk, walk, walk, walk, leaf], platform="python", type_="ZeroDivisionError")
    assert fingerprint(shallow) == fingerprint(deep)
    # A frame that differs in its line is not recursion.
    other_line = dict(walk, lineno=15)
    mutual = event([walk, other_line, leaf], platform="python", type_="ZeroDivisionError")
    assert fingerprint(mutual) != fingerprint(shallow)


# 5. Exception groups.


def group_event(children):
    """sentry-python's shape: children first, the group (exception_id 0) last."""
    values = []
    for i, (type_, function) in enumerate(children, start=1):
        values.append(
            {
                "type": type_,
                "value": f"child {i}",
                "stacktrace": {"frames": [py_frame(function, module="app.jobs")]},
                "mechanism": {
                    "type": "chained",
                    "source": f"exceptions[{i - 1}]",
                    "exception_id": i,
                    "parent_id": 0,
                },
            }
        )
    values.append(
        {
            "type": "ExceptionGroup",
            "value": f"{len(children)} failed",
            "stacktrace": {"frames": [py_frame("run_all", module="app.jobs")]},
            "mechanism": {"type": "generic", "exception_id": 0, "is_exception_group": True},
        }
    )
    return {"platform": "python", "exception": {"values": values}}


def test_an_exception_group_does_not_split_by_how_many_identical_children_failed():
    two = group_event([("ValueError", "fetch")] * 2)
    five = group_event([("ValueError", "fetch")] * 5)
    assert fingerprint(two) == fingerprint(five)
    assert fingerprint_parts(two) == ["exception", "type:ValueError", "app.jobs:fetch"]


def test_a_group_of_the_same_distinct_failures_in_another_order_is_one_issue():
    # asyncio.TaskGroup lists its children in the order the tasks failed: the same two
    # failures were two issues by timing. Sentry sorts the top-level exceptions by type
    # (descending) before taking one of each (review, twenty-seventh session).
    first = group_event([("ValueError", "fetch"), ("KeyError", "parse")])
    second = group_event([("KeyError", "parse"), ("ValueError", "fetch")])
    third = group_event([("KeyError", "parse"), ("ValueError", "fetch"), ("KeyError", "parse")])
    assert fingerprint(first) == fingerprint(second) == fingerprint(third)
    assert fingerprint_parts(first) == [
        "exception",
        "type:ValueError",
        "app.jobs:fetch",
        "type:KeyError",
        "app.jobs:parse",
        "type:ExceptionGroup",
        "app.jobs:run_all",
    ]
    # The same type from two places: still one order, whichever failed first.
    a = group_event([("ValueError", "fetch"), ("ValueError", "parse")])
    b = group_event([("ValueError", "parse"), ("ValueError", "fetch")])
    assert fingerprint(a) == fingerprint(b)


def test_a_group_of_identical_failures_is_titled_by_the_failure():
    # Grouped by the one child, titled by the group ("ExceptionGroup: 3 failed"): Sentry
    # titles it by that child (main_exception_id).
    from errortrack.issues import summary

    alike = group_event([("ValueError", "fetch")] * 3)
    # The first below the root as Sentry walks the tree (from the chain's end): child 3.
    assert summary.title(alike) == "ValueError: child 3"
    mixed = group_event([("ValueError", "fetch"), ("KeyError", "parse")])
    assert summary.title(mixed) == "ExceptionGroup: 2 failed"


def test_distinct_children_of_a_group_are_each_hashed_once_with_the_group():
    mixed = group_event([("ValueError", "fetch"), ("KeyError", "parse"), ("ValueError", "fetch")])
    parts = fingerprint_parts(mixed)
    assert parts.count("type:ValueError") == 1
    assert parts.count("type:KeyError") == 1
    assert "type:ExceptionGroup" in parts
    assert fingerprint(mixed) != fingerprint(group_event([("ValueError", "fetch")] * 3))
    assert fingerprint(mixed) == fingerprint(
        group_event([("KeyError", "parse"), ("ValueError", "fetch")])
    )


def test_a_chain_without_exception_ids_is_unchanged():
    plain = group_event([("ValueError", "fetch")] * 2)
    for exc in plain["exception"]["values"]:
        exc["mechanism"] = {"type": "generic"}
    assert fingerprint_parts(plain).count("type:ValueError") == 2


# 6. Frames without anything that identifies code.


def test_frames_without_module_file_or_function_do_not_count():
    def native(value, frames):
        return event(frames, type_="Error", value=value, platform="javascript")

    junk = [
        {"instruction_addr": "0x1000"},
        {"lineno": 7},
        {"function": "?", "lineno": 1},
        {"function": "<anonymous>", "colno": 3},
    ]
    a = native("cannot read property 'id' of null", copy.deepcopy(junk))
    b = native("quota exceeded", copy.deepcopy(junk))
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint_parts(a) == ["exception", "type:Error", "cannot read property 'id' of null"]


# 7. Threads-only events and a top-level stacktrace.


def thread(frames, **flags):
    return {"id": 1, "stacktrace": {"frames": frames}, **flags}


def test_a_threads_only_event_groups_by_the_crashed_threads_stack():
    idle = thread([py_frame("wait", module="threading")])
    crash_a = thread([py_frame("handle", module="app.worker")], crashed=True)
    crash_b = thread([py_frame("flush", module="app.cache")], crashed=True)
    a = {"platform": "python", "threads": {"values": [idle, crash_a]}}
    b = {"platform": "python", "threads": {"values": [crash_b, idle]}}
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) != fingerprint({})
    same = {"platform": "python", "threads": {"values": [dict(idle, current=True), crash_a]}}
    assert fingerprint(same) == fingerprint(a)


def test_current_or_only_thread_and_a_top_level_stacktrace():
    stack = [py_frame("handle", module="app.worker")]
    current = {"threads": {"values": [thread([py_frame("x")]), thread(stack, current=True)]}}
    only = {"threads": {"values": [thread(stack)]}}
    top = {"stacktrace": {"frames": stack}}
    assert fingerprint(current) == fingerprint(only) == fingerprint(top)
    assert fingerprint(top) != fingerprint({"stacktrace": {"frames": [py_frame("other")]}})


# 8. Message parameters.


def test_messages_normalise_emails_urls_ips_and_iso_times():
    a = {
        "message": "mail to ann@example.com via https://api.example.com/v1/send?id=12 from"
        " 10.0.0.12 and fe80::1ff:fe23:4567:890a at 2024-01-15T10:00:00Z (day 2024-01-15,"
        " 10:00:00)"
    }
    b = {
        "message": "mail to bob.smith+x@corp.example.org via http://other.host/send from"
        " 192.168.1.7 and 2001:db8::8a2e:370:7334 at 2025-12-31 23:59:59.123+01:00 (day"
        " 2025-12-31, 23:59:59)"
    }
    assert fingerprint(a) == fingerprint(b)
    assert normalise_message(a["message"]) == (
        "mail to <email> via <url> from <ip> and <ip> at <date> (day <date>, <date>)"
    )


def test_message_placeholders_keep_ordinary_words_and_class_method_names():
    assert normalise_message("Foo::bar failed for abc") == "Foo::bar failed for abc"
    assert normalise_message("took 12 ms") == "took <num> ms"


# A fingerprint entry nested deeper than Python's recursion limit (orjson decodes up to
# 1024 levels) made str() raise RecursionError: a 500 that lost the whole envelope.


def test_a_deeply_nested_fingerprint_entry_is_a_part_not_a_crash():
    def nested(depth, leaf):
        value = leaf
        for _ in range(depth):
            value = [value]
        return value

    deep = {"message": "m", "fingerprint": [nested(1000, "a"), "x"]}
    assert fingerprint_parts(deep) == ["custom", "<too deep>", "x"]
    assert len(fingerprint(deep)) == 32
    shallow = {"message": "m", "fingerprint": [["a", 1], {"k": True}, 5, "{{ default }}"]}
    assert fingerprint_parts(shallow)[1:4] == ['["a",1]', '{"k":true}', "5"]


def test_long_urls_are_cut_before_the_module_cache_keeps_them():
    # Each distinct URL was a key of _url_module's cache (2,048 entries) and of urlsplit's
    # (128): events with URLs of megabytes kept hundreds of MB alive in a worker.
    import gc
    import tracemalloc
    import urllib.parse

    from errortrack.issues import fingerprint as fp

    fp._url_module.cache_clear()
    urllib.parse.urlsplit.cache_clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(5):
            url = f"https://cdn.example.com/{i}/" + "x" * 1_000_000 + ".js"
            fingerprint(event([js_frame(url, "f")]))
            del url
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 200_000, kept  # 5 MB before the cut
    long_a = "https://cdn.example.com/app/" + "a" * 5000 + ".js"
    long_b = "https://cdn.example.com/app/" + "a" * 5000 + "b.js"
    assert fingerprint(event([js_frame(long_a, "f")])) == fingerprint(
        event([js_frame(long_b, "f")])
    )


def test_versions_names_and_digests_after_an_at_sign_are_not_emails():
    # Each pair merged into one issue ("Cannot find module <email>") when any word@word
    # was an address.
    pairs = [
        ("Cannot find module react@18.2.0", "Cannot find module vue@3.3.4"),
        ("job step@build failed", "job step@deploy failed"),
        ("image nginx@sha256:0a1b", "image postgres@sha256:0a1b"),
    ]
    for a, b in pairs:
        assert fingerprint({"message": a}) != fingerprint({"message": b}), (a, b)
    assert normalise_message("mail ann@example.com and bob@mail.example.org.") == (
        "mail <email> and <email>."
    )


def test_vite_and_esbuild_hashes_do_not_split_a_deploy():
    # "[name]-[hash]" with 8 base64url (Vite) or base32 (esbuild) characters: each deploy
    # renamed the bundle and started new issues (only hex hashes were recognised).
    for old, new in [
        ("index-DiwrgTda.js", "index-BqX9kZ3a.js"),
        ("index-5QO5ZDFF.js", "index-K7TQ2MXA.js"),
        ("chunk-Di-rgTda.js", "chunk-a_3Zk9Qp.js"),
    ]:
        a = event([js_frame(f"https://shop.example/assets/{old}", "pay")])
        b = event([js_frame(f"https://shop.example/assets/{new}", "pay")])
        assert fingerprint(a) == fingerprint(b), (old, new)
    # Names that merely end in eight letters stay names.
    for one, other in [
        ("api-handlers.js", "api-settings.js"),
        ("My-Settings.js", "My-Accounts.js"),
    ]:
        a = event([js_frame(f"https://shop.example/assets/{one}", "pay")])
        b = event([js_frame(f"https://shop.example/assets/{other}", "pay")])
        assert fingerprint(a) != fingerprint(b), (one, other)


def test_numbers_are_parameters_only_standing_alone():
    """Sentry's int, float and duration patterns need word boundaries: digits inside a
    word are part of it. They were replaced anywhere, so "KeyError: 'field1'" and
    "'field2'", or "user42" and "user43", were one issue (found by the twenty-first
    session's events-by-trace test)."""
    assert normalise_message("KeyError: 'field1'") == "KeyError: 'field1'"
    assert normalise_message("no route v2/items for user_42") == "no route v2/items for user_42"
    assert normalise_message("HTTP 503 after 3 tries, 2.5s (1,024 bytes); -7") == (
        "HTTP <num> after <num> tries, <num> (<num> bytes); -<num>"
    )
    assert normalise_message("timeout 250ms at step 4.") == "timeout <num> at step <num>."
    one = {"exception": {"values": [{"type": "KeyError", "value": "'field1'"}]}}
    two = {"exception": {"values": [{"type": "KeyError", "value": "'field2'"}]}}
    assert fingerprint(one) != fingerprint(two)
    three = {"exception": {"values": [{"type": "KeyError", "value": "row 1 of 9"}]}}
    four = {"exception": {"values": [{"type": "KeyError", "value": "row 2 of 10"}]}}
    assert fingerprint(three) == fingerprint(four)
