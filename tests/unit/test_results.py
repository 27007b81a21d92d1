"""How an execution's outcome reads over MCP (upstream contract §3.5)."""

import re

import pytest

from executor_mcp.execution.engine import Outcome
from executor_mcp.execution.results import CONFIRMATION_PROMPT, MAX_TEXT, render, render_paused, truncate


def text_of(result: dict) -> str:
    [block] = result["content"]
    assert block["type"] == "text"
    return block["text"]


# -- completed -----------------------------------------------------------------------------------------


def test_completed_number_is_its_text_and_structured_result() -> None:
    result = render(Outcome(ok=True, result=42, text="42"))
    assert result == {
        "content": [{"type": "text", "text": "42"}],
        "structuredContent": {"status": "completed", "result": 42, "logs": []},
    }
    assert "isError" not in result
    assert "emitted" not in result["structuredContent"]


def test_completed_object_shows_the_pretty_text_and_keeps_the_raw_value() -> None:
    result = render(Outcome(ok=True, result={"a": [1, 2]}, text='{\n  "a": [\n    1,\n    2\n  ]\n}'))
    assert text_of(result) == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert result["structuredContent"]["result"] == {"a": [1, 2]}


def test_completed_without_a_value_reads_no_result() -> None:
    result = render(Outcome(ok=True, result=None, text=None))
    assert text_of(result) == "(no result)"
    assert result["structuredContent"] == {"status": "completed", "result": None, "logs": []}


def test_completed_logs_follow_the_result() -> None:
    logs = ["[log] one", "[warn] two"]
    result = render(Outcome(ok=True, result="done", text="done", logs=logs))
    assert text_of(result) == "done\n\nLogs:\n[log] one\n[warn] two"
    assert result["structuredContent"]["logs"] == logs


def test_no_result_text_is_still_followed_by_logs() -> None:
    assert text_of(render(Outcome(ok=True, logs=["[log] x"]))) == "(no result)\n\nLogs:\n[log] x"


# -- errors --------------------------------------------------------------------------------------------


def test_error_text_structured_and_is_error() -> None:
    result = render(Outcome(ok=False, error="boom (3:5)"))
    assert result == {
        "content": [{"type": "text", "text": "Error: boom (3:5)"}],
        "structuredContent": {"status": "error", "error": "boom (3:5)", "logs": []},
        "isError": True,
    }


def test_error_logs_follow_the_message() -> None:
    result = render(Outcome(ok=False, error="boom", logs=["[error] failing"]))
    assert text_of(result) == "Error: boom\n\nLogs:\n[error] failing"
    assert result["structuredContent"] == {"status": "error", "error": "boom", "logs": ["[error] failing"]}


def test_defect_is_opaque_and_has_no_logs() -> None:
    outcome = Outcome(ok=False, error="Internal tool error [abcd1234]", defect=True, logs=["[log] secret"])
    result = render(outcome)
    assert result == {
        "content": [{"type": "text", "text": "Error: Internal tool error [abcd1234]"}],
        "structuredContent": {"status": "error", "error": "Internal tool error [abcd1234]"},
        "isError": True,
    }
    assert re.fullmatch(r"Error: Internal tool error \[[0-9a-f]{8}\]", text_of(result))


# -- emitted output ------------------------------------------------------------------------------------


def test_emitted_strings_and_values_in_order_and_the_result_only_structured() -> None:
    emitted = ["hello", {"a": 1, "b": "é"}, [1, 2], 7, None, True]
    result = render(Outcome(ok=True, result=99, text="99", emitted=emitted))
    assert [block["text"] for block in result["content"]] == ["hello", '{"a":1,"b":"é"}', "[1,2]", "7", "null", "true"]
    assert all(block["type"] == "text" for block in result["content"])
    assert result["structuredContent"] == {"status": "completed", "result": 99, "logs": [], "emitted": 6}
    assert "isError" not in result


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": "hi", "annotations": {"audience": ["user"]}},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "a", "mimeType": "text/plain"}},
        {"type": "resource_link", "uri": "https://example.com/x", "name": "x"},
    ],
)
def test_valid_content_blocks_are_forwarded_unchanged(block: dict) -> None:
    result = render(Outcome(ok=True, emitted=[block]))
    assert result["content"] == [block]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text"},
        {"type": "text", "text": 5},
        {"type": "image", "data": "abc"},
        {"type": "audio", "mimeType": "audio/wav"},
        {"type": "resource", "resource": "file:///a.txt"},
        {"type": "resource", "resource": {"text": "no uri"}},
        {"type": "resource_link", "uri": "https://example.com/x"},
    ],
)
def test_invalid_content_blocks_are_omitted(block: dict) -> None:
    result = render(Outcome(ok=True, emitted=["before", block, "after"]))
    assert result["content"] == [
        {"type": "text", "text": "before"},
        {"type": "text", "text": "Invalid execution output item omitted."},
        {"type": "text", "text": "after"},
    ]
    assert result["structuredContent"]["emitted"] == 3


