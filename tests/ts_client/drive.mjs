// The official TypeScript MCP client (@modelcontextprotocol/client 2.x) against a real executor-mcp, so the
// integration tests prove the server works with a second SDK, not only with the Python one it was built with.
//
//   node drive.mjs URL [default|auto]
//
// `default` passes no versionNegotiation option (the client's plain 2025 connect); `auto` passes
// `{mode: "auto"}`, which probes with server/discover and picks 2026-07-28 on definitive modern evidence.
// Prints one JSON line: {protocolVersion, era, tools, result}, where `result` is the text of `execute`
// running `return 1 + 2`. Any failure exits non-zero with the error on stderr.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const MODES = { default: {}, auto: { versionNegotiation: { mode: "auto" } } };

const [url, mode = "default"] = process.argv.slice(2);
if (!url || !(mode in MODES)) {
  console.error(`usage: drive.mjs URL [${Object.keys(MODES).join("|")}]`);
  process.exit(2);
}

const client = new Client({ name: "executor-mcp-ts-drive", version: "1.0.0" }, MODES[mode]);
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
try {
  const { tools } = await client.listTools();
  const called = await client.callTool({ name: "execute", arguments: { code: "return 1 + 2" } });
  if (called.isError) {
    throw new Error(`execute failed: ${JSON.stringify(called.content)}`);
  }
  console.log(
    JSON.stringify({
      protocolVersion: client.getNegotiatedProtocolVersion(),
      era: client.getProtocolEra(),
      tools: tools.map((tool) => tool.name),
      result: called.content.filter((block) => block.type === "text").map((block) => block.text).join(""),
    }),
  );
} finally {
  await client.close();
}
