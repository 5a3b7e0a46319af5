// Agent frameworks (versions pinned in package.json) against `sandbox-mcp
// serve` over stdio: the Vercel AI SDK (ai + @ai-sdk/mcp, with
// @ai-sdk/google 4 and 3 as the Gemini converters), @openai/agents with
// strict schemas, @langchain/mcp-adapters and @mastra/mcp. Each lists the
// tools, converts their input schemas as the framework does for a model, and
// calls workspace_exec, read_files (text and an image) and edit_file through
// the framework's own tool objects (and search_files, through the AI SDK's). No model is called: the Gemini request is
// captured by a fetch that answers locally, and tools are executed directly.
//
// The schema rules asserted here are the ones tools/schema_compat_test.go
// checks statically: OpenAI strict mode (closed objects, every property
// required once converted) and Gemini's function declarations (no object
// without properties below the root, no const turned into format: enum, no
// open maps).

import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { after, before, describe, test } from 'node:test'

import { binaryCheck, binaryPath, missing, newStateDir, tryImport, within } from './lib/harness.mjs'

const [aiMod, aiMissing] = await tryImport('ai')
const [aiMcpMod, aiMcpMissing] = await tryImport('@ai-sdk/mcp')
const [aiStdioMod] = await tryImport('@ai-sdk/mcp/mcp-stdio')
const [googleMod, googleMissing] = await tryImport('@ai-sdk/google')
const [googleV3Mod, googleV3Missing] = await tryImport('@ai-sdk/google-v3')
const [agentsMod, agentsMissing] = await tryImport('@openai/agents')
const [lcMod, lcMissing] = await tryImport('@langchain/mcp-adapters')
const [lcFnMod] = await tryImport('@langchain/core/utils/function_calling')
const [mastraMod, mastraMissing] = await tryImport('@mastra/mcp')
const [mastraCompatMod] = await tryImport('@mastra/schema-compat')

/** stdioWrapper runs the server for a framework and cleans up after it. */
const stdioWrapper = join(dirname(fileURLToPath(import.meta.url)), 'lib', 'stdio-server.mjs')

/** toolNames are the tools a default server lists. */
const toolNames = [
  'collect_outputs', 'edit_file', 'list_files', 'process_input', 'process_list', 'process_output', 'process_signal',
  'put_files', 'read_files', 'search_files', 'stage_inputs', 'workspace_exec', 'workspace_info', 'workspace_reset'
]

/** dotPNG is a 1×1 PNG, base64. */
const dotPNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=='

const execArgs = { command: 'printf "%s|%s" "$GREETING" "$EMPTY"', env: [{ name: 'GREETING', value: 'hi there' }, { name: 'EMPTY', value: '' }] }
const execStdout = 'hi there|'
/** editArgs changes the file putArgs wrote; edited is the file after it. */
const editArgs = { path: 'fw/hello.txt', edits: [{ old_text: 'frameworks', new_text: 'edited frameworks' }] }
const edited = 'hello, edited frameworks\n'
const putArgs = {
  files: [
    { path: 'fw/hello.txt', content: 'hello, frameworks\n' },
    { path: 'fw/dot.png', content: dotPNG, encoding: 'base64' }
  ]
}

/**
 * stdioServer is how each framework starts the server: command, args and env
 * for a fresh state directory, which lib/stdio-server.mjs removes once the
 * server has exited.
 */
function stdioServer (prefix) {
  const stateDir = newStateDir(prefix)
  const home = join(stateDir, 'home')
  mkdirSync(home, { recursive: true })
  return {
    command: process.execPath,
    args: [stdioWrapper, stateDir, binaryPath, 'serve', '--state-dir', stateDir],
    env: { PATH: process.env.PATH, HOME: home, ...(process.env.INTEROP_VERBOSE ? { INTEROP_VERBOSE: '1' } : {}) }
  }
}

