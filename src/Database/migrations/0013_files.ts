import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Files (D13): the metadata in `files`, the bytes in `file_chunks` as consecutive slices of
 * FILE_CHUNK_BYTES (src/Files/Repo.ts), so an upload is written and a download or a range read
 * without holding the whole file in memory, and a backup of the database holds every file.
 * A file's chunks are written before its row (its size and hash are known once they are), so
 * their reference is checked at commit. Chunks are stored uncompressed out of line (`STORAGE EXTERNAL`): uploads are often compressed
 * already, and reading a slice then touches only its own TOAST pages.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE files (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      filename text NOT NULL,
      content_type text NOT NULL,
      bytes bigint NOT NULL CHECK (bytes >= 0),
      sha256 text NOT NULL,
      purpose text NOT NULL CHECK (purpose IN ('run_input', 'knowledge', 'run_output')),
      run_id text REFERENCES runs(id),
      created_by_key_id text REFERENCES api_keys(id),
      created_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX files_cell ON files (tenant_id, environment, id)`
  yield* sql`CREATE INDEX files_run ON files (run_id) WHERE run_id IS NOT NULL`
  yield* sql`
    CREATE TABLE file_chunks (
      file_id text NOT NULL REFERENCES files(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
      index integer NOT NULL,
      data bytea NOT NULL,
      PRIMARY KEY (file_id, index)
    )`
  yield* sql`ALTER TABLE file_chunks ALTER COLUMN data SET STORAGE EXTERNAL`
})