def test_object_with_an_unknown_type_is_plain_json() -> None:
    result = render(Outcome(ok=True, emitted=[{"type": "chart", "points": [1]}]))
    assert result["content"] == [{"type": "text", "text": '{"type":"chart","points":[1]}'}]


def test_emitted_then_logs() -> None:
    result = render(Outcome(ok=True, result=1, text="1", emitted=["out"], logs=["[log] a", "[info] b"]))
    assert result["content"] == [
        {"type": "text", "text": "out"},
        {"type": "text", "text": "Logs:\n[log] a\n[info] b"},
    ]


def test_emitted_then_error() -> None:
    result = render(Outcome(ok=False, error="boom", emitted=["partial"]))
    assert result["content"] == [{"type": "text", "text": "partial"}, {"type": "text", "text": "Error: boom"}]
    assert result["structuredContent"] == {"status": "error", "error": "boom", "logs": [], "emitted": 1}
    assert result["isError"] is True


def test_emitted_then_error_with_its_logs() -> None:
    result = render(Outcome(ok=False, error="boom", emitted=["partial"], logs=["[log] a"]))
    assert result["content"][-1] == {"type": "text", "text": "Error: boom\n\nLogs:\n[log] a"}
    assert len(result["content"]) == 2


def test_emitted_image_file_renders_as_a_file_line_and_an_image() -> None:
    file = {"name": "chart.png", "mimeType": "image/png", "byteLength": 3, "data": "AAEC"}
    content = render(Outcome(ok=True, emitted=[file]))["content"]
    assert content[0] == {"type": "text", "text": "File output: chart.png (image/png, 3 bytes)"}
    assert content[1]["type"] == "image"
    assert content[1]["mimeType"] == "image/png"


def test_emitted_files_render_by_mime_type() -> None:
    text_file = {"name": "notes.txt", "mimeType": "text/plain", "byteLength": 5, "data": "aGVsbG8="}
    binary = {"mimeType": "application/octet-stream", "byteLength": 3, "data": "AAEC"}
    broken = {"mimeType": "text/plain", "byteLength": 1, "data": "not base64!"}
    content = render(Outcome(ok=True, emitted=[text_file, binary, broken]))["content"]
    assert content[0] == {"type": "text", "text": "File output: notes.txt (text/plain, 5 bytes)"}
    assert content[1] == {"type": "text", "text": "hello"}
    assert content[2] == {"type": "text", "text": "File output: tool-output (application/octet-stream, 3 bytes)"}
    assert content[3] == {
        "type": "resource",
        "resource": {"uri": "executor-file:///tool-output", "mimeType": "application/octet-stream", "blob": "AAEC"},
    }
    assert content[4] == {"type": "text", "text": "Invalid execution output item omitted."}


# -- truncation ----------------------------------------------------------------------------------------


def test_truncate_keeps_text_at_the_limit_and_counts_what_it_cuts() -> None:
    assert truncate("x" * MAX_TEXT) == "x" * MAX_TEXT
    assert truncate("x" * (MAX_TEXT + 5)) == "x" * MAX_TEXT + "\n... [truncated 5 chars]"
    assert MAX_TEXT == 30_000


def test_long_result_is_truncated_before_the_logs() -> None:
    long = "a" * 30_010
    result = render(Outcome(ok=True, result=long, text=long, logs=["[log] kept"]))
    assert text_of(result) == "a" * 30_000 + "\n... [truncated 10 chars]\n\nLogs:\n[log] kept"
    assert result["structuredContent"]["result"] == long


def test_long_error_is_truncated() -> None:
    message = "e" * 30_000
    text = text_of(render(Outcome(ok=False, error=message)))
    assert text == "Error: " + "e" * (30_000 - len("Error: ")) + "\n... [truncated 7 chars]"


# -- paused ----------------------------------------------------------------------------------------


def test_only_a_question_with_fields_asks_for_a_response_matching_a_schema() -> None:
    """A yes-or-no approval worded as "a response matching the requested schema" of `{}` leaves a model guessing
    what to ask; a form that does ask for fields still needs the schema to be shown."""
    why = 'Why: the org policy "a.*" (pol_1) requires approval for tool "a.b".'
    yes_or_no = render_paused("exec_1", "Approve a.b?", "a.b", {}, {"type": "object", "properties": {}}, 0, 60, why)
    text = text_of(yes_or_no)
    assert text.startswith(f"Execution paused: Approve a.b?\n\n{why}\n\n{CONFIRMATION_PROMPT}\n\nexecutionId: exec_1")
    assert "schema" not in text.lower()
    assert yes_or_no["structuredContent"]["interaction"]["reason"] == why
    form = {"type": "object", "properties": {"reason": {"type": "string"}}}
    asked = text_of(render_paused("exec_2", "Why?", "a.b", {}, form, 0, 60))
    assert "\nAsk the user for a response matching the requested schema, then call the resume tool.\n" in asked
    assert '"reason": {' in asked
    assert CONFIRMATION_PROMPT not in asked