/** walkSchemas calls fn(schema, path) for schema and every subschema under properties and items. */
function walkSchemas (schema, path, fn) {
  if (schema == null || typeof schema !== 'object') return
  fn(schema, path)
  for (const [name, sub] of Object.entries(schema.properties ?? {})) walkSchemas(sub, `${path}.${name}`, fn)
  if (schema.items) walkSchemas(schema.items, `${path}[]`, fn)
  for (const key of ['anyOf', 'oneOf', 'allOf']) for (const [i, sub] of (schema[key] ?? []).entries()) walkSchemas(sub, `${path}.${key}[${i}]`, fn)
}

/**
 * geminiProblems lists what Gemini's function declarations reject in a
 * converted schema: an object without properties below the root (a 400
 * "properties: should be non-empty for OBJECT type"), format "enum" on a
 * non-string (what a converted const or boolean enum becomes), const, and
 * an open map.
 */
function geminiProblems (schema, where) {
  const out = []
  walkSchemas(schema, where, (s, path) => {
    const isObject = s.type === 'object' || (typeof s.type === 'string' && s.type.toLowerCase() === 'object')
    if (isObject && path !== where && Object.keys(s.properties ?? {}).length === 0) out.push(`${path}: object without properties`)
    if (s.format === 'enum' && s.type !== 'string') out.push(`${path}: format enum on ${s.type}`)
    if ('const' in s) out.push(`${path}: const`)
    if (Array.isArray(s.enum) && s.enum.some((v) => typeof v !== 'string')) out.push(`${path}: non-string enum ${JSON.stringify(s.enum)}`)
    if (s.additionalProperties && typeof s.additionalProperties === 'object') out.push(`${path}: open map`)
  })
  return out
}

/** strictProblems lists what OpenAI strict mode rejects: an object not closed, or a property not required. */
function strictProblems (schema, where) {
  const out = []
  walkSchemas(schema, where, (s, path) => {
    if (s.type !== 'object' && !s.properties) return
    if (s.additionalProperties !== false) out.push(`${path}: additionalProperties ${JSON.stringify(s.additionalProperties)}`)
    const required = new Set(s.required ?? [])
    for (const name of Object.keys(s.properties ?? {})) if (!required.has(name)) out.push(`${path}.${name}: not required`)
  })
  return out
}

/** closedProblems lists objects that are not closed (additionalProperties other than false). */
function closedProblems (schema, where) {
  const out = []
  walkSchemas(schema, where, (s, path) => {
    if (s.type === 'object' && s.additionalProperties !== false) out.push(`${path}: additionalProperties ${JSON.stringify(s.additionalProperties)}`)
  })
  return out
}

/** firstText returns the first text block of a result's content: the text rendered for the model. */
function firstText (content) {
  const text = content.find((c) => c.type === 'text')
  assert.ok(text, `no text block in ${JSON.stringify(content).slice(0, 300)}`)
  return text.text
}

/** assertExecText checks workspace_exec's rendered text: the status line, then stdout as it is. */
function assertExecText (content) {
  const text = firstText(content)
  assert.match(text, /^exit 0 · /, text)
  assert.ok(text.endsWith('\n' + execStdout), text)
}

/** geminiResponse is a minimal generateContent answer: text, no function call. */
function geminiResponse () {
  return new Response(JSON.stringify({
    candidates: [{ content: { role: 'model', parts: [{ text: 'ok' }] }, finishReason: 'STOP', index: 0 }],
    usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 }
  }), { status: 200, headers: { 'content-type': 'application/json' } })
}

/** capturingFetch records every request body and answers with geminiResponse. */
function capturingFetch () {
  const bodies = []
  const fetch = async (_url, init) => {
    bodies.push(JSON.parse(init.body))
    return geminiResponse()
  }
  return { fetch, bodies }
}

// --- Vercel AI SDK ------------------------------------------------------------------

