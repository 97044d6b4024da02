"""Write docs/tools.md, the tool reference, from the live tool schemas.

It starts the server in-process, asks it through a real MCP client for its tools, resources
and prompts, and renders what came back, so the reference cannot drift from the code.

    python scripts/gen_tool_reference.py            # (re)write docs/tools.md
    python scripts/gen_tool_reference.py --check    # exit 1 when docs/tools.md is stale
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client

from accelopt_mcp.mcp_tools import ADMIN_TOOLS_ENV, ServerState, build_server

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "docs" / "tools.md"

ADMIN_GROUP = "Admin (listed only with --admin-tools)"

GROUPS = {
    "Profiling": ["list_backends", "profile_kernel", "compare_kernels"],
    "Kernel database": [
        "check_database",
        "list_definitions",
        "get_definition",
        "list_solutions",
        "get_solution",
        "solution_lineage",
        "query_profiles",
    ],
    "Optimization memory": ["list_memory", "search_memory", "add_memory", "remove_memory"],
    "Optimization jobs": [
        "start_optimization",
        "wait_for_job",
        "job_status",
        "job_result",
        "cancel_job",
        "list_jobs",
    ],
    ADMIN_GROUP: [
        "insert_definition",
        "insert_workload",
        "insert_solution",
        "insert_profile",
        "import_directory",
    ],
}


def type_of(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short human form of a JSON-schema type."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " \\| ".join(type_of(s, defs) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        return f"list[{type_of(schema.get('items', {}), defs)}]"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        value = type_of(extra, defs) if isinstance(extra, dict) else "any"
        return f"dict[str, {value}]"
    names = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
    return names.get(kind, kind or "any")


def bounds(schema: dict[str, Any]) -> str:
    marks = {
        "minimum": ">=",
        "exclusiveMinimum": ">",
        "maximum": "<=",
        "exclusiveMaximum": "<",
        "minLength": "min length",
    }
    for option in schema.get("anyOf", []):
        schema = {**option, **schema}
    return ", ".join(f"{label} {schema[key]}" for key, label in marks.items() if key in schema)


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_parameters(schema: dict[str, Any]) -> list[str]:
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        return ["No parameters.", ""]
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    lines = [
        "| parameter | type | required | default | description |",
        "|---|---|---|---|---|",
    ]
    for name, prop in properties.items():
        default = (
            "" if name in required or "default" not in prop else f"`{json.dumps(prop['default'])}`"
        )
        notes = [prop.get("description", "")]
        limits = bounds(prop)
        if limits:
            notes.append(f"({limits})")
        lines.append(
            f"| `{name}` | {type_of(prop, defs)} | {'yes' if name in required else 'no'} | "
            f"{default} | {cell(' '.join(n for n in notes if n))} |"
        )
    lines.append("")
    used = [name for name in defs if any(f"/{name}" in str(p) for p in properties.values())]
    if used:
        lines.append(
            "Record types (" + ", ".join(f"`{n}`" for n in used) + ") follow the "
            "FlashInfer-Trace layout; the full JSON schema is in the tool's input schema."
        )
        lines.append("")
    return lines


def render_output(schema: dict[str, Any] | None) -> list[str]:
    if not schema:
        return []
    properties = schema.get("properties", {})
    defs = schema.get("$defs", {})
    fields = ", ".join(f"`{n}` ({type_of(p, defs)})" for n, p in properties.items())
    return [f"Returns {schema.get('title', 'an object')}: {fields}.", ""]


async def collect() -> tuple[list[Any], list[Any], list[Any], list[Any], dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        state = ServerState(str(Path(folder) / "reference.db"))
        try:
            # Every tool, the admin ones included: their group's heading says when they are
            # listed.
            server = build_server(state, admin_tools=True)
            async with Client(server, mode="legacy") as client:
                tools = (await client.list_tools()).tools
                resources = (await client.list_resources()).resources
                templates = (await client.list_resource_templates()).resource_templates
                prompts = (await client.list_prompts()).prompts
        finally:
            state.close()
    # What each tool returns: the server lists no output schema (app.compact_tool), so the
    # schemas come from the server object, which keeps them for this reference.
    return tools, resources, templates, prompts, server.result_schemas


def render(
    tools: list[Any],
    resources: list[Any],
    templates: list[Any],
    prompts: list[Any],
    result_schemas: dict[str, Any],
) -> str:
    by_name = {t.name: t for t in tools}
    grouped = {name for names in GROUPS.values() for name in names}
    groups = dict(GROUPS)
    others = sorted(set(by_name) - grouped)
    if others:
        groups["Other"] = others
    lines = [
        "# accelopt-mcp tool reference",
        "",
        "<!-- Generated by scripts/gen_tool_reference.py from the live tool schemas; "
        "do not edit by hand. -->",
        "",
        f"{len(tools)} tools, {len(resources) + len(templates)} resources, "
        f"{len(prompts)} prompt(s). Every tool returns its result as one JSON text block and, on "
        "bad input, a tool error whose message says what to fix. Long texts (kernel sources) "
        "come in slices: pass `next_offset` back to read on.",
        "",
    ]
    for group, names in groups.items():
        present = [n for n in names if n in by_name]
        if not present:
            continue
        lines += [f"## {group}", ""]
        if group == ADMIN_GROUP:
            lines += [
                "A server lists these only when started with `--admin-tools` (or "
                f"`{ADMIN_TOOLS_ENV}=1`): they write records by hand, which an optimizing agent "
                "never needs (profile_kernel stores and links what it profiles), and every "
                "listed tool's schema costs each session context.",
                "",
            ]
        for name in present:
            tool = by_name[name]
            hints = tool.annotations
            traits = []
            if hints is not None:
                if hints.read_only_hint:
                    traits.append("read-only")
                if hints.idempotent_hint and not hints.read_only_hint:
                    traits.append("idempotent")
                if hints.destructive_hint and not hints.read_only_hint:
                    traits.append("destructive")
            suffix = f" *({', '.join(traits)})*" if traits else ""
            lines += [f"### `{name}`{suffix}", "", " ".join((tool.description or "").split()), ""]
            lines += render_parameters(tool.input_schema)
            lines += render_output(result_schemas.get(name))
    lines += ["## Resources", "", "| URI | description |", "|---|---|"]
    for r in resources:
        lines.append(f"| `{r.uri}` | {cell(r.description or '')} |")
    for t in templates:
        lines.append(f"| `{t.uri_template}` | {cell(t.description or '')} |")
    lines += ["", "## Prompts", ""]
    for p in prompts:
        arguments = ", ".join(
            f"`{a.name}`" + ("" if a.required else " (optional)") for a in p.arguments or []
        )
        lines.append(f"- `{p.name}`({arguments}): {p.description or ''}")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Fail when the file is stale.")
    parser.add_argument("--output", type=Path, default=TARGET)
    args = parser.parse_args(argv)
    text = render(*asyncio.run(collect()))
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} is stale: run python scripts/gen_tool_reference.py", file=sys.stderr
            )
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
