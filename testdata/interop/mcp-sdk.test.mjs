// The official TypeScript MCP SDK (@modelcontextprotocol/sdk, pinned in
// package.json) against `sandbox-mcp serve`, over stdio and over streamable
// HTTP. The same tests run on both transports.
//
// The SDK's Client does its own checking: callTool validates
// structuredContent against the tool's outputSchema (cached by listTools) and
// throws when a tool with an outputSchema returns no structuredContent, so a
// passing call is also a schema check.

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { rmSync } from 'node:fs'
import { after, before, describe, test } from 'node:test'

import { binaryCheck, binaryPath, missing, serveEnv, startServeHTTP, newStateDir, tryImport, within } from './lib/harness.mjs'

const [clientMod, clientMissing] = await tryImport('@modelcontextprotocol/sdk/client/index.js')
const [stdioMod] = await tryImport('@modelcontextprotocol/sdk/client/stdio.js')
const [httpMod] = await tryImport('@modelcontextprotocol/sdk/client/streamableHttp.js')
const [typesMod] = await tryImport('@modelcontextprotocol/sdk/types.js')
const skip = missing([!clientMissing, clientMissing], binaryCheck())

const clientInfo = { name: 'sandbox-mcp-interop', version: '0.0.0' }
const hints = ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']

/** textOf returns the result's first text block: the text rendered for the model (structuredContent has the JSON). */
function textOf (result) {
  const text = result.content.find((c) => c.type === 'text')
  assert.ok(text, `no text content in ${JSON.stringify(result)}`)
  return text.text
}

/** transports lists how each suite connects: start returns {client, stop, diagnostics}. */
const transports = [
  {
    name: 'stdio',
    async start (extraArgs = []) {
      const stateDir = newStateDir('serve-stdio')
      const transport = new stdioMod.StdioClientTransport({
        command: binaryPath,
        args: ['serve', '--state-dir', stateDir, ...extraArgs],
        env: serveEnv(stateDir),
        stderr: 'pipe'
      })
      let stderr = ''
      transport.stderr.setEncoding('utf8')
      transport.stderr.on('data', (d) => { stderr += d })
      const client = new clientMod.Client(clientInfo)
      await within(client.connect(transport), 'the stdio initialize handshake')
      return {
        client,
        transport,
        diagnostics: () => stderr,
        stop: async () => {
          // close() ends the server's stdin, then escalates to SIGTERM and
          // SIGKILL without waiting for the last; wait for the exit so the
          // state directory is not removed under a running server.
          const proc = transport._process
          await client.close()
          if (proc && proc.exitCode === null && proc.signalCode === null) await once(proc, 'exit')
          rmSync(stateDir, { recursive: true, force: true })
        }
      }
    }
  },
  {
    name: 'streamable HTTP',
    async start (extraArgs = []) {
      const server = await startServeHTTP(extraArgs)
      const client = new clientMod.Client(clientInfo)
      const requestInit = { headers: server.headers }
      const transport = new httpMod.StreamableHTTPClientTransport(new URL(server.url), { requestInit })
      await within(client.connect(transport), 'the HTTP initialize handshake')
      return {
        client,
        transport,
        url: server.url,
        requestInit,
        diagnostics: server.stderr,
        stop: async () => {
          // DELETE the session, then stop the server.
          await transport.terminateSession().catch(() => {})
          await client.close()
          await server.stop()
        }
      }
    }
  }
]

