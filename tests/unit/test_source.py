"""What the agent sends becomes a script the engine runs: TypeScript stripped in place, fences and lone
functions recovered, and every error position still pointing at the agent's own text."""

import json
import re
from typing import Any

import pytest

from executor_mcp.sandbox.source import prepare
from executor_mcp.sandbox.worker import Execution, Realm, RealmLimits

LIMITS = RealmLimits(memory=64 << 20, stack=1 << 20, max_timers=100, max_tool_calls=100)


def start(code: str) -> tuple[Execution, dict[str, Any]]:
    execution = Execution(code, cpu=2.0, realm=Realm(LIMITS))
    return execution, execution.start()


def run(code: str) -> dict[str, Any]:
    _, step = start(code)
    assert step["done"] is not None, f"still waiting on {step['outbox']}"
    return step["done"]


def value(code: str) -> Any:
    done = run(code)
    assert done["ok"], done["error"]
    return json.loads(done["result"])


def error(code: str) -> str:
    done = run(code)
    assert not done["ok"], f"expected an error, got {done['result']}"
    return done["error"]


def agent_lines(code: str) -> list[str]:
    """The lines of the prepared program that hold the agent's code."""
    prepared = prepare(code)
    lines = prepared.program.split("\n")
    start_index = prepared.first_line - 1
    return lines[start_index : start_index + code.count("\n") + 1]


# -- TypeScript stripping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(
            "interface Point { x: number; y?: string }\nconst p: Point = { x: 1 };\nreturn p.x;",
            1,
            id="interface",
        ),
        pytest.param(
            "interface Point {\n  x: number;\n  y: number;\n}\nconst p: Point = { x: 2, y: 3 };\nreturn p.x * p.y;",
            6,
            id="multi-line interface",
        ),
        pytest.param("type Id = number | string;\nconst id: Id = 3;\nreturn id;", 3, id="type alias"),
        pytest.param(
            "type Fn = (a: number) => number;\nconst g: Fn = (a) => a + 1;\nreturn g(5);", 6, id="function type"
        ),
        pytest.param("function f<T>(x: T): T { return x }\nreturn f<number>(5);", 5, id="generic function"),
        pytest.param("const f = async <T,>(a: T): Promise<T> => a;\nreturn await f(4);", 4, id="generic arrow"),
        pytest.param(
            "class Box<T> { v: T; constructor(v: T) { this.v = v } }\nreturn new Box<number>(3).v;",
            3,
            id="generic class",
        ),
        pytest.param("const m = new Map<string, number>([['a', 2]]);\nreturn m.get('a')! * 3;", 6, id="type arguments"),
        pytest.param("const v = ('ab' as unknown) as string;\nreturn v.length;", 2, id="as"),
        pytest.param("const arr = [1, 2, 3] as const;\nreturn arr.length;", 3, id="as const"),
        pytest.param("const c = { a: 1 } satisfies Record<string, number>;\nreturn c.a;", 1, id="satisfies"),
        pytest.param("const x: any = { y: 7 };\nreturn x!.y!;", 7, id="non-null"),
        pytest.param("let x!: number;\nx = 2;\nreturn x;", 2, id="definite assignment"),
        pytest.param(
            "function add(a: number, b?: number): number { return a + (b ?? 10) }\nreturn [add(1), add(1, 2)];",
            [11, 3],
            id="optional parameter",
        ),
        pytest.param(
            "function f(a: number = 2, ...rest: number[]): number { return a + rest.length }\n"
            "return f(undefined, 1, 2);",
            4,
            id="default and rest parameters",
        ),
        pytest.param(
            "function isText(x: unknown): x is string { return typeof x === 'string' }\nreturn isText('a');",
            True,
            id="type predicate",
        ),
        pytest.param("let u: unknown = 'abc';\nreturn (<string>u).length;", 3, id="angle-bracket assertion"),
        pytest.param("declare const injected: number;\nreturn typeof injected;", "undefined", id="declare"),
        pytest.param(
            "function over(a: string): string;\nfunction over(a: number): number;\n"
            "function over(a: any) { return a }\nreturn over(2);",
            2,
            id="function overloads",
        ),
        pytest.param("const t: [number, string] = [1, 'a'];\nreturn t;", [1, "a"], id="tuple type"),
    ],
)
def test_typescript_runs_after_stripping(code: str, expected: Any) -> None:
    assert value(code) == expected


