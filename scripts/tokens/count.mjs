// count.mjs DIR [TOOLS.json]: the o200k tokens (gpt-tokenizer) of every
// DIR/before/*.txt and DIR/after/*.txt that tools' TestTokenCorpus wrote, as
// a table with totals and the after/before ratio; with TOOLS.json (the output
// of `sandbox-mcp tools --json`), also the bytes and tokens of the tools/list
// result, whole and without outputSchema.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { encode } from 'gpt-tokenizer/encoding/o200k_base'

const dir = process.argv[2]
const names = readdirSync(join(dir, 'before')).filter((f) => f.endsWith('.txt')).sort()
const count = (sub, f) => {
  const text = readFileSync(join(dir, sub, f), 'utf8')
  return { tokens: encode(text).length, bytes: Buffer.byteLength(text) }
}
const rows = []
let tb = 0; let ta = 0; let bb = 0; let ba = 0
for (const f of names) {
  const b = count('before', f)
  const a = count('after', f)
  tb += b.tokens; ta += a.tokens; bb += b.bytes; ba += a.bytes
  rows.push([f.replace(/\.txt$/, ''), b.tokens, a.tokens, (a.tokens / b.tokens).toFixed(2), b.bytes, a.bytes])
}
rows.push(['total', tb, ta, (ta / tb).toFixed(2), bb, ba])
const head = ['result', 'tokens before', 'tokens after', 'after/before', 'bytes before', 'bytes after']
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)))
const line = (r) => r.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join('  ')
console.log('o200k tokens (gpt-tokenizer) of the text content a model reads, before (JSON text, HTML-escaped) and after (text rendering)')
console.log(line(head))
for (const r of rows) console.log(line(r))

const toolsFile = process.argv[3]
if (toolsFile) {
  // The wire's tools/list result: each tool without the CLI's toolset field.
  const tools = JSON.parse(readFileSync(toolsFile, 'utf8')).map(({ toolset, ...tool }) => tool)
  const size = (list) => {
    const text = JSON.stringify({ tools: list })
    return [Buffer.byteLength(text), encode(text).length]
  }
  const whole = size(tools)
  const noOutput = size(tools.map(({ outputSchema, ...tool }) => tool))
  console.log('')
  console.log(`tools/list result (${tools.length} tools, compact JSON), o200k tokens`)
  console.log(`${''.padEnd(21)}  ${'bytes'.padStart(7)}  ${'tokens'.padStart(7)}`)
  console.log(`${'whole'.padEnd(21)}  ${String(whole[0]).padStart(7)}  ${String(whole[1]).padStart(7)}`)
  console.log(`${'without outputSchema'.padEnd(21)}  ${String(noOutput[0]).padStart(7)}  ${String(noOutput[1]).padStart(7)}`)
}
