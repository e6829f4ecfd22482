#!/usr/bin/env node
// Loads sessions with the reference backend (`load`, which may repair the
// store it reads: pass a copy) and prints what it loaded, without
// re-serializing the events (JSON.stringify stops near 4,400 levels of
// nesting; the reference's load does not). Used by tests/json_mount.rs.
//
// usage: node load.mjs ORACLE_DIR ROOT ID...
// prints: { ID: { ok, eventCount, lastSeq, contiguous, meta } | { ok: false, error } }
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [oracleDir, root, ...ids] = process.argv.slice(2)
const { openBackend } = await import(pathToFileURL(join(oracleDir, 'lib.mjs')).href)
const { p, close } = await openBackend({ root, compression: 'zstd' })
const out = {}
try {
  for (const id of ids) {
    try {
      const { meta, events } = await p.load(id)
      out[id] = {
        ok: true,
        eventCount: events.length,
        lastSeq: events.length ? events.at(-1).seq : null,
        contiguous: events.every((e, i) => e.seq === i),
        meta,
      }
    } catch (e) {
      out[id] = { ok: false, error: String(e?.message ?? e) }
    }
  }
} finally {
  await close()
}
process.stdout.write(JSON.stringify(out))