def test_class_with_typed_private_readonly_and_optional_fields_implementing_an_interface() -> None:
    code = "\n".join(
        [
            "interface Shape { area(): number }",
            "class Square implements Shape {",
            "  private side: number;",
            "  public readonly name: string = 'square';",
            "  protected label?: string;",
            "  static count: number = 0;",
            "  [key: string]: unknown;",
            "  constructor(side: number) { this.side = side; Square.count++; }",
            "  area(): number { return this.side * this.side }",
            "}",
            "const s = new Square(3);",
            "return [s.area(), s.name, Square.count, 'label' in s];",
        ]
    )
    assert value(code) == [9, "square", 1, True]


def test_class_fields_with_definite_and_optional_markers_still_exist() -> None:
    assert value("class K { x!: number; y?: number; }\nreturn Object.keys(new K());") == ["x", "y"]


def test_stripping_only_blanks_type_syntax_to_spaces() -> None:
    code = "const a: number = 1;\nfunction f<T>(x: T): T { return x as T }\nreturn f<number>(a)!;"
    body = agent_lines(code)
    original = code.split("\n")
    assert [len(line) for line in body] == [len(line) for line in original]
    for kept, before in zip(body, original, strict=True):
        assert all(new in (old, " ") for new, old in zip(kept, before, strict=True))
    assert body == [
        "const a         = 1;",
        "function f   (x   )    { return x      }",
        "return f        (a) ;",
    ]


def test_plain_javascript_passes_through_verbatim() -> None:
    code = "\n".join(
        [
            "const declare = 2, as = 3, type = 4;",
            "const o = { readonly: 1, private: 2, public: 3, interface: 4 };",
            "class A { static x = 1 ? 2 : 3; #p = 4; get p() { return this.#p } }",
            "const re = /a<b>c/g;",
            "const s = `t ${1 < 2} ${'<T>'}`;",
            "return [declare + as + type, o.readonly + o.interface, A.x, new A().p, re.source, s, !declare !== true];",
        ]
    )
    assert code in prepare(code).program
    assert value(code) == [9, 5, 2, 4, "a<b>c", "t true <T>", True]


# -- positions -----------------------------------------------------------------------------------------


def test_runtime_error_reports_the_agents_line_after_typescript_lines() -> None:
    code = "const limit: number = 3;\nconst items: Array<{ id: string }> = [];\nnull.foo;"
    assert error(code) == "TypeError: cannot read property 'foo' of null (3:1)"


def test_runtime_error_keeps_its_column_after_type_annotations_on_the_same_line() -> None:
    line = 'const a: number = 1; const b: Array<string> = ["s"] as string[]; null.foo;'
    assert error(line).endswith(f"(1:{line.index('null.foo') + 1})")


def test_reference_error_column_after_non_null_and_optional_chain() -> None:
    code = "const a: string = 'x';\nconst b = missing?.c!;"
    assert error(code) == f"ReferenceError: missing is not defined (2:{code.split(chr(10))[1].index('missing') + 1})"


def test_error_after_a_multi_line_interface_reports_the_original_line() -> None:
    code = "interface Point {\n  x: number;\n  y: number;\n}\nconst p: Point = { x: 1, y: 2 };\nnull.foo;"
    assert error(code).endswith("(6:1)")


def test_thrown_error_inside_a_typed_function_reports_its_line() -> None:
    code = "function check(n: number): void {\n  if (n > 1) {\n    missing(n);\n  }\n}\ncheck(2 as number);"
    assert error(code) == "ReferenceError: missing is not defined (3:5)"


