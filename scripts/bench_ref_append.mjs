// The reference's own append of one event, timed: creates session ID under
// ROOT (cwd CWD) through the reference backend (../shared/tools/oracle's
// lib.mjs, `openBackend`), then appends N single events one call at a time
// and prints the median and every duration (ms) as JSON.
//
// Usage: node bench_ref_append.mjs ORACLE_DIR ROOT ID CWD N
import { pathToFileURL } from 'node:url'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'

const [oracleDir, root, id, cwd, nArg] = process.argv.slice(2)
const n = Number(nArg)
const { openBackend } = await import(pathToFileURL(join(oracleDir, 'lib.mjs')).href)
const { p, close } = await openBackend({ root })
const t0 = 1_767_600_000_000
await p.create({ version: 0, id, createdAt: t0, cwd, delegationDepth: 0 })
const ms = []
for (let seq = 0; seq < n; seq++) {
  const event = { type: 'x-sessionfs/bench', seq, time: t0 + seq, data: { n: seq }, ignorable: true }
  const start = performance.now()
  await p.append(id, [event])
  ms.push(performance.now() - start)
}
await close()
const sorted = [...ms].sort((a, b) => a - b)
console.log(JSON.stringify({ median_ms: sorted[Math.floor(sorted.length / 2)], ms }))
