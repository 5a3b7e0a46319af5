// Shared plumbing for the interop tests: where the sandbox-mcp binary is, how
// to start it with --ready-fd (never by polling), and the skip-or-fail rule
// (a missing piece skips with a reason, except under CI=true where it fails).

import { spawn } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** repoRoot is the sandbox-mcp checkout these tests live in. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

/** binaryPath is the sandbox-mcp binary under test: $SANDBOX_MCP_BIN, else <repo>/sandbox-mcp. */
export const binaryPath = process.env.SANDBOX_MCP_BIN || join(repoRoot, 'sandbox-mcp')

/** inCI reports whether missing pieces must fail rather than skip. */
export const inCI = process.env.CI === 'true'

/** startupTimeoutMs bounds waiting for a child's ready line; it only fires on failure. */
export const startupTimeoutMs = 30_000

/**
 * missing turns a list of [ok, reason] checks into the skip reason of the
 * first failed one, or false when all pass. Under CI=true a failed check
 * throws instead, so the file fails loudly rather than skipping.
 */
export function missing (...checks) {
  for (const [ok, reason] of checks) {
    if (ok) continue
    if (inCI) throw new Error(`CI=true and a required piece is missing: ${reason}`)
    return reason
  }
  return false
}

/** binaryCheck is the missing() check for the sandbox-mcp binary. */
export function binaryCheck () {
  return [existsSync(binaryPath), `${binaryPath} not built (run scripts/interop or go build -o sandbox-mcp .)`]
}

/**
 * tryImport imports a package by name and returns [module, null], or
 * [null, reason] when it is not installed.
 */
export async function tryImport (name) {
  try {
    return [await import(name), null]
  } catch (err) {
    if (err?.code === 'ERR_MODULE_NOT_FOUND') {
      return [null, `npm package ${name} not installed (run npm ci in testdata/interop): ${err.message}`]
    }
    throw err
  }
}

/** tempDir makes a fresh directory; remove it with rmSync(dir, {recursive:true}). */
export function tempDir (prefix) {
  return mkdtempSync(join(tmpdir(), `sandbox-mcp-interop-${prefix}-`))
}

/**
 * stateDir makes a fresh --state-dir. It is world-traversable (0755, not
 * mkdtemp's 0700) because the local provider runs bwrap as an unprivileged
 * host user that must reach the sandboxes inside it; with 0700 the server
 * falls back to mapping the sandbox user to its own uid and logs a warning.
 */
export function newStateDir (prefix) {
  const dir = tempDir(prefix)
  chmodSync(dir, 0o755)
  return dir
}

/**
 * spawnReady starts the sandbox-mcp binary with args (which must include
 * --ready-fd 3), hands the child a pipe as fd 3 and resolves once it writes
 * "ready ADDR\n" there: woken by the child's own output, never by polling.
 * It rejects, quoting the child's stderr, if the child exits or closes fd 3
 * first (e.g. the listen address is taken) or after startupTimeoutMs.
 *
 * The returned object has addr, child, stderr() (everything logged so far)
 * and stop() (SIGTERM, then SIGKILL if the child has not exited after a
 * grace period; resolves with {code, signal} once it has exited).
 */
export function spawnReady (args, { env = process.env, cwd = repoRoot } = {}) {
  const child = spawn(binaryPath, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8')
  child.stdout.resume()
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  let exitInfo = null
  exited.then((info) => { exitInfo = info })

  const stop = async () => {
    if (exitInfo || child.exitCode !== null || child.signalCode !== null) return exited
    child.kill('SIGTERM')
    const guard = setTimeout(() => child.kill('SIGKILL'), 10_000)
    try {
      return await exited
    } finally {
      clearTimeout(guard)
    }
  }
  const handle = { child, addr: '', stderr: () => stderr, stop }

  return new Promise((resolve, reject) => {
    let settled = false
    const fail = (why) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      child.kill('SIGKILL')
      // Let stderr drain before quoting it.
      exited.then(() => reject(new Error(`sandbox-mcp ${args.join(' ')}: ${why}\n--- stderr ---\n${stderr}`)))
    }
    const succeed = (addr) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      handle.addr = addr
      resolve(handle)
    }
    const timer = setTimeout(() => fail(`not ready within ${startupTimeoutMs} ms`), startupTimeoutMs)
    child.once('error', (err) => fail(`spawn failed: ${err.message}`))
    exited.then(({ code, signal }) => fail(`exited (code ${code}, signal ${signal}) before it was ready`))
    child.stderr.on('data', (chunk) => { stderr += chunk })

    let buf = ''
    const readyPipe = child.stdio[3]
    readyPipe.setEncoding('utf8')
    readyPipe.on('data', (chunk) => {
      buf += chunk
      const nl = buf.indexOf('\n')
      if (nl < 0) return
      const line = buf.slice(0, nl)
      if (!line.startsWith('ready ')) fail(`unexpected ready line ${JSON.stringify(line)}`)
      else succeed(line.slice('ready '.length).trim())
    })
    readyPipe.on('end', () => fail('closed fd 3 without writing "ready ADDR"'))
  })
}

