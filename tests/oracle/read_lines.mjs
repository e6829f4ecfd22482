#!/usr/bin/env node
// Reads one session's transcript with the reference (readRaw, as the
// reference reads any file) and reports, for every line after the header,
// what JSON.parse makes of it: whether it is an object, and its `type` and
// `seq` as JavaScript sees them, and whether its envelope passes the
// reference's load (the rules of `assertSessionEventEnvelope` in
// @deepseek-ai/dsh-session's lib/types/index.js, which it does not export:
// only the members type, seq, time, data, surfaceOp, sourceEventSeqs and
// ignorable, as `for...in` lists them; a safe-integer time; data present;
// ignorable absent or true). Used by tests/json_oracle.rs.
//
// usage: node read_lines.mjs ORACLE_DIR ROOT ID [--compression zstd|none]
// prints: one JSON array, one entry per line:
//   { object: bool, type: string|null, seq: "typeof" | "number:<f64 bits hex>",
//     envelope: bool }
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [oracleDir, root, id] = process.argv.slice(2)
const ci = process.argv.indexOf('--compression')
const compression = ci > 0 ? process.argv[ci + 1] : 'none'
const { openBackend } = await import(pathToFileURL(join(oracleDir, 'lib.mjs')).href)

const { p, close } = await openBackend({ root, compression })
let raw
try {
  raw = await p.readRaw(id)
} finally {
  await close()
}
if (raw === undefined) throw new Error(`the reference finds no session ${id}`)
const lines = raw.content.split('\n')
if (lines.pop() !== '') throw new Error('the transcript does not end with a newline')
const bits = (n) => {
  const view = new DataView(new ArrayBuffer(8))
  view.setFloat64(0, n)
  return view.getBigUint64(0).toString(16).padStart(16, '0')
}
const out = lines.slice(1).map((line) => {
  let v
  try {
    v = JSON.parse(line)
  } catch {
    return { object: false, type: null, seq: null, envelope: false }
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { object: false, type: null, seq: null, envelope: false }
  const members = ['type', 'seq', 'time', 'data', 'surfaceOp', 'sourceEventSeqs', 'ignorable']
  let known = true
  for (const key in v) if (!members.includes(key)) known = false
  const envelope = known
    && typeof v.time === 'number' && Number.isSafeInteger(v.time)
    && v.data !== undefined
    && (v.ignorable === undefined || v.ignorable === true)
  return {
    envelope,
    object: true,
    type: typeof v.type === 'string' ? v.type.toWellFormed() : null,
    seq: typeof v.seq === 'number' ? `number:${bits(v.seq)}` : typeof v.seq,
  }
})
process.stdout.write(JSON.stringify(out))