describe('AI SDK (ai + @ai-sdk/mcp) over stdio', { skip: missing([!aiMissing, aiMissing], [!aiMcpMissing, aiMcpMissing], [!googleMissing, googleMissing], [!googleV3Missing, googleV3Missing], binaryCheck()) }, () => {
  let client, tools

  before(async () => {
    const server = stdioServer('fw-aisdk')
    client = await within(aiMcpMod.createMCPClient({
      transport: new aiStdioMod.StdioMCPTransport({ command: server.command, args: server.args, env: server.env })
    }), 'the AI SDK MCP client to connect')
    tools = await client.tools()
  })
  after(async () => {
    await client?.close()
  })

  test('tools(): every tool, with its JSON schema as the model gets it', async () => {
    assert.deepEqual(Object.keys(tools).sort(), toolNames)
    for (const [name, t] of Object.entries(tools)) {
      const schema = await aiMod.asSchema(t.inputSchema).jsonSchema
      assert.equal(schema.type, 'object', name)
      assert.deepEqual(closedProblems(schema, name), [])
      assert.deepEqual(geminiProblems(schema, name), [])
    }
  })

  test('@ai-sdk/google 4 (generateText): every declaration is sent, parametersJsonSchema within Gemini\'s rules', async () => {
    const { fetch, bodies } = capturingFetch()
    const google = googleMod.createGoogleGenerativeAI({ apiKey: 'not-used', fetch })
    const result = await aiMod.generateText({ model: google('gemini-2.5-flash'), tools, prompt: 'hi' })
    assert.equal(result.text, 'ok')
    assert.equal(bodies.length, 1)
    const decls = bodies[0].tools.flatMap((t) => t.functionDeclarations ?? [])
    assert.deepEqual(decls.map((d) => d.name).sort(), toolNames)
    for (const d of decls) {
      const schema = d.parametersJsonSchema ?? d.parameters
      assert.ok(schema, `${d.name}: no schema`)
      assert.deepEqual(geminiProblems(schema, d.name), [])
    }
  })

  test('@ai-sdk/google 3 (its OpenAPI converter): no property-less object, no format enum', async () => {
    const { fetch, bodies } = capturingFetch()
    const model = googleV3Mod.createGoogleGenerativeAI({ apiKey: 'not-used', fetch })('gemini-2.5-flash')
    const fnTools = []
    for (const [name, t] of Object.entries(tools)) {
      fnTools.push({ type: 'function', name, description: t.description, inputSchema: await aiMod.asSchema(t.inputSchema).jsonSchema })
    }
    await model.doGenerate({ prompt: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], tools: fnTools })
    const decls = bodies[0].tools.flatMap((t) => t.functionDeclarations ?? [])
    assert.deepEqual(decls.map((d) => d.name).sort(), toolNames)
    for (const d of decls) {
      assert.equal(d.parametersJsonSchema, undefined, `${d.name}: fell back to parametersJsonSchema`)
      if (['process_list', 'workspace_info'].includes(d.name)) {
        // A tool without input: the converter leaves parameters out.
        assert.equal(d.parameters, undefined, d.name)
        continue
      }
      assert.equal(d.parameters?.type, 'object', d.name)
      assert.deepEqual(geminiProblems(d.parameters, d.name), [])
      walkSchemas(d.parameters, d.name, (s, path) => assert.ok(!('additionalProperties' in s), `${path}: additionalProperties reached Gemini`))
    }
    const byName = Object.fromEntries(decls.map((d) => [d.name, d.parameters]))
    assert.deepEqual(Object.keys(byName.workspace_exec.properties.env.items.properties).sort(), ['name', 'value'])
    assert.deepEqual(byName.workspace_reset.properties.confirm.type, 'boolean')
  })

  test('workspace_exec through execute: env list, structured result, model output', async () => {
    const r = await tools.workspace_exec.execute(execArgs, { toolCallId: 'c1', messages: [] })
    assert.notEqual(r.isError, true, JSON.stringify(r))
    assert.equal(r.structuredContent.exit_code, 0)
    assert.equal(r.structuredContent.stdout, execStdout)
    const out = await tools.workspace_exec.toModelOutput({ toolCallId: 'c1', input: execArgs, output: r })
    assert.ok(JSON.stringify(out).includes('hi there|'), JSON.stringify(out))
  })

  test('put_files then read_files through execute: text, and an image the model receives as a file part', async () => {
    const put = await tools.put_files.execute(putArgs, { toolCallId: 'c2', messages: [] })
    assert.notEqual(put.isError, true, JSON.stringify(put))
    const text = await tools.read_files.execute({ paths: ['fw/hello.txt'] }, { toolCallId: 'c3', messages: [] })
    assert.equal(text.structuredContent.files[0].content, 'hello, frameworks\n')
    const image = await tools.read_files.execute({ paths: ['fw/dot.png'] }, { toolCallId: 'c4', messages: [] })
    assert.deepEqual(image.content.find((c) => c.type === 'image'), { type: 'image', data: dotPNG, mimeType: 'image/png' })
    const out = await tools.read_files.toModelOutput({ toolCallId: 'c4', input: { paths: ['fw/dot.png'] }, output: image })
    assert.equal(out.type, 'content')
    const file = out.value.find((p) => p.mediaType === 'image/png')
    assert.ok(file, JSON.stringify(out))
    assert.equal(file.data?.data ?? file.data, dotPNG)
  })

  test('edit_file then search_files through execute', async () => {
    const r = await tools.edit_file.execute(editArgs, { toolCallId: 'c6', messages: [] })
    assert.notEqual(r.isError, true, JSON.stringify(r))
    assert.equal(r.structuredContent.replacements, 1)
    assert.ok(r.structuredContent.snippets.some((s) => s.text.includes('edited frameworks')), JSON.stringify(r.structuredContent))
    const missing = await tools.edit_file.execute({ path: editArgs.path, edits: [{ old_text: 'no such text', new_text: 'x' }] }, { toolCallId: 'c7', messages: [] })
    assert.equal(missing.isError, true, JSON.stringify(missing))
    const text = await tools.read_files.execute({ paths: ['fw/hello.txt'] }, { toolCallId: 'c8', messages: [] })
    assert.equal(text.structuredContent.files[0].content, edited)
    const found = await tools.search_files.execute({ pattern: 'edited \\w+', glob: ['*.txt'] }, { toolCallId: 'c9', messages: [] })
    assert.notEqual(found.isError, true, JSON.stringify(found))
    assert.equal(found.structuredContent.match_count, 1, JSON.stringify(found.structuredContent))
    assert.deepEqual(found.structuredContent.matches.map((m) => [m.path, m.line, m.text]), [['fw/hello.txt', 1, 'hello, edited frameworks']])
  })

  test('workspace_reset refuses confirm: false with a clear error', async () => {
    const r = await tools.workspace_reset.execute({ confirm: false }, { toolCallId: 'c5', messages: [] })
    assert.equal(r.isError, true)
    assert.match(r.content[0].text, /invalid argument confirm: must be true/)
  })
})