/**
 * startEnvd runs `sandbox-mcp envd --listen <listen> --root <fresh tmpdir>
 * --ready-fd 3` and resolves once it listens. stop() also removes the root.
 */
export async function startEnvd ({ listen, extraArgs = [] }) {
  const root = tempDir('envd-root')
  let handle
  try {
    handle = await spawnReady(['envd', '--listen', listen, '--root', root, '--ready-fd', '3', ...extraArgs])
  } catch (err) {
    rmSync(root, { recursive: true, force: true })
    throw err
  }
  const stopChild = handle.stop
  return {
    ...handle,
    root,
    stop: async () => {
      const info = await stopChild()
      rmSync(root, { recursive: true, force: true })
      return info
    }
  }
}

/**
 * deferred returns a promise with its resolve and reject exposed, for
 * waiting on callbacks (onStdout, watch events) without sleeping.
 */
export function deferred () {
  let resolve, reject
  const promise = new Promise((res, rej) => { resolve = res; reject = rej })
  return { promise, resolve, reject }
}

/**
 * within races p against a failure-only guard: it rejects with what after ms.
 * The guard never decides a passing result, it only turns a hang into a
 * readable failure.
 */
export async function within (p, what, ms = 30_000) {
  let timer
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)
  })
  try {
    return await Promise.race([p, guard])
  } finally {
    clearTimeout(timer)
  }
}

// --- sandbox-mcp serve ---------------------------------------------------------

/**
 * providerEnv are the variables a serve child inherits from the caller so
 * that scripts/interop can run the suite against another provider
 * (SANDBOX_MCP_PROVIDER=docker SANDBOX_MCP_DOCKER_IMAGE=…).
 */
const providerEnv = ['SANDBOX_MCP_PROVIDER', 'SANDBOX_MCP_DOCKER_IMAGE', 'SANDBOX_MCP_DOCKER_HOST', 'SANDBOX_MCP_DOCKER_TRANSPORT', 'DOCKER_HOST']

/**
 * serveEnv is the environment for a serve child: PATH, HOME in the test's
 * state directory so nothing lands in the real home, and the provider
 * variables (providerEnv) the caller set.
 */
export function serveEnv (stateDir) {
  const env = { PATH: process.env.PATH, HOME: join(stateDir, 'home') }
  for (const name of providerEnv) {
    if (process.env[name]) env[name] = process.env[name]
  }
  mkdirSync(env.HOME, { recursive: true })
  return env
}

/**
 * startServeHTTP runs `sandbox-mcp serve --http 127.0.0.1:0 --ready-fd 3`
 * with a fresh state directory and resolves once it listens, with url (the
 * MCP endpoint the server reports, http://127.0.0.1:PORT/mcp), token (the
 * bearer token the server generated, read from STATE-DIR/http-token; null
 * when extraArgs turn it off), headers ({ Authorization: 'Bearer TOKEN' }, or
 * {}), stderr() and stop() (which also removes the state directory).
 */
export async function startServeHTTP (extraArgs = []) {
  const stateDir = newStateDir('serve-http')
  const args = ['serve', '--http', '127.0.0.1:0', '--state-dir', stateDir, '--ready-fd', '3', ...extraArgs]
  let handle
  try {
    handle = await spawnReady(args, { env: serveEnv(stateDir) })
  } catch (err) {
    rmSync(stateDir, { recursive: true, force: true })
    throw err
  }
  const stopChild = handle.stop
  const tokenFile = join(stateDir, 'http-token')
  const token = existsSync(tokenFile) ? readFileSync(tokenFile, 'utf8').trim() : null
  return {
    ...handle,
    url: handle.addr,
    token,
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    stateDir,
    stop: async () => {
      const info = await stopChild()
      rmSync(stateDir, { recursive: true, force: true })
      return info
    }
  }
}
