// The MCP Inspector CLI (@modelcontextprotocol/inspector, pinned in
// package.json) against `sandbox-mcp serve`, over stdio (the Inspector spawns
// the server) and over streamable HTTP (--server-url … --transport http).
//
// Exit codes are the Inspector's contract: 0 success, 5 when a tool returned
// isError or the tool does not exist. With --format json -q the result is
// one JSON object {"result": …} on stdout and a failure is one JSON object
// {"error": {code, message}} on stderr.

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'

import { binaryCheck, binaryPath, missing, serveEnv, startServeHTTP, newStateDir, tempDir } from './lib/harness.mjs'

const inspectorBin = join(import.meta.dirname, 'node_modules', '.bin', 'mcp-inspector')
const skip = missing(
  [existsSync(inspectorBin), `${inspectorBin} missing (run npm ci in testdata/interop)`],
  binaryCheck())

/**
 * inspector runs the Inspector CLI with args and resolves with {code,
 * stdout, stderr}; it never rejects on a non-zero exit. HOME and the
 * Inspector's catalog and client-config paths point into home, so a run
 * leaves nothing behind in the real home directory.
 */
function inspector (home, args) {
  const env = {
    ...process.env,
    HOME: home,
    MCP_CATALOG_PATH: join(home, 'catalog.json'),
    MCP_CLIENT_CONFIG_PATH: join(home, 'client.json'),
    NO_COLOR: '1'
  }
  return new Promise((resolve) => {
    execFile(inspectorBin, ['--cli', ...args], { env, timeout: 120_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0
      resolve({ code, stdout, stderr, killed: err?.killed })
    })
  })
}

/** parseOut parses the single JSON object the Inspector prints with --format json. */
function parseOut (what, text) {
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new Error(`${what} is not one JSON object (${err.message}): ${text}`)
  }
}

function describeRun (r) {
  return `exit ${r.code}${r.killed ? ' (killed by the guard timeout)' : ''}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`
}

/** targets lists how the Inspector reaches the server: target(home) returns the CLI arguments that select it. */
const targets = [
  {
    name: 'stdio',
    async start () {
      const stateDir = newStateDir('inspector-stdio')
      // The Inspector spawns the server itself: `--cli <command> <args…>`;
      // env for the server goes through -e KEY=VALUE.
      const envArgs = Object.entries(serveEnv(stateDir)).flatMap(([k, v]) => ['-e', `${k}=${v}`])
      return {
        args: [...envArgs, '--transport', 'stdio', binaryPath, 'serve', '--state-dir', stateDir],
        diagnostics: () => '',
        stop: async () => rmSync(stateDir, { recursive: true, force: true })
      }
    }
  },
  {
    name: 'streamable HTTP',
    async start () {
      const server = await startServeHTTP()
      return {
        args: ['--server-url', server.url, ...Object.entries(server.headers).flatMap(([k, v]) => ['--header', `${k}: ${v}`]), '--transport', 'http'],
        diagnostics: server.stderr,
        stop: server.stop
      }
    }
  }
]

for (const t of targets) {
  describe(`MCP Inspector CLI over ${t.name}`, { skip }, () => {
    let target
    let home

    before(async () => {
      home = tempDir('inspector-home')
      target = await t.start()
    })
    after(async () => {
      if (process.env.INTEROP_VERBOSE && target) console.error(target.diagnostics())
      await target?.stop()
      if (home) rmSync(home, { recursive: true, force: true })
    })

    test('--method tools/list: exit 0 and every tool with schemas and annotations', async () => {
      const r = await inspector(home, [...target.args, '--method', 'tools/list', '--format', 'json', '-q'])
      assert.equal(r.code, 0, describeRun(r))
      const { result } = parseOut('stdout', r.stdout)
      const names = result.tools.map((x) => x.name)
      for (const want of ['workspace_exec', 'put_files', 'read_files']) assert.ok(names.includes(want), `${want} missing from ${names}`)
      for (const tool of result.tools) {
        assert.equal(tool.inputSchema?.type, 'object', `${tool.name}: inputSchema`)
        assert.equal(tool.outputSchema?.type, 'object', `${tool.name}: outputSchema`)
        assert.ok(tool.annotations, `${tool.name}: annotations`)
      }
    })

    test('--method tools/call workspace_exec echo hi: exit 0, structuredContent and the rendered text agree', async () => {
      const r = await inspector(home, [...target.args, '--method', 'tools/call', '--tool-name', 'workspace_exec',
        '--tool-args-json', '{"command":"echo hi"}', '--format', 'json', '-q'])
      assert.equal(r.code, 0, describeRun(r))
      const { result } = parseOut('stdout', r.stdout)
      assert.notEqual(result.isError, true)
      assert.equal(result.structuredContent.exit_code, 0)
      assert.equal(result.structuredContent.stdout, 'hi\n')
      const text = result.content.find((c) => c.type === 'text')
      assert.match(text.text, /^exit 0 · .*\nhi$/, text.text)
    })

    test('a tool result with isError: exit 5 and the result still printed', async () => {
      const r = await inspector(home, [...target.args, '--method', 'tools/call', '--tool-name', 'workspace_exec',
        '--tool-args-json', '{"command":"true","timeout_sec":0}', '--format', 'json', '-q'])
      assert.equal(r.code, 5, describeRun(r))
      const { result } = parseOut('stdout', r.stdout)
      assert.equal(result.isError, true)
      assert.equal(parseOut('stderr', r.stderr).error.code, 'tool_is_error')
    })

    test('an unknown tool: exit 5 with tool_not_found', async () => {
      const r = await inspector(home, [...target.args, '--method', 'tools/call', '--tool-name', 'no_such_tool',
        '--tool-args-json', '{}', '--format', 'json', '-q'])
      assert.equal(r.code, 5, describeRun(r))
      assert.equal(parseOut('stderr', r.stderr).error.code, 'tool_not_found')
    })
  })
}