def test_syntax_error_on_line_two_after_a_typescript_line() -> None:
    message = error("const a: number = 1;\nconst b = ;")
    assert message.startswith("SyntaxError: Unexpected token")
    assert message.endswith("(2:11)")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("const = 5; return 1;", "SyntaxError: Unexpected token '=', variable name expected (1:7)"),
        ("return 1 +", "SyntaxError: Unexpected end of input (1:11)"),
        ("const x = 1 +\n\n  // nothing follows\n", "SyntaxError: Unexpected end of input (3:21)"),
        ("foo(\n", "SyntaxError: Unexpected end of input (1:5)"),
        ("return 1;\n}", "SyntaxError: Unexpected token '}' (2:1)"),
        ("foo(() => {\n  return 1;\n}}", "SyntaxError: Unexpected token '}' (3:2)"),
        ("const v = `${1}`;\nreturn [1, 2);", "SyntaxError: Unexpected token ')' (2:13)"),
        ("const a: number = 1;\nconst b: string = ;", "SyntaxError: Unexpected token ';' (2:19)"),
        (
            "interface P { x: number }\nconst p: P = { x: 1 };\nfoo(p as P",
            "SyntaxError: Unexpected identifier 'as' (3:7)",
        ),
        ("prose\n```ts\nconst a: number = 1 +\n```", "SyntaxError: Unexpected end of input (3:22)"),
        ("function f(x: number) { return x +; }", "SyntaxError: Unexpected token ';' (1:35)"),
        ("const é = 1 + ;", "SyntaxError: Unexpected token ';' (1:15)"),
        ("let a = 1\nlet b = 2 3", "SyntaxError: Unexpected token '3', expecting ';' (2:11)"),
        ("@sealed class A {}", "SyntaxError: Unexpected token '@' (1:1)"),
        ("const a = 1; const a = 2;", "SyntaxError: Invalid redefinition of lexical identifier (1:22)"),
        ("return 'abc", "SyntaxError: Unexpected end of string (1:8)"),
        ("return 0x;", "SyntaxError: Invalid number literal (1:8)"),
    ],
)
def test_syntax_errors_name_the_problem_at_the_agents_position(code: str, message: str) -> None:
    assert error(code) == message


def test_columns_count_characters_not_bytes() -> None:
    line = "const s = 'é€😀'; null.foo;"
    assert error(line).endswith(f"(1:{line.index('null') + 1})")
    assert error("const s = 'é€😀'; const = 1;") == "SyntaxError: Unexpected token '=', variable name expected (1:24)"


def test_error_position_never_points_past_the_agents_code() -> None:
    message = error("return {\n  a: null.foo,\n}")
    position = re.search(r"\((\d+):\d+\)$", message)
    assert position is None or int(position.group(1)) <= 3, message


# -- fences --------------------------------------------------------------------------------------------


def test_fenced_typescript_runs_and_prose_around_it_is_ignored() -> None:
    assert value("Here is the code:\n```ts\nconst a: number = 41;\nreturn a + 1;\n```\nThat's all.") == 42


@pytest.mark.parametrize("opening", ["```", "```typescript", "``` js"])
def test_any_fence_info_string_is_accepted(opening: str) -> None:
    assert value(f"{opening}\nreturn 2;\n```") == 2


def test_only_the_first_fenced_block_runs() -> None:
    assert value("first:\n```js\nreturn 3\n```\nsecond:\n```js\nreturn 4\n```") == 3


def test_fenced_error_lines_count_from_the_original_text() -> None:
    code = "Run this:\n\n```ts\nconst n: number = 1;\nnull.foo;\n```\n"
    assert error(code) == "TypeError: cannot read property 'foo' of null (5:1)"


def test_fenced_syntax_error_lines_count_from_the_original_text() -> None:
    assert error("prose\n```ts\nconst a: number = 1;\nconst b = ;\n```").endswith("(4:11)")


def test_prepared_maps_program_lines_back_through_the_fence() -> None:
    prepared = prepare("Run this:\n\n```ts\nreturn 1;\n```\n")
    assert prepared.fence_lines == 3
    assert prepared.agent_line(prepared.first_line) == 4
    assert prepared.agent_line(prepared.first_line - 1) is None


