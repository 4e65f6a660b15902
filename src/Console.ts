/**
 * The console (issue 38): the front door of a customer's people. Its accounts are the
 * organization's members (not the API's `users`, the customer's own end users): sign-up with a
 * verified address, sign-in with a password and, once enrolled, a TOTP code (RFC 6238), password
 * reset, sessions; the organization a member creates, its pilot application (the operator plane's
 * own `submitPilot`), the sandbox's provisioning state, the first key (the operator plane's own
 * `createKey`, after a fresh TOTP code, audited as the member's) and the quickstart's ids.
 *
 * Every time here is Effect's Clock (tests move it with TestClock). Secrets are kept as the
 * migration 0030 says (hashes, digests, the TOTP secret sealed). Pages and cookies are
 * src/Console/Http.ts's; this service knows nothing of HTTP.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Data, Effect, Layer, Option, Redacted } from "effect"
import * as OTPAuth from "otpauth"
import QRCode from "qrcode"

import { Audit } from "./Audit.js"
import { Mailer } from "./Console/Mail.js"
import { ConsoleRepo, type LinkRow } from "./Console/Repo.js"
import * as S from "./Console/Secrets.js"
import { Secrets } from "./Crypto/Secrets.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { QUOTA_NAMES, type QuotaName } from "./Domain/Quotas.js"
import { type EnvironmentName, makeId } from "./Kernel/Ids.js"
import type { CellRef } from "./Kernel/Principal.js"
import { requestId } from "./Kernel/RequestId.js"
import { OperatorCredentials } from "./Kernel/Security.js"
import { UnitOfWork } from "./Kernel/UnitOfWork.js"
import { Operator } from "./Operator.js"
import { ProductionRequests } from "./ProductionRequests.js"
import { Quotas } from "./Quotas.js"
import { RunStore } from "./Runs.js"
import { SigningKeys, Tools } from "./Tools.js"
import { Webhooks } from "./Webhooks.js"

/** A request the console refuses, with the page's status and what it tells the member. */
export class Refused extends Data.TaggedError("Refused")<{ readonly status: number; readonly message: string }> {}

const refuse = (status: number, message: string) => Effect.fail(new Refused({ status, message }))

const MINUTE = 60_000
/** How long a session lasts without a new sign-in. */
const SESSION_MS = 12 * 60 * MINUTE
/** A verification link's life, and a reset link's (shorter: it signs in). */
const LINK_MS = { verify: 24 * 60 * MINUTE, reset: 30 * MINUTE, invite: 7 * 24 * 60 * MINUTE } as const
/** A TOTP check this recent allows creating a key (contract part 5: "after MFA"). */
export const FRESH_MFA_MS = 5 * MINUTE
/** A personal operator token's visible start (issue 39); the shared OPERATOR_TOKEN's is `op_`. */
export const OPERATOR_TOKEN_PREFIX = "opk_"
/** Failed sign-ins counted over this window, per address and per account. */
const FAILURE_WINDOW_MS = 15 * MINUTE
export const FAILURE_LIMITS = { account: 5, address: 20 } as const
const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}$/
const PASSWORD_MIN = 12
const PASSWORD_MAX = 256

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

/** What a session is, as the pages see it. */
export interface Member {
  readonly accountId: string
  readonly email: string
  /** whose console: a customer's member, or an operator (issue 39) */
  readonly kind: "member" | "operator"
  readonly organizationId: string | null
  readonly enrolled: boolean
  /** signed in with the password but the TOTP step is still due */
  readonly mfaDue: boolean
  readonly mfaAt: Date | null
}

const totpOf = (secret: OTPAuth.Secret, email: string) =>
  new OTPAuth.TOTP({ issuer: "Agent Platform", label: email, algorithm: "SHA1", digits: 6, period: 30, secret })

