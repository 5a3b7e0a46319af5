// The official e2b JS SDK (npm `e2b`, pinned in package.json) against
// `sandbox-mcp envd`.
//
// Debug mode (Sandbox.create({debug: true}), or E2B_DEBUG=true) skips the
// management API entirely: the SDK builds a Sandbox with id
// "debug_sandbox_id" and talks to envd at http://localhost:49983 (the port is
// ConnectionConfig.envdPort, fixed). It also assumes envd version "99.99.99"
// (ENVD_DEBUG_FALLBACK) and never reads our X-Envd-Version header; every
// version gate in SDK 2.51.0 is at or below 0.6.4, so 99.99.99 and our 0.6.13
// take the same paths. Because the port is fixed, this file owns port 49983
// and its tests run one after another.

import assert from 'node:assert/strict'
import { gunzipSync } from 'node:zlib'
import { existsSync, readFileSync, writeFileSync, mkdirSync, statSync } from 'node:fs'
import { userInfo } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'

import { binaryCheck, deferred, missing, startEnvd, tryImport, within } from './lib/harness.mjs'

const envdPort = 49983
const [e2b, e2bMissing] = await tryImport('e2b')
const skip = missing([!e2bMissing, e2bMissing], binaryCheck())

describe('e2b JS SDK against sandbox-mcp envd (debug mode, localhost:49983)', { skip }, () => {
  let envd
  let sbx

  before(async () => {
    try {
      envd = await startEnvd({ listen: `127.0.0.1:${envdPort}` })
    } catch (err) {
      throw new Error(`could not start envd on port ${envdPort}, which the e2b SDK's debug mode requires; ` +
        `is another process listening there? (${err.message})`)
    }
    sbx = await e2b.Sandbox.create({ debug: true })
  })

  after(async () => {
    if (envd) {
      if (process.env.INTEROP_VERBOSE) console.error(envd.stderr())
      const { code, signal } = await envd.stop()
      // SIGTERM is a clean shutdown for the daemon.
      assert.ok(code === 0 || signal === 'SIGTERM', `envd exit: code ${code} signal ${signal}\n${envd.stderr()}`)
    }
  })

  test('debug mode targets localhost:49983 with the fallback envd version', () => {
    assert.equal(sbx.sandboxId, 'debug_sandbox_id')
    assert.equal(sbx.envdApiUrl, `http://localhost:${envdPort}`)
    assert.equal(sbx.commands.envdVersion, '99.99.99')
    assert.equal(sbx.commands.supportsStdinClose, true)
    assert.match(envd.addr, /:49983$/)
  })

  test('envd answers /health with 204 and reports X-Envd-Version 0.6.13', async () => {
    const res = await fetch(`http://127.0.0.1:${envdPort}/health`)
    assert.equal(res.status, 204)
    assert.equal(res.headers.get('x-envd-version'), '0.6.13')
    // The SDK's own health probe (used after dropped connections) agrees.
    assert.equal(await sbx.isRunning(), true)
  })

  test('commands.run exit 0: stdout and stderr arrive separately, in callbacks and in the result', async () => {
    const outChunks = []
    const errChunks = []
    const result = await sbx.commands.run("printf 'out1\\nout2\\n'; printf 'err1\\n' >&2", {
      onStdout: (d) => outChunks.push(d),
      onStderr: (d) => errChunks.push(d)
    })
    assert.equal(result.exitCode, 0)
    assert.equal(result.error, undefined)
    assert.equal(result.stdout, 'out1\nout2\n')
    assert.equal(result.stderr, 'err1\n')
    assert.equal(outChunks.join(''), 'out1\nout2\n')
    assert.equal(errChunks.join(''), 'err1\n')
  })

  test('commands.run passes envs and cwd; the default cwd is the root', async () => {
    const sub = join(envd.root, 'work dir')
    mkdirSync(sub)
    const inSub = await sbx.commands.run('pwd; echo "$GREETING"', { cwd: sub, envs: { GREETING: 'hi there' } })
    assert.equal(inSub.stdout, `${sub}\nhi there\n`)
    const atHome = await sbx.commands.run('pwd; echo "$HOME"')
    assert.equal(atHome.stdout, `${envd.root}\n${envd.root}\n`)
  })

  test('commands.run non-zero exit throws CommandExitError carrying exitCode, stdout and stderr', async () => {
    await assert.rejects(
      sbx.commands.run('echo partial; echo boom >&2; exit 7'),
      (err) => {
        assert.ok(err instanceof e2b.CommandExitError, `got ${err?.constructor?.name}: ${err}`)
        assert.ok(err instanceof e2b.SandboxError)
        assert.equal(err.exitCode, 7)
        assert.equal(err.stdout, 'partial\n')
        assert.equal(err.stderr, 'boom\n')
        assert.equal(err.error, 'exit status 7')
        return true
      })
  })

  test('commands.run without stdin gives the command an empty stdin (EOF at once)', async () => {
    // The SDK sends stdin:false unless asked; cat must see EOF, not hang.
    const result = await sbx.commands.run('cat; echo done')
    assert.equal(result.stdout, 'done\n')
  })

  test('background command: handle.pid, then kill() ends it with a CommandExitError', async () => {
    const handle = await sbx.commands.run('sleep 600', { background: true })
    assert.ok(Number.isInteger(handle.pid) && handle.pid > 0, `pid ${handle.pid}`)
    assert.equal(handle.exitCode, undefined, 'still running')
    assert.equal(await handle.kill(), true)
    await assert.rejects(within(handle.wait(), 'the killed command to end'), (err) => {
      assert.ok(err instanceof e2b.CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      // envd reports Go's ProcessState: -1 and "signal: killed" for SIGKILL.
      assert.equal(err.exitCode, -1)
      assert.equal(err.error, 'signal: killed')
      return true
    })
    // An ended process is no longer signalable: kill() reports not found.
    assert.equal(await sbx.commands.kill(handle.pid), false)
  })

  test('timeoutMs goes out as Connect-Timeout-Ms and the daemon kills the command at that deadline', async () => {
    // The 1 s deadline is the trigger, not an assertion: the test waits for
    // the end event however long it takes (the guard only catches a hang).
    const handle = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 1000 })
    // A second client without a deadline (timeoutMs 0: connect-es then sends
    // no Connect-Timeout-Ms at all) sees how the process ends. If it attaches
    // after the end, envd's retention still gives it start + end.
    const other = await e2b.Sandbox.connect('debug_sandbox_id', { debug: true })
    const observer = await other.commands.connect(handle.pid, { timeoutMs: 0 })
    await assert.rejects(within(observer.wait(), 'the daemon to kill the command at its deadline'), (err) => {
      assert.ok(err instanceof e2b.CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      assert.equal(err.exitCode, -1)
      // E2B's envd says just "signal: killed"; sandbox-mcp appends why.
      assert.match(err.error, /^signal: killed/)
      return true
    })
    // The caller's own stream ends with the deadline: the SDK's TimeoutError,
    // or the kill's CommandExitError if the end event won the race.
    await assert.rejects(within(handle.wait(), 'the caller\'s stream to end'), (err) => {
      assert.ok(err instanceof e2b.TimeoutError || err instanceof e2b.CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      return true
    })
  })

  test('sendStdin then closeStdin: cat echoes the input and exits 0', async () => {
    const handle = await sbx.commands.run('cat', { background: true, stdin: true })
    await handle.sendStdin('hello\n')
    await sbx.commands.sendStdin(handle.pid, new Uint8Array([0x62, 0x79, 0x74, 0x65, 0x73, 0x0a])) // "bytes\n"
    await handle.closeStdin()
    const result = await within(handle.wait(), 'cat to exit after EOF')
    assert.equal(result.exitCode, 0)
    assert.equal(result.stdout, 'hello\nbytes\n')
  })

  test('closeStdin is idempotent on a live process; stdin after close is an error', async () => {
    const eof = deferred()
    let out = ''
    // The process outlives its stdin, so the second close meets a live pid.
    const handle = await sbx.commands.run('cat >/dev/null; echo eof-seen; exec sleep 600', {
      background: true,
      stdin: true,
      onStdout: (d) => { out += d; if (out.includes('eof-seen')) eof.resolve() }
    })
    await handle.closeStdin()
    await within(eof.promise, 'the command to see EOF')
    await handle.closeStdin()
    await assert.rejects(handle.sendStdin('late\n'), (err) => {
      assert.ok(err instanceof e2b.SandboxError, `got ${err?.constructor?.name}: ${err}`)
      assert.match(err.message, /stdin/)
      return true
    })
    assert.equal(await handle.kill(), true)
    await assert.rejects(within(handle.wait(), 'the killed command to end'), e2b.CommandExitError)
  })

  test('commands.connect(pid) attaches a second client to a running process', async () => {
    const first = await sbx.commands.run('cat', { background: true, stdin: true })
    // A separate Sandbox object, as another program would have.
    const other = await e2b.Sandbox.connect('debug_sandbox_id', { debug: true })
    const seen = deferred()
    let attachedOut = ''
    const attached = await other.commands.connect(first.pid, {
      onStdout: (d) => {
        attachedOut += d
        if (attachedOut.includes('ping\n')) seen.resolve()
      }
    })
    assert.equal(attached.pid, first.pid)
    await other.commands.sendStdin(first.pid, 'ping\n')
    await within(seen.promise, 'the attached client to see "ping"')
    await attached.closeStdin()
    const [fromAttached, fromFirst] = await within(Promise.all([attached.wait(), first.wait()]), 'both handles to see the end')
    assert.equal(fromAttached.exitCode, 0)
    assert.equal(fromAttached.stdout, 'ping\n')
    assert.equal(fromFirst.exitCode, 0)
    assert.equal(fromFirst.stdout, 'ping\n')
  })

  test('commands.list shows running commands with their config, and drops them once ended', async () => {
    const sub = join(envd.root, 'listdir')
    mkdirSync(sub)
    const a = await sbx.commands.run('sleep 600', { background: true })
    const b = await sbx.commands.run('sleep 601', { background: true, cwd: sub, envs: { MARK: 'b' } })
    const listed = await sbx.commands.list()
    const byPid = new Map(listed.map((p) => [p.pid, p]))
    const pa = byPid.get(a.pid)
    const pb = byPid.get(b.pid)
    assert.ok(pa, `pid ${a.pid} missing from ${JSON.stringify(listed)}`)
    assert.ok(pb, `pid ${b.pid} missing from ${JSON.stringify(listed)}`)
    assert.equal(pa.cmd, '/bin/bash')
    assert.deepEqual(pa.args, ['-l', '-c', 'sleep 600'])
    assert.deepEqual(pb.args, ['-l', '-c', 'sleep 601'])
    assert.equal(pb.cwd, sub)
    assert.equal(pb.envs.MARK, 'b')
    assert.equal(pa.tag, undefined)

    for (const h of [a, b]) {
      assert.equal(await h.kill(), true)
      await assert.rejects(within(h.wait(), `pid ${h.pid} to end`), e2b.CommandExitError)
    }
    const pids = (await sbx.commands.list()).map((p) => p.pid)
    assert.ok(!pids.includes(a.pid) && !pids.includes(b.pid), `ended pids still listed: ${pids}`)
  })

  test('files: write/read/exists/list/makeDir/getInfo/rename/remove with text', async () => {
    const dir = join(envd.root, 'notes')
    const info = await sbx.files.write(`${dir}/a.txt`, 'hello, world\n')
    assert.equal(info.name, 'a.txt')
    assert.equal(info.path, `${dir}/a.txt`)
    assert.equal(info.type, 'file')
    assert.equal(readFileSync(`${dir}/a.txt`, 'utf8'), 'hello, world\n', 'on disk')

    assert.equal(await sbx.files.read(`${dir}/a.txt`), 'hello, world\n')
    // Relative paths resolve against the user's home, which is the root.
    assert.equal(await sbx.files.read('notes/a.txt'), 'hello, world\n')
    assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
    assert.equal(await sbx.files.exists(`${dir}/nope.txt`), false)

    assert.equal(await sbx.files.makeDir(`${dir}/sub/deeper`), true)
    assert.equal(await sbx.files.makeDir(`${dir}/sub/deeper`), false, 'existing dir → false')
    assert.ok(statSync(`${dir}/sub/deeper`).isDirectory())

    const entries = await sbx.files.list(dir)
    assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(), [['a.txt', 'file'], ['sub', 'dir']])
    const file = entries.find((e) => e.name === 'a.txt')
    assert.equal(file.path, `${dir}/a.txt`)
    assert.equal(file.size, 13)
    assert.ok(file.modifiedTime instanceof Date && !Number.isNaN(file.modifiedTime.getTime()))
    assert.match(file.permissions, /^-rw/)
    const deep = await sbx.files.list(dir, { depth: 3 })
    assert.deepEqual(deep.map((e) => e.path).sort(), [`${dir}/a.txt`, `${dir}/sub`, `${dir}/sub/deeper`])

    const stat = await sbx.files.getInfo(`${dir}/sub`)
    assert.equal(stat.type, 'dir')
    assert.equal(stat.name, 'sub')

    const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/sub/b.txt`)
    assert.equal(moved.path, `${dir}/sub/b.txt`)
    assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)

    await sbx.files.remove(`${dir}/sub`)
    assert.equal(await sbx.files.exists(`${dir}/sub`), false)
    assert.equal(existsSync(`${dir}/sub`), false, 'gone from disk')
    // Removing something that is not there succeeds silently, as in envd.
    await sbx.files.remove(`${dir}/never-was`)
  })

  test('files: binary round trips over multipart, octet-stream and gzip, read as bytes/blob/stream', async () => {
    const all = new Uint8Array(256 * 4)
    for (let i = 0; i < all.length; i++) all[i] = i % 256
    const dir = join(envd.root, 'bin')

    await sbx.files.write(`${dir}/multipart.bin`, all)
    await sbx.files.write(`${dir}/octet.bin`, all.buffer, { useOctetStream: true })
    await sbx.files.write(`${dir}/gzip.bin`, new Blob([all]), { gzip: true })
    for (const name of ['multipart.bin', 'octet.bin', 'gzip.bin']) {
      assert.deepEqual(new Uint8Array(readFileSync(`${dir}/${name}`)), all, `${name} on disk`)
      assert.deepEqual(await sbx.files.read(`${dir}/${name}`, { format: 'bytes' }), all, `${name} read back`)
    }

    const blob = await sbx.files.read(`${dir}/octet.bin`, { format: 'blob' })
    assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), all)

    const stream = await sbx.files.read(`${dir}/octet.bin`, { format: 'stream' })
    const parts = []
    for await (const chunk of stream) parts.push(chunk)
    assert.deepEqual(new Uint8Array(Buffer.concat(parts)), all)

    const gz = await sbx.files.read(`${dir}/octet.bin`, { format: 'bytes', gzip: true })
    // fetch decodes Content-Encoding: gzip itself; either way the bytes must match.
    const plain = gz.length === all.length ? gz : new Uint8Array(gunzipSync(gz))
    assert.deepEqual(plain, all)

    // Empty files read back as empty, in every format.
    await sbx.files.write(`${dir}/empty`, '')
    assert.equal(await sbx.files.read(`${dir}/empty`), '')
    assert.equal((await sbx.files.read(`${dir}/empty`, { format: 'bytes' })).length, 0)
  })

  test('files.write with several files in one multipart request', async () => {
    const dir = join(envd.root, 'multi')
    const infos = await sbx.files.write([
      { path: `${dir}/one.txt`, data: 'one' },
      { path: `${dir}/nested/two.bin`, data: new Uint8Array([0, 1, 2, 255]) }
    ])
    assert.deepEqual(infos.map((i) => i.path).sort(), [`${dir}/nested/two.bin`, `${dir}/one.txt`])
    assert.equal(readFileSync(`${dir}/one.txt`, 'utf8'), 'one')
    assert.deepEqual([...readFileSync(`${dir}/nested/two.bin`)], [0, 1, 2, 255])
  })

  test('files.write metadata comes back from write, getInfo and list', async () => {
    const path = join(envd.root, 'meta', 'tagged.txt')
    const info = await sbx.files.write(path, 'x', { metadata: { owner: 'interop', 'build-id': '42' } })
    assert.deepEqual(info.metadata, { owner: 'interop', 'build-id': '42' })
    assert.deepEqual((await sbx.files.getInfo(path)).metadata, { owner: 'interop', 'build-id': '42' })
    const [listed] = await sbx.files.list(join(envd.root, 'meta'))
    assert.deepEqual(listed.metadata, { owner: 'interop', 'build-id': '42' })
  })

  test('an explicit user goes out as Basic auth (commands) and username= (files)', async () => {
    const me = userInfo().username
    const result = await sbx.commands.run('id -un', { user: me })
    assert.equal(result.stdout, `${me}\n`)
    const path = join(envd.root, 'as-user.txt')
    await sbx.files.write(path, 'mine', { user: me })
    assert.equal(await sbx.files.read(path, { user: me }), 'mine')
    // Unlike E2B's envd (unauthenticated for an unknown user), sandbox-mcp's
    // envd never refuses a name: it runs as the daemon's own user instead
    // (envd/identity's documented rule), so the SDK sees success.
    const unknown = await sbx.commands.run('id -un', { user: 'no-such-user-interop' })
    assert.equal(unknown.stdout, `${me}\n`)
  })

  test('pty.create: interactive bash on a terminal, sendInput, resize, exit', async () => {
    let out = ''
    const sawAnswer = deferred()
    const sawSize = deferred()
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        out += new TextDecoder().decode(d)
        if (out.includes('answer=42')) sawAnswer.resolve()
        if (out.includes('size=30 100')) sawSize.resolve()
      }
    })
    const enc = new TextEncoder()
    await sbx.pty.sendInput(term.pid, enc.encode('echo answer=$((6*7))\n'))
    await within(sawAnswer.promise, `"answer=42" on the terminal (got ${JSON.stringify(out)})`)
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(term.pid, enc.encode('echo size=$(stty size)\n'))
    await within(sawSize.promise, `"size=30 100" on the terminal (got ${JSON.stringify(out)})`)
    await sbx.pty.sendInput(term.pid, enc.encode('exit 0\n'))
    const result = await within(term.wait(), 'the terminal shell to exit')
    assert.equal(result.exitCode, 0)
  })

  test('files.watchDir streams events for changes in the directory', async () => {
    const dir = join(envd.root, 'watched')
    mkdirSync(dir)
    const created = deferred()
    const events = []
    const watcher = await sbx.files.watchDir(dir, (ev) => {
      events.push(ev)
      if (ev.name === 'new.txt' && ev.type === e2b.FilesystemEventType.CREATE) created.resolve(ev)
    })
    try {
      writeFileSync(join(dir, 'new.txt'), 'x')
      const ev = await within(created.promise, `a create event for new.txt (got ${JSON.stringify(events)})`)
      assert.equal(ev.name, 'new.txt')
    } finally {
      await watcher.stop()
    }
  })

  test('envd errors surface as the SDK\'s typed errors', async () => {
    const missingFile = join(envd.root, 'does-not-exist.txt')
    // REST GET /files 404 → FileNotFoundError (a NotFoundError).
    await assert.rejects(sbx.files.read(missingFile), (err) => {
      assert.ok(err instanceof e2b.FileNotFoundError, `got ${err?.constructor?.name}: ${err}`)
      assert.ok(err instanceof e2b.NotFoundError)
      assert.match(err.message, /does-not-exist\.txt/)
      return true
    })
    // RPC not_found (Filesystem.Stat / ListDir) → NotFoundError.
    await assert.rejects(sbx.files.getInfo(missingFile), e2b.NotFoundError)
    await assert.rejects(sbx.files.list(join(envd.root, 'no-such-dir')), e2b.NotFoundError)
    // Process.Connect with an unknown pid → NotFoundError.
    await assert.rejects(sbx.commands.connect(2 ** 31 - 1), (err) => {
      assert.ok(err instanceof e2b.NotFoundError, `got ${err?.constructor?.name}: ${err}`)
      assert.match(err.message, /2147483647/)
      return true
    })
    // invalid_argument → InvalidArgumentError: listing a file, a missing cwd.
    writeFileSync(join(envd.root, 'plain.txt'), 'x')
    await assert.rejects(sbx.files.list(join(envd.root, 'plain.txt')), e2b.InvalidArgumentError)
    await assert.rejects(sbx.commands.run('true', { cwd: join(envd.root, 'no-such-cwd') }), (err) => {
      assert.ok(err instanceof e2b.InvalidArgumentError, `got ${err?.constructor?.name}: ${err}`)
      assert.match(err.message, /no-such-cwd/)
      return true
    })
    // REST GET /files on a directory → 400 → InvalidArgumentError.
    await assert.rejects(sbx.files.read(envd.root), e2b.InvalidArgumentError)
  })
})
