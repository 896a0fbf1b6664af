import json

import pytest

from teamrl.protocol import FormatError, Message, message_json_schema, parse_message, render_message


def test_parse_code_keeps_indentation_and_comparisons():
    raw = "<code>def f(x):\n    if x < 0:\n        return -x\n    return x</code><|eos|>"
    msg = parse_message("coder", "code", raw)
    assert msg.kind == "code"
    assert msg.content == "def f(x):\n    if x < 0:\n        return -x\n    return x"


@pytest.mark.parametrize(
    "raw,verdict,content",
    [
        ("<review>approve</review>", "approve", ""),
        ("<review>revise: f(2) gives 5, expected 4</review>", "revise", "f(2) gives 5, expected 4"),
        ("<review>REVISE f(1) fails</review>", "revise", "f(1) fails"),
    ],
)
def test_parse_review_verdicts(raw, verdict, content):
    msg = parse_message("reviewer", "review", raw)
    assert (msg.verdict, msg.content) == (verdict, content)


@pytest.mark.parametrize(
    "kind,raw,needle",
    [
        ("code", "def f(x): return x", "expected '<code>"),
        ("code", "<code>def f(x): return x", "never closed"),
        ("plan", "<plan>   </plan>", "empty plan"),
        ("review", "<review>looks fine</review>", "approve' or 'revise"),
        ("tests", "", "expected '<tests>"),
    ],
)
def test_malformed_text_raises_format_error_naming_the_problem(kind, raw, needle):
    with pytest.raises(FormatError, match=needle):
        parse_message("r", kind, raw)


@pytest.mark.parametrize(
    "msg",
    [
        Message(role="p", kind="plan", content="add 2; return it"),
        Message(role="c", kind="code", content="def f(x):\n    return x + 2"),
        Message(role="r", kind="review", content="f(1) gives 2, expected 3", verdict="revise"),
        Message(role="r", kind="review", content="", verdict="approve"),
        Message(role="t", kind="tests", content="assert f(1) == 3\nassert f(0) == 2"),
    ],
)
def test_render_then_parse_round_trips(msg):
    assert parse_message(msg.role, msg.kind, render_message(msg)) == msg


def test_schema_is_valid_json_schema_of_message():
    schema = json.loads(message_json_schema())
    assert schema["title"] == "Message"
    assert set(schema["required"]) == {"role", "kind", "content"}
    assert "approve" in json.dumps(schema["properties"]["verdict"])
