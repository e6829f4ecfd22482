#!/usr/bin/env node
// Writes sessions with the reference backend itself (create, then one
// append per batch). Used by tests/json_mount.rs.
//
// usage: node write_sessions.mjs ORACLE_DIR ROOT SPEC.json
// SPEC.json: [{ "meta": {...create meta...}, "batches": [[event, ...], ...] }, ...]
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [oracleDir, root, specPath] = process.argv.slice(2)
const { openBackend } = await import(pathToFileURL(join(oracleDir, 'lib.mjs')).href)
const spec = JSON.parse(await readFile(specPath, 'utf8'))
const { p, close } = await openBackend({ root, compression: 'zstd' })
try {
  for (const { meta, batches } of spec) {
    await p.create(meta)
    for (const events of batches) await p.append(meta.id, events)
  }
} finally {
  await close()
}