for (const t of transports) {
  describe(`MCP TypeScript SDK over ${t.name}`, { skip }, () => {
    let conn
    let client

    before(async () => {
      conn = await t.start()
      client = conn.client
    })
    after(async () => {
      if (process.env.INTEROP_VERBOSE && conn) console.error(conn.diagnostics())
      await conn?.stop()
    })

    test('initialize: server info, tool capability and instructions', () => {
      const info = client.getServerVersion()
      assert.equal(info.name, 'sandbox-mcp')
      assert.ok(info.version, 'server version')
      assert.ok(client.getServerCapabilities()?.tools, 'tools capability')
      assert.ok(client.getInstructions()?.length > 0, 'instructions')
      if (t.name !== 'stdio') {
        // The newest revision this SDK speaks; it has HTTP sessions.
        assert.equal(conn.transport.protocolVersion, '2025-11-25')
        assert.ok(conn.transport.sessionId, 'Mcp-Session-Id')
      }
    })

    test('listTools: every tool has inputSchema, outputSchema and all four annotation hints', async () => {
      const { tools } = await client.listTools()
      const names = tools.map((x) => x.name)
      for (const want of ['workspace_exec', 'put_files', 'read_files']) assert.ok(names.includes(want), `${want} missing from ${names}`)
      for (const tool of tools) {
        assert.match(tool.name, /^[a-z_]+$/)
        assert.ok(tool.description, `${tool.name}: description`)
        assert.equal(tool.inputSchema?.type, 'object', `${tool.name}: inputSchema`)
        assert.equal(tool.outputSchema?.type, 'object', `${tool.name}: outputSchema`)
        for (const h of hints) assert.equal(typeof tool.annotations?.[h], 'boolean', `${tool.name}: annotations.${h}`)
      }
    })

    test('workspace_exec: structuredContent and the rendered text agree; a non-zero exit is not isError', async () => {
      const ok = await client.callTool({ name: 'workspace_exec', arguments: { command: 'echo hi; echo err >&2' } })
      assert.notEqual(ok.isError, true, JSON.stringify(ok))
      assert.match(textOf(ok), /^exit 0 · .*\n--- stdout ---\nhi\n--- stderr ---\nerr$/, textOf(ok))
      assert.equal(ok.structuredContent.exit_code, 0)
      assert.equal(ok.structuredContent.stdout, 'hi\n')
      assert.equal(ok.structuredContent.stderr, 'err\n')

      const failed = await client.callTool({ name: 'workspace_exec', arguments: { command: 'echo partial; exit 3' } })
      assert.notEqual(failed.isError, true, JSON.stringify(failed))
      assert.match(textOf(failed), /^exit 3 · .*\npartial$/, textOf(failed))
      assert.equal(failed.structuredContent.exit_code, 3)
      assert.equal(failed.structuredContent.stdout, 'partial\n')
    })

    test('put_files then read_files: text and base64 round trip', async () => {
      const binary = Buffer.from([0, 1, 2, 254, 255, 0x89, 0x50])
      const put = await client.callTool({
        name: 'put_files',
        arguments: {
          files: [
            { path: 'interop/hello.txt', content: 'hello from the TS SDK\n' },
            { path: 'interop/blob.bin', content: binary.toString('base64'), encoding: 'base64' }
          ]
        }
      })
      assert.notEqual(put.isError, true, JSON.stringify(put))
      assert.match(textOf(put), /^wrote 2 file\(s\)\ninterop\/hello\.txt  22 bytes/, textOf(put))
      assert.deepEqual(put.structuredContent.written.map((w) => [w.path, w.bytes]),
        [['interop/hello.txt', 22], ['interop/blob.bin', binary.length]])

      const read = await client.callTool({ name: 'read_files', arguments: { paths: ['interop/hello.txt', 'interop/blob.bin'] } })
      assert.notEqual(read.isError, true, JSON.stringify(read))
      // The first text block says what was read, a line per file, without
      // the contents, which structuredContent repeats for a small read (for
      // clients that read only it); the model reads each file once, in its
      // own block.
      assert.match(textOf(read), /^interop\/hello\.txt: whole file, 22 bytes\ninterop\/blob\.bin: whole file, 7 bytes, as base64\n/, textOf(read))
      assert.equal(read.structuredContent.files[0].content, 'hello from the TS SDK\n')
      // Each file's bytes come once, in the content block content_index names.
      const [text, blob] = read.structuredContent.files
      assert.equal(text.encoding, 'text')
      assert.equal(read.content[text.content_index].text, 'hello from the TS SDK\n')
      assert.equal(blob.encoding, 'base64')
      assert.deepEqual(Buffer.from(read.content[blob.content_index].text, 'base64'), binary)

      // The files are really there for commands too.
      const cat = await client.callTool({ name: 'workspace_exec', arguments: { command: 'cat interop/hello.txt' } })
      assert.equal(cat.structuredContent.stdout, 'hello from the TS SDK\n')
    })

    test('isError: a schema violation and a failing operation are tool errors that say why', async () => {
      const bad = await client.callTool({ name: 'workspace_exec', arguments: { command: 'true', timeout_sec: 0 } })
      assert.equal(bad.isError, true, JSON.stringify(bad))
      assert.match(bad.content.map((c) => c.text ?? '').join('\n'), /timeout_sec/)

      const noCwd = await client.callTool({ name: 'workspace_exec', arguments: { command: 'true', cwd: 'no/such/dir' } })
      assert.equal(noCwd.isError, true, JSON.stringify(noCwd))
      assert.match(noCwd.content.map((c) => c.text ?? '').join('\n'), /no\/such\/dir/)
    })

    test('an unknown tool is a JSON-RPC error (McpError), and the session keeps working', async () => {
      await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (err) => {
        assert.ok(err instanceof typesMod.McpError, `got ${err?.constructor?.name}: ${err}`)
        assert.equal(err.code, typesMod.ErrorCode.InvalidParams)
        assert.match(err.message, /no_such_tool/)
        return true
      })
      const still = await client.callTool({ name: 'workspace_exec', arguments: { command: 'echo still here' } })
      assert.equal(still.structuredContent.stdout, 'still here\n')
    })

    test('progress notifications arrive during a ~3 s command (onprogress)', async () => {
      const seen = []
      const result = await client.callTool(
        { name: 'workspace_exec', arguments: { command: 'sleep 3; echo done' } },
        undefined,
        { onprogress: (p) => seen.push(p), timeout: 120_000 })
      assert.notEqual(result.isError, true, JSON.stringify(result))
      assert.equal(result.structuredContent.stdout, 'done\n')
      assert.ok(seen.length >= 1, 'at least one progress notification')
      for (let i = 1; i < seen.length; i++) {
        assert.ok(seen[i].progress > seen[i - 1].progress, `progress must increase: ${JSON.stringify(seen)}`)
      }
    })

    // stdio has no sessions; this one exists only for HTTP (no skip under CI).
    if (t.name === 'stdio') return

    test('without the bearer token the server generated, initialize is refused with 401', async () => {
      const c = new clientMod.Client(clientInfo)
      const tr = new httpMod.StreamableHTTPClientTransport(new URL(conn.url), { requestInit: { headers: { 'Sandbox-Workspace': 'default' } } })
      await assert.rejects(c.connect(tr), (err) => {
        assert.ok(err instanceof httpMod.StreamableHTTPError, `got ${err?.constructor?.name}: ${err}`)
        assert.equal(err.code, 401)
        return true
      })
      await c.close()
    })

    test('terminateSession (DELETE) ends a session, and its id is then refused with 404', async () => {
      const c = new clientMod.Client(clientInfo)
      const tr = new httpMod.StreamableHTTPClientTransport(new URL(conn.url), { requestInit: conn.requestInit })
      await within(c.connect(tr), 'a second HTTP session')
      const id = tr.sessionId
      const r = await c.callTool({ name: 'workspace_exec', arguments: { command: 'echo second session' } })
      assert.equal(r.structuredContent.stdout, 'second session\n')
      await tr.terminateSession()
      assert.equal(tr.sessionId, undefined)
      await c.close()

      // Reusing the ended id: the server must answer 404 (the client should then re-initialize).
      const stale = new clientMod.Client(clientInfo)
      const staleTransport = new httpMod.StreamableHTTPClientTransport(new URL(conn.url), { sessionId: id, requestInit: conn.requestInit })
      await stale.connect(staleTransport) // with a session id the SDK skips initialize
      await assert.rejects(stale.listTools(), (err) => {
        assert.ok(err instanceof httpMod.StreamableHTTPError, `got ${err?.constructor?.name}: ${err}`)
        assert.equal(err.code, 404)
        return true
      })
      await stale.close()
    })
  })
}