// --- OpenAI Agents SDK ----------------------------------------------------------------

describe('@openai/agents (MCPServerStdio, convertSchemasToStrict) over stdio', { skip: missing([!agentsMissing, agentsMissing], binaryCheck()) }, () => {
  let mcp, tools
  const byName = (n) => tools.find((t) => t.name === n)
  const ctx = () => new agentsMod.RunContext()

  before(async () => {
    const server = stdioServer('fw-agents')
    mcp = new agentsMod.MCPServerStdio({ name: 'sandbox', command: server.command, args: server.args, env: server.env })
    await within(mcp.connect(), 'the agents MCP server to connect')
    tools = await agentsMod.getAllMcpTools({ mcpServers: [mcp], convertSchemasToStrict: true, runContext: ctx(), agent: new agentsMod.Agent({ name: 'interop' }) })
  })
  after(async () => {
    await mcp?.close()
  })

  test('every tool converts to strict mode (no fallback), closed and all-required', () => {
    assert.deepEqual(tools.map((t) => t.name).sort(), toolNames)
    for (const t of tools) {
      assert.equal(t.type, 'function', t.name)
      assert.equal(t.strict, true, `${t.name} fell back to non-strict`)
      assert.deepEqual(strictProblems(t.parameters, t.name), [])
    }
    // Optional fields became required and nullable: what a strict model sends.
    const env = byName('workspace_exec').parameters.properties.env
    assert.ok(JSON.stringify(env).includes('"null"'), JSON.stringify(env))
  })

  test('workspace_exec through invoke, with the nulls a strict model sends for optional fields', async () => {
    const nulls = { argv: null, login: null, cwd: null, stdin: null, timeout_sec: null, background: null }
    const out = await byName('workspace_exec').invoke(ctx(), JSON.stringify({ ...nulls, ...execArgs }))
    assertExecText([out].flat())
  })

  test('put_files then read_files through invoke: text, and the image block', async () => {
    const put = await byName('put_files').invoke(ctx(), JSON.stringify({ files: putArgs.files.map((f) => ({ mode: null, encoding: null, ...f })) }))
    assert.match(firstText([put].flat()), /^wrote 2 file\(s\)/, JSON.stringify(put))
    const nulls = { offset: null, limit: null, encoding: null, start_line: null, max_lines: null }
    const text = await byName('read_files').invoke(ctx(), JSON.stringify({ ...nulls, paths: ['fw/hello.txt'] }))
    // The file's text comes once, in the content block the entry names.
    const blocks = [text].flat()
    assert.match(firstText(blocks), /^fw\/hello\.txt: whole file/, 'the first block says what was read, without the content')
    assert.ok(blocks.some((c) => c.type === 'text' && c.text === 'hello, frameworks\n'), JSON.stringify(blocks))
    const image = [await byName('read_files').invoke(ctx(), JSON.stringify({ ...nulls, paths: ['fw/dot.png'] }))].flat()
    assert.deepEqual(image.find((c) => c.type === 'image'), { type: 'image', data: dotPNG, mimeType: 'image/png' })
  })

  test('edit_file through invoke, with the nulls a strict model sends (nested ones too)', async () => {
    const out = [await byName('edit_file').invoke(ctx(), JSON.stringify({ ...editArgs, edits: editArgs.edits.map((e) => ({ replace_all: null, ...e })) }))].flat()
    assert.ok(JSON.stringify(out).includes('edited frameworks'), JSON.stringify(out))
    const nulls = { offset: null, limit: null, encoding: null, start_line: null, max_lines: null }
    const text = [await byName('read_files').invoke(ctx(), JSON.stringify({ ...nulls, paths: ['fw/hello.txt'] }))].flat()
    assert.ok(text.some((c) => c.type === 'text' && c.text === edited), JSON.stringify(text))
  })
})

