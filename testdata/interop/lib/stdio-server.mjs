// Runs `sandbox-mcp ARGS...` for a framework that starts its MCP server over
// stdio itself, and removes the server's state directory once the server has
// exited. The frameworks' close() does not wait for their child to exit, so
// a test that removed the directory itself would race the server.
//
//   node lib/stdio-server.mjs STATE_DIR BINARY ARGS...
//
// stdin and stdout are the server's own; its log is dropped unless
// INTEROP_VERBOSE is set. SIGTERM and SIGINT are passed on to the server.

import { spawn } from 'node:child_process'
import { rmSync } from 'node:fs'

const [stateDir, binary, ...args] = process.argv.slice(2)
const child = spawn(binary, args, { stdio: ['inherit', 'inherit', process.env.INTEROP_VERBOSE ? 'inherit' : 'ignore'] })
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig))
child.once('exit', (code, signal) => {
  rmSync(stateDir, { recursive: true, force: true })
  process.exit(code ?? (signal ? 1 : 0))
})
