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

/**
 * Names statement texts for one connection: `s0`, `s1`... for each new preparable text, up to
 * `limit` of them; `undefined` for the others (run unnamed).
 */
export const statementNames = (limit: number) => {
  const names = new Map<string, string | null>()
  return (text: string): string | undefined => {
    let name = names.get(text)
    if (name === undefined && names.size < limit) {
      name = preparable(text) ? `s${names.size}` : null
      names.set(text, name)
    }
    return name ?? undefined
  }
}

const namers = new WeakMap<object, (text: string) => string | undefined>()

/** The name `client` runs `text` under (undefined: unnamed), as `prepareStatements` names it. */
export const statementNameOf = (client: object, text: string) => namers.get(client)?.(text)

/** Makes `client` run its parameterised statements as named prepared statements (`nameOf`'s names). */
export const prepareStatements = (client: QueryingClient, nameOf: (text: string) => string | undefined) => {
  namers.set(client, nameOf)
  const unnamed = client.query.bind(client)
  client.query = (config: unknown, values?: unknown, callback?: unknown) => {
    if (typeof config === "string" && Array.isArray(values) && values.length > 0) {
      const name = nameOf(config)
      if (name !== undefined) return unnamed({ name, text: config, values }, callback)
    }
    return unnamed(config, values, callback)
  }
}