// --- LangChain ------------------------------------------------------------------------

describe('@langchain/mcp-adapters (MultiServerMCPClient) over stdio', { skip: missing([!lcMissing, lcMissing], binaryCheck()) }, () => {
  let client, tools
  const byName = (n) => tools.find((t) => t.name === n)

  before(async () => {
    const server = stdioServer('fw-langchain')
    client = new lcMod.MultiServerMCPClient({
      mcpServers: { sandbox: { transport: 'stdio', command: server.command, args: server.args, env: server.env } },
      useStandardContentBlocks: true
    })
    tools = await within(client.getTools(), 'LangChain to list the tools')
  })
  after(async () => {
    await client?.close()
  })

  test('getTools(): every tool; the OpenAI tool LangChain sends with strict: true is closed everywhere', () => {
    assert.deepEqual(tools.map((t) => t.name).sort(), toolNames)
    for (const t of tools) {
      // LangChain passes the schema through and only sets strict: true; it
      // does not make optional properties required (see README).
      const def = lcFnMod.convertToOpenAITool(t, { strict: true })
      assert.equal(def.function.strict, true)
      assert.equal(def.function.parameters.type, 'object', t.name)
      assert.deepEqual(closedProblems(def.function.parameters, t.name), [])
      assert.deepEqual(geminiProblems(def.function.parameters, t.name), [])
    }
  })

  test('workspace_exec through invoke', async () => {
    const out = [await byName('workspace_exec').invoke(execArgs)].flat()
    assertExecText(out)
  })

  test('put_files then read_files through invoke: text, and a standard image block', async () => {
    await byName('put_files').invoke(putArgs)
    const text = [await byName('read_files').invoke({ paths: ['fw/hello.txt'] })].flat()
    // The file's text comes once, in the content block the entry names.
    assert.match(firstText(text), /^fw\/hello\.txt: whole file/, 'the first block says what was read, without the content')
    assert.ok(text.some((c) => c.type === 'text' && c.text === 'hello, frameworks\n'), JSON.stringify(text))
    const msg = await byName('read_files').invoke({ type: 'tool_call', id: 'c1', name: 'read_files', args: { paths: ['fw/dot.png'] } })
    const image = msg.content.find((c) => c.type === 'image')
    assert.ok(image, JSON.stringify(msg.content).slice(0, 300))
    assert.equal(image.data, dotPNG)
    assert.equal(image.mime_type ?? image.mimeType, 'image/png')
  })

  test('edit_file through invoke', async () => {
    const out = [await byName('edit_file').invoke(editArgs)].flat()
    assert.ok(JSON.stringify(out).includes('edited frameworks'), JSON.stringify(out))
    const text = [await byName('read_files').invoke({ paths: ['fw/hello.txt'] })].flat()
    assert.ok(text.some((c) => c.type === 'text' && c.text === edited), JSON.stringify(text))
  })
})