export class Console extends Effect.Service<Console>()("Console", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* ConsoleRepo
    const mailer = yield* Mailer
    const secrets = yield* Secrets
    const operator = yield* Operator
    const audit = yield* Audit
    const tools = yield* Tools
    const productionRequests = yield* ProductionRequests
    const quotas = yield* Quotas
    const signing = yield* SigningKeys
    const webhooks = yield* Webhooks
    const runStore = yield* RunStore
    // the console's requests are no operator-plane requests: the approval's `about` has no audit
    // entry of the edge's to name (this service writes its own)
    const work = yield* UnitOfWork
    const signingKey = yield* Effect.orDie(repo.signingKey(Buffer.from(S.token(), "base64url")))

    /** `random.expiry.signature`: the random part is stored (as a digest), the rest is checked first. */
    const makeLink = (
      purpose: LinkRow["purpose"],
      to: { accountId: string | null; organizationId: string | null; email: string }
    ) =>
      Effect.gen(function*() {
        const random = S.token()
        const expires = (yield* Clock.currentTimeMillis) + LINK_MS[purpose]
        yield* repo.insertLink({ tokenHash: S.digest(random), purpose, ...to, expiresAt: new Date(expires) })
        return `${random}.${expires}.${S.sign(signingKey, `${purpose}:${random}.${expires}`)}`
      })

    /** Spends a link of `purpose` once: its row, or why not. */
    const spendLink = (purpose: LinkRow["purpose"], link: string) =>
      Effect.gen(function*() {
        const [random, expires, signature] = link.split(".")
        const invalid = refuse(400, "This link is not valid. Ask for a new one.")
        if (random === undefined || expires === undefined || signature === undefined) return yield* invalid
        if (!S.sameText(signature, S.sign(signingKey, `${purpose}:${random}.${expires}`))) return yield* invalid
        const at = yield* now
        if (Number(expires) <= at.getTime()) return yield* refuse(410, "This link has expired. Ask for a new one.")
        const row = yield* repo.useLink(S.digest(random), at)
        if (row === undefined) return yield* refuse(410, "This link was used already. Ask for a new one.")
        return row
      })

    const normalEmail = (email: string) =>
      EMAIL.test(email.trim()) ? Effect.succeed(email.trim().toLowerCase()) : refuse(400, "Enter an email address.")

    const checkPasswordRules = (password: string) =>
      password.length < PASSWORD_MIN || password.length > PASSWORD_MAX
        ? refuse(400, `Choose a password of ${PASSWORD_MIN} to ${PASSWORD_MAX} characters.`)
        : Effect.void

    /**
     * A new account, and the verification mail. An address that has an account already gets a
     * mail saying so instead: the page answers the same, so it tells nobody who has an account.
     */
    const signUp = (input: { email: string; password: string; baseUrl: string }) =>
      Effect.gen(function*() {
        const email = yield* normalEmail(input.email)
        yield* checkPasswordRules(input.password)
        const passwordHash = yield* S.hashPassword(input.password)
        const created = yield* repo.insertAccount({ id: yield* makeId("acc"), email, passwordHash, at: yield* now })
        if (created === undefined) {
          return yield* mailer.send({
            to: email,
            subject: "Your Agent Platform console account",
            text: `Someone (you?) tried to sign up with this address, which has an account already.\n` +
              `Sign in: ${input.baseUrl}/console/sign-in\nForgot your password? ${input.baseUrl}/console/reset`
          })
        }
        const link = yield* makeLink("verify", { accountId: created.id, organizationId: null, email })
        yield* mailer.send({
          to: email,
          subject: "Verify your email address",
          text: `Welcome to the Agent Platform console.\n\nVerify your address (the link works once, for 24 hours):\n` +
            `${input.baseUrl}/console/verify?token=${link}\n`
        })
      })

    const verify = (link: string) =>
      Effect.gen(function*() {
        const row = yield* spendLink("verify", link)
        yield* repo.markVerified(row.account_id!, yield* now)
      })

    /** Refused (429) once the address or the account failed too often within the window. */
    const limited = (subjects: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const since = new Date((yield* Clock.currentTimeMillis) - FAILURE_WINDOW_MS)
        const counts = yield* repo.failures(subjects, since)
        const over = counts.some((c) => c.n >= (c.subject.startsWith("account:") ? FAILURE_LIMITS.account : FAILURE_LIMITS.address))
        if (over) return yield* refuse(429, "Too many failed sign-ins. Wait 15 minutes, or reset your password.")
      })

    /** A new session (its token: the cookie's value); `previous` (the session it replaces) ends. */
    const openSession = (accountId: string, previous: string | undefined) =>
      Effect.gen(function*() {
        const at = yield* now
        const token = S.token()
        if (previous !== undefined) yield* repo.deleteSession(S.digest(previous))
        yield* repo.insertSession({ tokenHash: S.digest(token), accountId, at, expiresAt: new Date(at.getTime() + SESSION_MS) })
        return token
      })

    /** Sign-in with a password: a new session (the TOTP step still due when enrolled). */
    const signIn = (
      input: { email: string; password: string; address: string; previous: string | undefined; kind: Member["kind"] }
    ) =>
      Effect.gen(function*() {
        const email = input.email.trim().toLowerCase()
        const subjects = [`address:${input.address}`, `account:${email}`]
        yield* limited(subjects)
        const account = yield* repo.accountByEmail(email)
        const ok = yield* S.checkPassword(input.password, account?.password_hash ?? S.NO_PASSWORD)
        // an account of the other console fails as a wrong password does (it tells nobody it exists)
        if (account === undefined || !ok || account.kind !== input.kind) {
          yield* repo.recordFailure(subjects, yield* now)
          return yield* refuse(401, "Wrong email address or password.")
        }
        if (account.verified_at === null) return yield* refuse(403, "Verify your email address first: open the link we mailed you.")
        return yield* openSession(account.id, input.previous)
      })

    const member = (token: string) =>
      Effect.gen(function*() {
        const session = yield* repo.session(S.digest(token), yield* now)
        if (session === undefined) return Option.none<Member>()
        const account = yield* repo.account(session.account_id)
        if (account === undefined) return Option.none<Member>()
        const enrolled = account.totp_enrolled_at !== null
        return Option.some<Member>({
          accountId: account.id,
          email: account.email,
          kind: account.kind,
          organizationId: account.organization_id,
          enrolled,
          mfaDue: enrolled && session.mfa_at === null,
          mfaAt: session.mfa_at
        })
      })

    const signOut = (token: string) => repo.deleteSession(S.digest(token))

    /** A reset link for an account's address; the page answers the same for any address. */
    const requestReset = (input: { email: string; baseUrl: string }) =>
      Effect.gen(function*() {
        const email = input.email.trim().toLowerCase()
        const account = yield* repo.accountByEmail(email)
        if (account === undefined) return
        const link = yield* makeLink("reset", { accountId: account.id, organizationId: null, email })
        yield* mailer.send({
          to: email,
          subject: "Reset your password",
          text: `Choose a new password (the link works once, for 30 minutes):\n${input.baseUrl}/console/reset/confirm?token=${link}\n` +
            `If you did not ask for this, ignore this mail.`
        })
      })

    /** A new password from a reset link: every session of the account ends; the address is verified by the link. */
    const reset = (input: { link: string; password: string }) =>
      Effect.gen(function*() {
        yield* checkPasswordRules(input.password)
        const passwordHash = yield* S.hashPassword(input.password)
        yield* sql.withTransaction(Effect.gen(function*() {
          const row = yield* spendLink("reset", input.link)
          yield* repo.setPassword(row.account_id!, passwordHash)
          yield* repo.markVerified(row.account_id!, yield* now)
          yield* repo.deleteSessionsOf(row.account_id!)
        }))
      })

    /** The account's TOTP (the pending one during enrolment). */
    const totpOfAccount = (accountId: string) =>
      Effect.gen(function*() {
        const account = yield* repo.account(accountId)
        if (account?.totp_secret == null) return yield* refuse(400, "Start two-factor set-up again.")
        const [iv, tag, ciphertext] = account.totp_secret.split(".").map((p) => Buffer.from(p, "base64url"))
        const base32 = yield* secrets.decrypt({ iv: iv!, tag: tag!, ciphertext: ciphertext! }, `console-totp:${accountId}`).pipe(
          Effect.orDie
        )
        return { totp: totpOf(OTPAuth.Secret.fromBase32(Redacted.value(base32)), account.email), account }
      })

    /** A new TOTP secret for enrolment (until confirmed): its QR code (a data URL), its text and its URI. */
    const beginEnrolment = (m: Member) =>
      Effect.gen(function*() {
        if (m.enrolled) return yield* refuse(409, "Two-factor authentication is set up already.")
        // the pending secret is kept (the page shown again after a wrong code shows the same key)
        const pending = yield* totpOfAccount(m.accountId).pipe(Effect.option)
        const secret = Option.isSome(pending) ? pending.value.totp.secret : new OTPAuth.Secret({ size: 20 })
        if (Option.isNone(pending)) {
          const sealed = yield* secrets.encrypt(secret.base32, `console-totp:${m.accountId}`)
          yield* repo.setPendingTotp(
            m.accountId,
            [sealed.iv, sealed.tag, sealed.ciphertext].map((b) => Buffer.from(b).toString("base64url")).join(".")
          )
        }
        const uri = totpOf(secret, m.email).toString()
        const qr = yield* Effect.promise(() => QRCode.toDataURL(uri, { margin: 1, width: 220 }))
        return { secret: secret.base32, uri, qr }
      })

    /**
     * Whether `code` is the account's current TOTP code (one step either side), spending its time
     * step: a code seen once (at enrolment, sign-in or for a key) is refused after.
     */
    const spendCode = (accountId: string, totp: OTPAuth.TOTP, code: string) =>
      Effect.gen(function*() {
        const timestamp = yield* Clock.currentTimeMillis
        const delta = totp.validate({ token: code.replace(/\s/g, ""), timestamp, window: 1 })
        if (delta === null) return false
        return yield* repo.useTotpStep(accountId, Math.floor(timestamp / 1000 / totp.period) + delta)
      })

    /** Confirms enrolment with a code: the ten recovery codes, shown once (stored as digests). */
    const confirmEnrolment = (m: Member, token: string, code: string) =>
      Effect.gen(function*() {
        if (m.enrolled) return yield* refuse(409, "Two-factor authentication is set up already.")
        const { totp } = yield* totpOfAccount(m.accountId)
        if (!(yield* spendCode(m.accountId, totp, code))) return yield* refuse(400, "That code is not right. Enter the current code.")
        const codes = S.recoveryCodes()
        const at = yield* now
        yield* sql.withTransaction(Effect.all([
          repo.confirmTotp(m.accountId, codes.map(S.digest), at),
          repo.markMfa(S.digest(token), at)
        ]))
        return codes
      })

    /** The TOTP step (at sign-in, and again before a key): a code, or one recovery code (spent). */
    const checkMfa = (m: Member, token: string, code: string) =>
      Effect.gen(function*() {
        if (!m.enrolled) return yield* refuse(400, "Set up two-factor authentication first.")
        // the account's failures (passwords and codes) stop guessing here too
        yield* limited([`account:${m.email}`])
        const { totp } = yield* totpOfAccount(m.accountId)
        const at = yield* now
        const typed = code.trim().toLowerCase()
        const ok = (yield* spendCode(m.accountId, totp, typed)) || (/^[a-z0-9]{5}-[a-z0-9]{5}$/.test(typed) &&
          (yield* repo.useRecoveryCode(m.accountId, S.digest(typed), at)))
        if (!ok) {
          yield* repo.recordFailure([`account:${m.email}`], at)
          return yield* refuse(400, "That code is not right.")
        }
        yield* repo.markMfa(S.digest(token), at)
      })

    /** A secret is made only within FRESH_MFA_MS of the session's TOTP step (403 otherwise); now, in ms. */
    const freshMfa = (m: Member, what: "key" | "token") =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        m.mfaAt === null || at - m.mfaAt.getTime() > FRESH_MFA_MS
          ? refuse(403, `Enter a current two-factor code to create a ${what}.`)
          : Effect.succeed(at))

    /** The member's organization (404 for any other: a member sees nothing of another organization). */
    const organizationOf = (m: Member, organizationId: string) =>
      Effect.gen(function*() {
        if (m.organizationId !== organizationId) return yield* refuse(404, "There is no such page.")
        const org = yield* repo.organization(organizationId)
        if (org === undefined) return yield* refuse(404, "There is no such page.")
        return org
      })

    /**
     * Invites `email` to the member's organization: a single-use link (7 days) mailed to it. The
     * inviter must have two-factor authentication on, as for a key.
     */
    const invite = (m: Member, organizationId: string, input: { email: string; baseUrl: string }) =>
      Effect.gen(function*() {
        const org = yield* organizationOf(m, organizationId)
        if (!m.enrolled) return yield* refuse(403, "Set up two-factor authentication before inviting anyone.")
        const email = yield* normalEmail(input.email)
        const link = yield* makeLink("invite", { accountId: null, organizationId: org.id, email })
        yield* mailer.send({
          to: email,
          subject: `Join ${org.name} on Agent Platform`,
          text: `${m.email} invites you to ${org.name} in the Agent Platform console.\n\n` +
            `Sign up (or sign in) with this address, then open this link to join (it works once, for 7 days):\n` +
            `${input.baseUrl}/console/invite?token=${link}\n`
        })
      })

    /** The invitation a link names, unspent (to show it before the invitee accepts). */
    const invitation = (link: string) =>
      Effect.gen(function*() {
        const [random] = link.split(".")
        const row = random === undefined ? undefined : yield* repo.link(S.digest(random))
        if (row === undefined || row.purpose !== "invite" || row.organization_id === null) {
          return yield* refuse(400, "This link is not valid. Ask for a new one.")
        }
        if (row.used_at !== null) return yield* refuse(410, "This invitation was used already.")
        if (row.expires_at.getTime() <= (yield* Clock.currentTimeMillis)) return yield* refuse(410, "This invitation has expired.")
        const org = yield* repo.organization(row.organization_id)
        return { email: row.email, organization: org!.name }
      })

    /** The signed-in invitee (the invited address, in no organization yet) joins; the link is spent. */
    const accept = (m: Member, link: string) =>
      Effect.gen(function*() {
        const shown = yield* invitation(link)
        if (shown.email !== m.email) return yield* refuse(403, `This invitation is for ${shown.email}: sign in with that address.`)
        if (m.organizationId !== null) return yield* refuse(409, "You are a member of an organization already.")
        const row = yield* spendLink("invite", link)
        yield* repo.joinOrganization(m.accountId, row.organization_id!)
        return row.organization_id!
      })

    const createOrganization = (m: Member, name: string) =>
      Effect.gen(function*() {
        if (m.organizationId !== null) return yield* refuse(409, "You are a member of an organization already.")
        const trimmed = name.trim()
        if (trimmed.length < 1 || trimmed.length > 200) return yield* refuse(400, "Name your organization (1 to 200 characters).")
        const id = yield* makeId("org")
        yield* repo.insertOrganization({ id, name: trimmed, accountId: m.accountId, at: yield* now })
        return id
      })

    /** The organization's pilot application, submitted as `POST /operator/v1/pilot-applications` is. */
    const apply = (m: Member, organizationId: string) =>
      Effect.gen(function*() {
        const org = yield* organizationOf(m, organizationId)
        if (org.pilot_application_id !== null) return yield* refuse(409, "Your organization has applied already.")
        const pilot = yield* operator.submitPilot({ organization_name: org.name, contact_email: m.email })
        yield* repo.setApplication(org.id, pilot.id)
      })

    /** Where the organization is on its way to a first run. */
    const status = (m: Member, organizationId: string) =>
      Effect.gen(function*() {
        const org = yield* organizationOf(m, organizationId)
        const pilot = org.pilot_application_id === null
          ? undefined
          : yield* operator.getPilot(org.pilot_application_id).pipe(Effect.orDie)
        const tenantId = pilot?.tenant_id ?? null
        const sandbox = tenantId === null ? undefined : yield* repo.sandboxState(tenantId)
        const completed = tenantId === null ? false : yield* repo.hasSucceededRun(tenantId)
        return { organization: org, pilot, tenantId, sandbox, completed }
      })

    /** The sandbox's tenant when it is ready; refused before. */
    const readyTenant = (m: Member, organizationId: string) =>
      Effect.gen(function*() {
        const s = yield* status(m, organizationId)
        if (s.tenantId === null || s.sandbox !== "ready") return yield* refuse(409, "Your sandbox is not ready yet.")
        return s.tenantId
      })

    /**
     * The first key (quickstart scopes, acting as the quickstart's service actor), after a TOTP
     * code within FRESH_MFA_MS; its audit entry names the member. The secret is returned once.
     */
    const createKey = (m: Member, organizationId: string, name: string) =>
      Effect.gen(function*() {
        if (!m.enrolled) return yield* refuse(403, "Set up two-factor authentication before creating a key.")
        yield* freshMfa(m, "key")
        const tenantId = yield* readyTenant(m, organizationId)
        const keyName = name.trim().length > 0 && name.trim().length <= 200 ? name.trim() : "Console key"
        const key = yield* sql.withTransaction(Effect.gen(function*() {
          const key = yield* operator.createKey(tenantId, "sandbox", { name: keyName }).pipe(
            Effect.catchTag("InvalidRequest", (e) => Effect.die(e)),
            Effect.catchTag("NotFound", () => refuse(409, "Your sandbox is not ready yet."))
          )
          yield* audit.record({
            cell: { tenantId, environment: "sandbox" },
            actor: { type: "member", id: m.accountId },
            keyId: null,
            action: "consoleCreateApiKey",
            resource: { type: "api_key", id: key.id },
            requestId: yield* requestId,
            status: 201,
            ip: null
          })
          return key
        }))
        return key
      })

    const quickstart = (m: Member, organizationId: string) =>
      Effect.flatMap(
        readyTenant(m, organizationId),
        (tenantId) => Effect.map(operator.getQuickstart(tenantId, "sandbox").pipe(Effect.orDie), (ids) => ({ tenantId, ...ids }))
      )

    /**
     * An operator's account (issue 39, `npm run operator -- create-operator`): its password is
     * random, returned once (for whoever runs the CLI to hand over); TOTP is enrolled at the first
     * sign-in, before any operator page opens.
     */
    const createOperator = (emailInput: string) =>
      Effect.gen(function*() {
        const email = yield* normalEmail(emailInput)
        const password = S.token()
        const created = yield* repo.insertOperator({
          id: yield* makeId("acc"),
          email,
          passwordHash: yield* S.hashPassword(password),
          at: yield* now
        })
        if (created === undefined) return yield* refuse(409, `${email} has a console account already.`)
        return { id: created.id, email, password }
      })

    /** An operator's page: refused to a member's session (and to an operator who has not enrolled TOTP). */
    const asOperator = (m: Member) =>
      m.kind !== "operator"
        ? refuse(404, "There is no such page.")
        : m.enrolled
        ? Effect.void
        : refuse(403, "Set up two-factor authentication first.")

    /** An operator account's action in a cell's audit log (the shared token's entries name `operator`). */
    const auditOperator = (m: Member, cell: CellRef, action: string, resource: { type: string; id: string }) =>
      Effect.flatMap(
        requestId,
        (rid) =>
          audit.record({
            cell,
            actor: { type: "operator", id: m.accountId },
            keyId: null,
            action,
            resource,
            requestId: rid,
            status: 200,
            ip: null
          })
      )

    /**
     * An operator's decision on a pilot application, through the operator plane's own approval or
     * rejection; the approval's audit entry (in the new sandbox's log) names the operator account.
     */
    const decidePilot = (m: Member, id: string, decision: "approve" | "reject", reason: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const refused = (e: { readonly message: string }, status: number) => refuse(status, e.message)
        if (decision === "reject") {
          return yield* operator.rejectPilot(id, reason, m.accountId).pipe(
            Effect.catchTags({
              InvalidRequest: (e) => refused(e, 400),
              NotFound: (e) => refused(e, 404),
              Conflict: (e) => refused(e, 409)
            })
          )
        }
        const approved = yield* operator.approvePilotBy(id, m.accountId, reason.trim() === "" ? null : reason.trim()).pipe(
          Effect.provideService(UnitOfWork, work),
          Effect.catchTags({ NotFound: (e) => refused(e, 404), Conflict: (e) => refused(e, 409) })
        )
        yield* auditOperator(m, { tenantId: approved.tenant_id, environment: "sandbox" }, "approvePilotApplication", {
          type: "pilot_application",
          id
        })
      })

    const pilotQueue = (m: Member, status: "submitted" | "approved" | "rejected" | null) =>
      Effect.zipRight(asOperator(m), operator.pilotQueue(status))

    const connectionQueue = (m: Member) => Effect.zipRight(asOperator(m), tools.pendingReview())

    /** An operator's review of a connection, through the operator plane's own; audited in its cell as the account's. */
    const reviewConnection = (m: Member, id: string, decision: "approve" | "reject", note: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const reviewed = yield* tools.review(id, decision, note.trim() === "" ? undefined : note.trim()).pipe(
          Effect.provideService(UnitOfWork, work),
          Effect.catchTags({
            NotFound: (e) => refuse(404, e.message),
            Conflict: (e) => refuse(409, e.message)
          })
        )
        const row = yield* repo.connectionCell(id)
        yield* auditOperator(m, { tenantId: row.tenant_id, environment: row.environment }, "reviewConnection", { type: "connection", id })
        return reviewed
      })

    /** The production requests of a status (null: all), newest first, the first 100. */
    const productionQueue = (m: Member, status: "submitted" | "approved" | "rejected" | null) =>
      Effect.zipRight(
        asOperator(m),
        Effect.map(
          productionRequests.list(status === null ? {} : { status }, { limit: 100 }).pipe(Effect.orDie),
          (page) => page.items
        )
      )

    /** An operator's decision on a production request, through the operator plane's own; audited in the sandbox's log. */
    const decideProduction = (m: Member, id: string, decision: "approve" | "reject", reason: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        if (decision === "reject" && reason.trim() === "") return yield* refuse(400, "Give the reason of a rejection.")
        const decided = yield* (decision === "approve" ? productionRequests.approve(id) : productionRequests.reject(id, reason.trim()))
          .pipe(
            Effect.provideService(UnitOfWork, work),
            Effect.catchTags({ NotFound: (e) => refuse(404, e.message), Conflict: (e) => refuse(409, e.message) })
          )
        const action = decision === "approve" ? "approveProductionRequest" : "rejectProductionRequest"
        yield* auditOperator(m, { tenantId: decided.tenant_id, environment: "sandbox" }, action, { type: "production_request", id })
      })

    // ---- tenants and cells (issue 39) ----

    /** The environment a page's path names, or 404. */
    const environmentOf = (name: string) =>
      name === "sandbox" || name === "production" ? Effect.succeed(name as EnvironmentName) : refuse(404, "There is no such environment.")
    const notFoundIsRefused = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.catchIf(
        effect,
        (e): e is Extract<E, { readonly _tag: "NotFound"; readonly message: string }> => e._tag === "NotFound",
        (e) => refuse(404, e.message)
      )

    const tenants = (m: Member) => Effect.zipRight(asOperator(m), operator.tenants())

    /**
     * A tenant as its page shows it: each environment's keys (never a secret), quotas (as stored:
     * no cell starts for the page) and latest runs.
     */
    const tenant = (m: Member, tenantId: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const t = yield* notFoundIsRefused(operator.tenant(tenantId))
        const environments = yield* Effect.forEach(t.environments, (e) =>
          Effect.gen(function*() {
            const name = e.name as EnvironmentName
            const quotaList = yield* quotas.operatorList(t.id, name).pipe(
              Effect.map((q) => q.items),
              Effect.catchTag("NotFound", () => Effect.succeed(null))
            )
            return {
              ...e,
              keys: yield* operator.keys(t.id, name),
              quotas: quotaList,
              runs: yield* operator.recentRuns(t.id, name)
            }
          }))
        return { ...t, environments }
      })

    /** A run of a cell, the D19 operator read (deleted environments' runs too, until their purge). */
    const run = (m: Member, tenantId: string, environment: string, runId: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        return yield* notFoundIsRefused(
          operator.getRun(tenantId, yield* environmentOf(environment), runId).pipe(Effect.provideService(RunStore, runStore))
        )
      })

    /** A quota's new limit, through the operator plane's quota service; audited in the cell as the account's. */
    const setQuota = (m: Member, tenantId: string, environment: string, name: string, limit: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const env = yield* environmentOf(environment)
        if (!(QUOTA_NAMES as ReadonlyArray<string>).includes(name)) return yield* refuse(404, "There is no such quota.")
        const n = Number(limit.trim())
        if (limit.trim() === "" || !Number.isSafeInteger(n) || n < 0) {
          return yield* refuse(400, "A limit is a whole number from 0 (nothing is admitted).")
        }
        const set = yield* notFoundIsRefused(
          quotas.setLimit(tenantId, env, name as QuotaName, n).pipe(
            Effect.provideService(UnitOfWork, work)
          )
        )
        yield* auditOperator(m, { tenantId, environment: env }, "setQuota", { type: "quota", id: name })
        return set
      })

    const cluster = (m: Member) => Effect.zipRight(asOperator(m), operator.cluster)

    /**
     * Metrics at a glance (issue 39): each active cell (the first 50 of the cluster view) with its
     * runs and streams now (from the cell, wherever it runs) and what it got of this node's shares
     * since the node started (work granted, database waits); every environment's webhook backlog.
     */
    const metrics = (m: Member) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const view = yield* operator.cluster
        // (a cell deleted under the page is not shown)
        const cells = yield* operator.cellsStats(
          view.cells.slice(0, 50).map((c) => ({ ...c, tenantId: c.tenant_id, environment: c.environment as EnvironmentName }))
        )
        return {
          cells,
          backlog: yield* webhooks.backlog(20),
          uptimeSeconds: Math.max(1, process.uptime())
        }
      })

    /**
     * A new signing key of the cell's tool invocations (the operator plane's rotation): the old one
     * stays published until its tokens expired. Audited in the cell as the account's.
     */
    const rotateSigningKey = (m: Member, tenantId: string, environment: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const env = yield* environmentOf(environment)
        yield* notFoundIsRefused(signing.jwksOf(tenantId, env))
        const rotated = yield* signing.rotate({ tenantId, environment: env }).pipe(Effect.provideService(UnitOfWork, work))
        yield* auditOperator(m, { tenantId, environment: env }, "rotateSigningKey", { type: "signing_key", id: rotated.kid })
        return rotated
      })

    /**
     * A personal operator token (issue 39) for the operator API and the CLI: after a TOTP code
     * within FRESH_MFA_MS, like a member's key; the secret is returned once, only its digest kept.
     */
    const createOperatorToken = (m: Member, name: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        const at = yield* freshMfa(m, "token")
        const tokenName = name.trim()
        if (tokenName.length === 0 || tokenName.length > 200) return yield* refuse(400, "Name the token (at most 200 characters).")
        const secret = `${OPERATOR_TOKEN_PREFIX}${S.token()}`
        const id = yield* makeId("otk")
        yield* repo.insertOperatorToken({
          id,
          accountId: m.accountId,
          name: tokenName,
          prefix: secret.slice(0, OPERATOR_TOKEN_PREFIX.length + 8),
          tokenHash: S.digest(secret),
          at: new Date(at)
        })
        yield* Effect.logInfo("operator token created").pipe(Effect.annotateLogs({ account_id: m.accountId, token_id: id }))
        return { id, name: tokenName, secret }
      })

    const operatorTokens = (m: Member) => Effect.zipRight(asOperator(m), repo.operatorTokens(m.accountId))

    const revokeOperatorToken = (m: Member, id: string) =>
      Effect.gen(function*() {
        yield* asOperator(m)
        if (!(yield* repo.revokeOperatorToken(m.accountId, id, yield* now))) return yield* refuse(404, "There is no such live token.")
        yield* Effect.logInfo("operator token revoked").pipe(Effect.annotateLogs({ account_id: m.accountId, token_id: id }))
      })

    /** The operator account a personal token acts for (undefined: not a live token of an operator). */
    const operatorOfToken = (secret: string) =>
      !secret.startsWith(OPERATOR_TOKEN_PREFIX)
        ? Effect.succeed(undefined)
        : Effect.flatMap(now, (at) => repo.operatorOfToken(S.digest(secret), at))

    const withDefects = <A, E, R>(effect: Effect.Effect<A, E, R>) => dieOnSqlError(effect)
    return {
      createOperatorToken: (m: Member, name: string) => withDefects(createOperatorToken(m, name)),
      operatorTokens: (m: Member) => withDefects(operatorTokens(m)),
      revokeOperatorToken: (m: Member, id: string) => withDefects(revokeOperatorToken(m, id)),
      operatorOfToken: (secret: string) => withDefects(operatorOfToken(secret)),
      signUp: (input: Parameters<typeof signUp>[0]) => withDefects(signUp(input)),
      verify: (link: string) => withDefects(verify(link)),
      signIn: (input: Parameters<typeof signIn>[0]) => withDefects(signIn(input)),
      member: (token: string) => withDefects(member(token)),
      signOut: (token: string) => withDefects(signOut(token)),
      requestReset: (input: Parameters<typeof requestReset>[0]) => withDefects(requestReset(input)),
      reset: (input: Parameters<typeof reset>[0]) => withDefects(reset(input)),
      beginEnrolment: (m: Member) => withDefects(beginEnrolment(m)),
      confirmEnrolment: (m: Member, token: string, code: string) => withDefects(confirmEnrolment(m, token, code)),
      checkMfa: (m: Member, token: string, code: string) => withDefects(checkMfa(m, token, code)),
      createOrganization: (m: Member, name: string) => withDefects(createOrganization(m, name)),
      invite: (m: Member, organizationId: string, input: Parameters<typeof invite>[2]) => withDefects(invite(m, organizationId, input)),
      invitation: (link: string) => withDefects(invitation(link)),
      accept: (m: Member, link: string) => withDefects(accept(m, link)),
      apply: (m: Member, organizationId: string) => withDefects(apply(m, organizationId)),
      status: (m: Member, organizationId: string) => withDefects(status(m, organizationId)),
      createKey: (m: Member, organizationId: string, name: string) => withDefects(createKey(m, organizationId, name)),
      quickstart: (m: Member, organizationId: string) => withDefects(quickstart(m, organizationId)),
      createOperator: (email: string) => withDefects(createOperator(email)),
      decidePilot: (m: Member, id: string, decision: "approve" | "reject", reason: string) =>
        withDefects(decidePilot(m, id, decision, reason)),
      pilotQueue: (m: Member, status: Parameters<typeof pilotQueue>[1]) => withDefects(pilotQueue(m, status)),
      connectionQueue: (m: Member) => withDefects(connectionQueue(m)),
      productionQueue: (m: Member, status: Parameters<typeof productionQueue>[1]) => withDefects(productionQueue(m, status)),
      decideProduction: (m: Member, id: string, decision: "approve" | "reject", reason: string) =>
        withDefects(decideProduction(m, id, decision, reason)),
      reviewConnection: (m: Member, id: string, decision: "approve" | "reject", note: string) =>
        withDefects(reviewConnection(m, id, decision, note)),
      tenants: (m: Member) => withDefects(tenants(m)),
      tenant: (m: Member, tenantId: string) => withDefects(tenant(m, tenantId)),
      run: (m: Member, tenantId: string, environment: string, runId: string) => withDefects(run(m, tenantId, environment, runId)),
      setQuota: (m: Member, tenantId: string, environment: string, name: string, limit: string) =>
        withDefects(setQuota(m, tenantId, environment, name, limit)),
      cluster: (m: Member) => withDefects(cluster(m)),
      metrics: (m: Member) => withDefects(metrics(m)),
      rotateSigningKey: (m: Member, tenantId: string, environment: string) => withDefects(rotateSigningKey(m, tenantId, environment)),
      /** The CSRF token of a session or pre-session cookie value. */
      csrfOf: (cookie: string) => S.sign(signingKey, `csrf:${cookie}`)
    } as const
  }),
  dependencies: [ConsoleRepo.Default, Mailer.Default]
}) {}

/** Operators' personal tokens for the operator plane's authentication (src/Kernel/Security.ts). */
export const OperatorCredentialsLive = Layer.effect(
  OperatorCredentials,
  Effect.map(Console, (consoles) => ({
    accountOf: (token: string) => Effect.map(consoles.operatorOfToken(token), (found) => found?.account_id)
  }))
)
