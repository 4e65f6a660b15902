/**
 * Prepared statements, per connection (issue 20), as postgres.js, pgx and asyncpg do by default: a
 * parameterised statement this connection has run before is executed by name, so Postgres neither
 * parses nor plans it again (after its first five executions, Postgres keeps a generic plan when it
 * is not costlier than the custom ones). `pg` prepares a statement given a `name` once per
 * connection; this gives each new statement text of a connection a name, up to `limit` of them
 * (the rest run unnamed, as before), so a backend's plan cache stays bounded.
 *
 * Not prepared: statements without parameters (`pg` sends them in the simple protocol, which also
 * runs several statements at once, as migrations do), and statements whose result columns are a
 * `*` expansion (`SELECT *`, `r.*`, `RETURNING *`): a migration adding a column would change such
 * a prepared statement's result type, which Postgres refuses ("cached plan must not change result
 * type") where it re-plans any other prepared statement.
 */

/** What is used here of a `pg` client. */
export interface QueryingClient {
  query: (...args: Array<any>) => any
}

const STAR = /(^|[\s,(])(\w+\.)?\*(\s|,|;|$)/

/** Whether a statement's text may be prepared (see above). */
export const preparable = (text: string) => !STAR.test(text)

/** Makes `client` run its parameterised statements as named prepared statements. */
export const prepareStatements = (client: QueryingClient, limit: number) => {
  if (limit <= 0) return
  const unnamed = client.query.bind(client)
  const names = new Map<string, string | null>()
  client.query = (config: unknown, values?: unknown, callback?: unknown) => {
    if (typeof config === "string" && Array.isArray(values) && values.length > 0) {
      let name = names.get(config)
      if (name === undefined && names.size < limit) {
        name = preparable(config) ? `s${names.size}` : null
        names.set(config, name)
      }
      if (typeof name === "string") return unnamed({ name, text: config, values }, callback)
    }
    return unnamed(config, values, callback)
  }
}
