// The official e2b JS SDK (npm `e2b`, pinned in package.json) against
// `sandbox-mcp manage serve`: a real process on loopback serving E2B's
// management API and envd proxy over the local provider. The SDK is not in
// debug mode: apiUrl and sandboxUrl both point at the server, so
// management calls go to its API and envd calls to its proxy with the
// E2b-Sandbox-Id / E2b-Sandbox-Port headers (E2B's shared sandbox host).

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { rmSync } from 'node:fs'
import { after, before, describe, test } from 'node:test'

import { binaryCheck, deferred, missing, newStateDir, serveEnv, spawnReady, tryImport, within } from './lib/harness.mjs'

const [e2b, e2bMissing] = await tryImport('e2b')
const skip = missing([!e2bMissing, e2bMissing], binaryCheck(),
  [process.platform === 'linux', 'the local provider needs Linux'])

const apiKey = `e2b_${randomBytes(20).toString('hex')}`
const otherKey = `e2b_${randomBytes(20).toString('hex')}`

describe('e2b JS SDK against sandbox-mcp manage serve (apiUrl + sandboxUrl on loopback)', { skip }, () => {
  let server
  let stateDir
  let opts
  let sbx
  let cwd

  before(async () => {
    stateDir = newStateDir('manage')
    server = await spawnReady(['manage', 'serve', '--listen', '127.0.0.1:0', '--api-key', apiKey,
      '--api-key', otherKey, '--state-dir', stateDir, '--ready-fd', '3'], { env: serveEnv(stateDir) })
    opts = { apiKey, apiUrl: server.addr, sandboxUrl: server.addr, requestTimeoutMs: 60_000 }
    sbx = await e2b.Sandbox.create({ ...opts, timeoutMs: 300_000, metadata: { suite: 'interop', run: apiKey.slice(4, 12) } })
    cwd = (await sbx.commands.run('pwd')).stdout.trim()
  })

  after(async () => {
    if (server) {
      if (process.env.INTEROP_VERBOSE) console.error(server.stderr())
      const { code, signal } = await server.stop()
      assert.ok(code === 0 || signal === 'SIGTERM', `manage serve exit: code ${code} signal ${signal}\n${server.stderr()}`)
    }
    if (stateDir) rmSync(stateDir, { recursive: true, force: true })
  })

  test('create returns a lowercase alphanumeric id and the envd version', () => {
    assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
    assert.equal(sbx.envdApiUrl, server.addr)
    assert.match(sbx.commands.envdVersion, /^\d+\.\d+\.\d+$/)
  })

  test('commands run through the proxy: output, exit codes, envs', async () => {
    const r = await sbx.commands.run("printf 'out\\n'; printf 'err\\n' >&2", { envs: { GREETING: 'hi' } })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\n')
    assert.equal(r.stderr, 'err\n')
    const env = await sbx.commands.run('printf %s "$GREETING"', { envs: { GREETING: 'hi' } })
    assert.equal(env.stdout, 'hi')
    await assert.rejects(sbx.commands.run('exit 3'), (err) => {
      assert.ok(err instanceof e2b.CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      assert.equal(err.exitCode, 3)
      return true
    })
  })

  test('files are written and read back', async () => {
    const path = `${cwd}/interop/a.txt`
    const info = await sbx.files.write(path, 'hello, manage\n')
    assert.equal(info.path, path)
    assert.equal(await sbx.files.read(path), 'hello, manage\n')
    const listed = await sbx.files.list(`${cwd}/interop`)
    assert.deepEqual(listed.map((e) => e.name), ['a.txt'])
  })

  test('watchDir sees WRITE for files.write on the real name, never a temporary one', async () => {
    const dir = `${cwd}/watched`
    await sbx.files.makeDir(dir)
    const wrote = deferred()
    const events = []
    const watcher = await sbx.files.watchDir(dir, (ev) => {
      events.push(ev)
      if (ev.name === 'w.txt' && ev.type === e2b.FilesystemEventType.WRITE) wrote.resolve(ev)
    })
    try {
      await sbx.files.write(`${dir}/w.txt`, 'watched')
      await within(wrote.promise, `a WRITE event for w.txt (got ${JSON.stringify(events)})`)
      assert.ok(events.every((ev) => ev.name === 'w.txt'), `events on other names: ${JSON.stringify(events)}`)
    } finally {
      await watcher.stop()
    }
  })

  test('list finds the sandbox by metadata; another key does not', async () => {
    const mine = await e2b.Sandbox.list({ ...opts, query: { metadata: { suite: 'interop' } } }).nextItems()
    assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId])
    assert.equal(mine[0].metadata.run, apiKey.slice(4, 12))
    assert.equal(mine[0].state, 'running')
    const none = await e2b.Sandbox.list({ ...opts, query: { metadata: { suite: 'nothing-here' } } }).nextItems()
    assert.deepEqual(none, [])
    const theirs = await e2b.Sandbox.list({ ...opts, apiKey: otherKey }).nextItems()
    assert.deepEqual(theirs, [])
    await assert.rejects(e2b.Sandbox.getInfo(sbx.sandboxId, { ...opts, apiKey: otherKey }), e2b.NotFoundError)
  })

  test('pause, then connect resumes it with its files', async () => {
    const path = `${cwd}/kept.txt`
    await sbx.files.write(path, 'kept across pause')
    assert.equal(await sbx.pause(), true)
    assert.equal(await sbx.pause(), false, 'pausing a paused sandbox reports false (409)')
    const info = await e2b.Sandbox.getInfo(sbx.sandboxId, opts)
    assert.equal(info.state, 'paused')
    const paused = await e2b.Sandbox.list({ ...opts, query: { state: ['paused'], metadata: { suite: 'interop' } } }).nextItems()
    assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])
    // A paused sandbox without autoResume is not reachable through the proxy.
    assert.equal(await sbx.isRunning(), false)

    const again = await e2b.Sandbox.connect(sbx.sandboxId, opts)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.equal((await e2b.Sandbox.getInfo(sbx.sandboxId, opts)).state, 'running')
    assert.equal(await again.files.read(path), 'kept across pause')
    assert.equal((await again.commands.run('cat kept.txt', { cwd })).stdout, 'kept across pause')
  })

  test('a wrong API key is refused', async () => {
    const bad = { ...opts, apiKey: `e2b_${'0'.repeat(40)}` }
    await assert.rejects(e2b.Sandbox.create(bad), e2b.AuthenticationError)
    await assert.rejects(e2b.Sandbox.list(bad).nextItems(), e2b.AuthenticationError)
    await assert.rejects(e2b.Sandbox.getInfo(sbx.sandboxId, bad), e2b.AuthenticationError)
  })

  test('kill, then getInfo throws NotFound and the proxy says not running', async () => {
    assert.equal(await e2b.Sandbox.kill(sbx.sandboxId, opts), true)
    await assert.rejects(e2b.Sandbox.getInfo(sbx.sandboxId, opts), e2b.NotFoundError)
    assert.equal(await e2b.Sandbox.kill(sbx.sandboxId, opts), false)
    assert.equal(await sbx.isRunning(), false)
  })
})