// --- Mastra ---------------------------------------------------------------------------

describe('@mastra/mcp (MCPClient) over stdio', { skip: missing([!mastraMissing, mastraMissing], binaryCheck()) }, () => {
  let client, tools
  const t = (n) => tools[`sandbox_${n}`]

  before(async () => {
    const server = stdioServer('fw-mastra')
    client = new mastraMod.MCPClient({ servers: { sandbox: { command: server.command, args: server.args, env: server.env } } })
    tools = await within(client.listTools(), 'Mastra to list the tools')
  })
  after(async () => {
    await client?.disconnect()
  })

  test('listTools(): every tool, converted by Mastra\'s Google and OpenAI compat layers', () => {
    assert.deepEqual(Object.keys(tools).map((n) => n.replace(/^sandbox_/, '')).sort(), toolNames)
    const google = new mastraCompatMod.GoogleSchemaCompatLayer({ provider: 'google', modelId: 'gemini-2.5-flash', supportsStructuredOutputs: false })
    const openai = new mastraCompatMod.OpenAISchemaCompatLayer({ provider: 'openai', modelId: 'gpt-4.1', supportsStructuredOutputs: true })
    for (const [name, tool] of Object.entries(tools)) {
      const g = mastraCompatMod.applyCompatLayer({ schema: tool.inputSchema, compatLayers: [google], mode: 'jsonSchema' })
      assert.equal(g.type, 'object', name)
      assert.deepEqual(geminiProblems(g, name), [])
      const o = mastraCompatMod.applyCompatLayer({ schema: tool.inputSchema, compatLayers: [openai], mode: 'jsonSchema' })
      assert.deepEqual(closedProblems(o, name), [])
      assert.deepEqual(geminiProblems(o, name), [])
    }
    // env keeps its items' properties through both layers (the open map of
    // before became a property-less object in both).
    const g = mastraCompatMod.applyCompatLayer({ schema: t('workspace_exec').inputSchema, compatLayers: [google], mode: 'jsonSchema' })
    assert.deepEqual(Object.keys(g.properties.env.items.properties).sort(), ['name', 'value'])
  })

  test('workspace_exec through execute', async () => {
    const result = await t('workspace_exec').execute(execArgs, {})
    assert.equal(result.exit_code, 0, JSON.stringify(result))
    assert.equal(result.stdout, execStdout)
  })

  test('put_files then read_files through execute: text, and the image\'s structured result', async () => {
    await t('put_files').execute(putArgs, {})
    const text = await t('read_files').execute({ paths: ['fw/hello.txt'] }, {})
    assert.equal(text.files[0].content, 'hello, frameworks\n')
    // Mastra returns structuredContent when a tool has one, so the content
    // blocks do not reach it: small reads repeat the contents there (the
    // text above, and the image's base64 here).
    const image = await t('read_files').execute({ paths: ['fw/dot.png'] }, {})
    assert.equal(image.files[0].encoding, 'image', JSON.stringify(image))
    assert.equal(image.files[0].mime_type, 'image/png')
    assert.equal(image.files[0].content, dotPNG)
  })

  test('edit_file through execute', async () => {
    const result = await t('edit_file').execute(editArgs, {})
    assert.equal(result.replacements, 1, JSON.stringify(result))
    const text = await t('read_files').execute({ paths: ['fw/hello.txt'] }, {})
    assert.equal(text.files[0].content, edited)
  })
})
