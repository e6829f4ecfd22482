#!/usr/bin/env node
// Lists a root with the reference backend's list() alone (the oracle's
// own walk reads every file it meets, and stops at a symbolic link to a
// directory). Used by tests/doctor.rs.
//
// usage: node list_ids.mjs ORACLE_DIR ROOT
// prints: the listed session ids, as a JSON array, or { error }
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [oracleDir, root] = process.argv.slice(2)
const { openBackend } = await import(pathToFileURL(join(oracleDir, 'lib.mjs')).href)
const { p, close } = await openBackend({ root, compression: 'zstd' })
try {
  const listed = await p.list()
  console.log(JSON.stringify(listed.map((s) => s.id ?? s)))
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.message ?? e) }))
} finally {
  await close?.()
}