# -- recovery ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param("async () => 5", 5, id="async arrow"),
        pytest.param("() => { return 'sync' }", "sync", id="arrow with body"),
        pytest.param("async () => { await null; return 6 }", 6, id="arrow awaiting"),
        pytest.param("(function () { return 3 })", 3, id="parenthesized function expression"),
        pytest.param("// run me\nasync () => 5", 5, id="arrow after a comment"),
        pytest.param("function main() { return 1 }", 1, id="function declaration"),
        pytest.param("/* c */ async function main(): Promise<number> { return 11 }", 11, id="typed declaration"),
        pytest.param("export default 3 + 4", 7, id="export default expression"),
        pytest.param("export default (3)", 3, id="export default parenthesized"),
        pytest.param("export default { a: 1 }", {"a": 1}, id="export default object"),
        pytest.param('export default async function () { return "x" }', "x", id="export default async function"),
        pytest.param("export default function named() { return 9 }", 9, id="export default named function"),
        pytest.param("export default async (): Promise<string> => 'ok'", "ok", id="export default typed arrow"),
        pytest.param("const x = await Promise.resolve(2);\nreturn x * 3;", 6, id="top-level await and return"),
        pytest.param("return 1 satisfies number", 1, id="return with a type operator"),
    ],
)
def test_recovery_gives_the_codes_value(code: str, expected: Any) -> None:
    assert value(code) == expected


def test_several_declarations_are_a_body_not_a_call() -> None:
    done = run("function a() { return 1 }\nfunction b() { return 2 }")
    assert done["ok"]
    assert (done["result"], done["text"]) == ("null", None)


def test_errors_inside_recovered_functions_keep_their_lines() -> None:
    assert error("async () => {\n  null.foo;\n}").endswith("(2:3)")
    assert error("function main(): void {\n  null.foo;\n}").endswith("(2:3)")
    assert error("export default 1 +\n  null.foo").endswith("(2:3)")


def test_typed_code_awaits_a_tool_call() -> None:
    execution, step = start("const r: { n: number } = await tools.math.double({ n: 2 }) as any;\nreturn r.n * 10;")
    assert step["done"] is None
    [call] = step["outbox"]
    assert (call["kind"], call["path"], call["args"]) == ("call", "math.double", {"n": 2})
    done = execution.settle(call["id"], True, '{"n": 4}')["done"]
    assert (done["ok"], done["result"]) == (True, "40")


def test_typed_code_awaits_a_timer() -> None:
    execution, step = start("await new Promise<void>((resolve) => setTimeout(resolve, 10));\nreturn 'late' as string;")
    [timer] = step["outbox"]
    assert (timer["kind"], timer["ms"]) == ("timer", 10)
    assert execution.fire(timer["id"])["done"]["text"] == "late"


# -- TypeScript that takes more than blanking (upstream strips these with sucrase) --------------------


def test_constructor_parameter_properties_assign_fields() -> None:
    code = "class A {\n  constructor(private x: number, readonly y = 2) {}\n  get() { return [this.x, this.y] }\n}\n"
    assert value(code + "return new A(4).get();") == [4, 2]


def test_abstract_class_is_stripped() -> None:
    code = "abstract class B {\n  abstract m(): number;\n  n() { return this.m() + 1 }\n}\n"
    assert value(code + "class C extends B { m() { return 1 } }\nreturn new C().n();") == 2


def test_this_parameter_is_stripped() -> None:
    assert value("function f(this: any, a: number) { return a }\nreturn f(2);") == 2


def test_class_method_overload_signatures_are_stripped() -> None:
    assert value("class K {\n  m(): void;\n  m(a?: number) { return a }\n}\nreturn new K().m(2);") == 2


def test_a_prepared_realm_runs_like_a_fresh_one_and_knows_nothing_of_the_last_execution() -> None:
    spoiled = Execution(
        "Object.prototype.x = 1; JSON.stringify = () => 'p'; globalThis.y = 2; return 0", 2.0, Realm(LIMITS)
    )
    assert spoiled.start()["done"]["ok"]
    ready = Realm.ready(LIMITS)
    assert ready is not None
    clean = Execution("return [({}).x, typeof globalThis.y, JSON.stringify({a: 1})]", 2.0, ready)
    assert json.loads(clean.start()["done"]["result"]) == [None, "undefined", '{"a":1}']


def test_a_realm_whose_prelude_cannot_load_is_built_at_start_instead() -> None:
    assert Realm.ready(RealmLimits(memory=64 << 10, stack=1 << 20, max_timers=100, max_tool_calls=100)) is None