// A read of a whole --max-read-bytes (32 MiB) with the SDK's default client
// settings. Over stdio the SDK's client ends the session when a message
// would take its read buffer past 10 MiB (STDIO_DEFAULT_MAX_BUFFER_SIZE), so
// the server keeps every stdio message below that: read_files returns what
// fits, and next_offset takes the client through the rest. Over HTTP there
// is no such limit, and one call returns the whole file.
const bigFileBytes = 32 * 1024 * 1024
for (const t of transports) {
  describe(`MCP TypeScript SDK over ${t.name}: a read of --max-read-bytes (32 MiB)`, { skip }, () => {
    let conn
    before(async () => { conn = await t.start(['--max-read-bytes', '32MiB']) })
    after(async () => {
      if (process.env.INTEROP_VERBOSE && conn) console.error(conn.diagnostics())
      await conn?.stop()
    })

    test('read_files returns the whole file, in calls whose messages the client takes', async () => {
      const client = conn.client
      const long = { timeout: 120_000 }
      const made = await client.callTool({
        name: 'workspace_exec',
        arguments: { command: `yes 'a line of text with "quotes", a\ttab, a backslash \\ and <tags> & more' | head -c ${bigFileBytes} > big.txt && sha256sum big.txt` }
      }, undefined, long)
      assert.equal(made.structuredContent?.exit_code, 0, JSON.stringify(made))
      const want = made.structuredContent.stdout.split(' ')[0]

      const hash = createHash('sha256')
      let offset = 0
      let calls = 0
      let read = 0
      for (;;) {
        // An explicit limit reads exact bytes, past the default budget of
        // 2000 lines or 256 KiB a file.
        const r = await client.callTool({ name: 'read_files', arguments: { paths: ['big.txt'], offset, limit: bigFileBytes } }, undefined, long)
        calls++
        assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 2000))
        const f = r.structuredContent.files[0]
        assert.equal(f.offset, offset)
        hash.update(r.content[f.content_index].text, 'utf8')
        read += f.bytes
        if (!f.truncated) break
        if (calls === 1 && t.name === 'stdio') {
          assert.match(r.structuredContent.notices.join(' '), /messages of at most/)
        }
        offset = f.next_offset
        assert.ok(calls < 20, 'no end in sight')
      }
      assert.equal(read, bigFileBytes)
      assert.equal(hash.digest('hex'), want)
      if (t.name === 'stdio') assert.ok(calls >= 4, `${calls} calls for 32 MiB under a 10 MiB message limit`)
      else assert.equal(calls, 1)

      // The session is still there.
      const still = await client.callTool({ name: 'workspace_exec', arguments: { command: 'echo still here' } })
      assert.equal(still.structuredContent.stdout, 'still here\n')
    })
  })
}
