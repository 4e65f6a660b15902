/** Request ids (D4): a client's own `X-Request-Id` when it is sane, else one of ours. */
import { randomView } from "../Kernel/Random.js"

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/

export const newRequestId = () => `req_${randomView(12).toString("base64url")}`

/** The id of a request: the client's (1..128 of `[A-Za-z0-9._-]`), else a new one. */
export const requestIdOf = (sent: string | undefined) => (sent !== undefined && REQUEST_ID.test(sent) ? sent : newRequestId())
