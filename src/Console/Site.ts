/**
 * What the customer console (`/console`, issue 38) and the operator console (`/operator/console`,
 * issue 39) share, beside the HttpApi on its router (as `/docs` and `/metrics` are). The pipeline
 * passes such paths straight to the router (no key, no idempotency); what guards them is here:
 *   - the session: a random token in the site's session cookie (HttpOnly, SameSite=Lax, path the
 *     site's prefix, Secure when PUBLIC_BASE_URL is https), stored as its digest, replaced at
 *     sign-in; a session opens only its own kind's pages (a member's none of the operators', an
 *     operator's none of the members': different cookies, and the account's kind checked at
 *     sign-in and on every visit);
 *   - CSRF: every POST carries `csrf`, an HMAC of the session's token (before sign-in, of the
 *     pre-session cookie's random value); a POST without the right one gets a 403 page;
 *   - the TOTP step at sign-in once enrolled: every page but the step itself waits for it.
 * Answers: text/html, `Cache-Control: no-store` (a key's secret is shown once and never kept),
 * a Content-Security-Policy without scripts, no referrer (links carry single-use tokens).
 * `makeSite` registers sign-in, sign-out and the TOTP pages and returns the helpers of the others.
 */
import { type HttpApiBuilder, type HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Duration, Effect, Option } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { Console, type Member, type Refused } from "../Console.js"
import { escape, form, page } from "./Pages.js"
import { sameText, token as randomToken } from "./Secrets.js"

/** One console: where it is, its cookies, whose accounts sign in. */
export interface Site {
  readonly prefix: "/console" | "/operator/console"
  readonly kind: Member["kind"]
  readonly sessionCookie: string
  readonly preCookie: string
  /** the header's name of the console */
  readonly brand: string
  /** HTML under the sign-in form (the customer's links to sign up and reset) */
  readonly signInNote: string
}

const HEADERS = {
  "content-type": "text/html; charset=utf-8",
  "cache-control": "no-store",
  "content-security-policy":
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "referrer-policy": "no-referrer",
  "x-content-type-options": "nosniff"
}

/** What a handler knows of its request. */
export interface Visit {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly session: string | undefined
  readonly member: Option.Option<Member>
  /** the CSRF token of this visit's forms */
  readonly csrf: string
  /** cookies to set on the answer */
  readonly cookies: Array<[string, string, number]>
  readonly baseUrl: string
  readonly query: URLSearchParams
}

type Router = Parameters<Parameters<typeof HttpApiBuilder.Router.use>[0]>[0]
export type Answer<E = never> = Effect.Effect<HttpServerResponse.HttpServerResponse, E, HttpRouter.RouteContext>
export type Page = (v: Visit, message?: { status: number; text: string }) => Answer

export const makeSite = (router: Router, site: Site) =>
  Effect.gen(function*() {
    const { preCookie: PRE_COOKIE, prefix: P, sessionCookie: SESSION_COOKIE } = site
    const consoles = yield* Console
    const config = yield* AppConfig
    const secure = Option.exists(config.publicBaseUrl, (u) => u.startsWith("https:"))

    const visit = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const cookies: Array<[string, string, number]> = []
      const session = request.cookies[SESSION_COOKIE]
      const member = session === undefined
        ? Option.none<Member>()
        : Option.filter(yield* consoles.member(session), (m) => m.kind === site.kind)
      let pre = request.cookies[PRE_COOKIE]
      if (pre === undefined || pre.length < 20) {
        pre = randomToken()
        cookies.push([PRE_COOKIE, pre, 12 * 3600])
      }
      const signedIn = Option.isSome(member) && session !== undefined
      const baseUrl = Option.getOrElse(config.publicBaseUrl, () => `http://${request.headers["host"] ?? "localhost"}`).replace(/\/+$/, "")
      const url = new URL(request.url, "http://console")
      return {
        request,
        session: signedIn ? session : undefined,
        member,
        csrf: consoles.csrfOf(signedIn ? session! : pre),
        cookies,
        baseUrl,
        query: url.searchParams
      } satisfies Visit
    })

    const respond = (v: Visit, response: HttpServerResponse.HttpServerResponse) =>
      v.cookies.reduce(
        (r, [name, value, seconds]) =>
          HttpServerResponse.unsafeSetCookie(r, name, value, {
            httpOnly: true,
            sameSite: "lax",
            path: P,
            secure,
            maxAge: Duration.seconds(seconds)
          }),
        response
      )

    const html = (v: Visit, status: number, title: string, body: string, message?: string) =>
      respond(
        v,
        HttpServerResponse.text(
          page({
            title,
            message,
            home: P,
            brand: site.brand,
            member: Option.match(v.member, {
              onNone: () => undefined,
              onSome: (m) => ({ email: m.email, csrf: v.csrf })
            })
          }, body),
          { status, headers: HEADERS }
        )
      )

    const redirect = (v: Visit, location: string) =>
      respond(v, HttpServerResponse.empty({ status: 303, headers: { location, "cache-control": "no-store" } }))

    /** A POST's fields, once its CSRF token is the visit's (else the 403 page). */
    const posted = (v: Visit) =>
      Effect.gen(function*() {
        const params = yield* v.request.urlParamsBody.pipe(Effect.orElseSucceed(() => []))
        const fields: Record<string, string> = {}
        for (const [k, value] of params) fields[k] = value
        const ok = typeof fields["csrf"] === "string" && sameText(fields["csrf"], v.csrf)
        return ok ? Option.some(fields) : Option.none()
      })

    const forbidden = (v: Visit) =>
      html(v, 403, "Forbidden", `<p>This form has expired or did not come from this console. <a href="${P}">Start again</a>.</p>`)

    const get = (path: HttpRouter.PathInput, render: Page) => router.get(path, Effect.flatMap(visit, (v) => render(v)).pipe(Effect.orDie))

    /** A form's POST: CSRF first, then `act`; a refusal shows `again` (its form) with the message. */
    const post = (
      path: HttpRouter.PathInput,
      act: (v: Visit, fields: Record<string, string>) => Answer<Refused>,
      again: Page
    ) =>
      router.post(
        path,
        Effect.gen(function*() {
          const v = yield* visit
          const fields = yield* posted(v)
          if (Option.isNone(fields)) return forbidden(v)
          return yield* act(v, fields.value).pipe(
            Effect.catchTag("Refused", (r) => again(v, { status: r.status, text: r.message }))
          )
        }).pipe(Effect.orDie)
      )

    /** The member of a page that needs one: else to sign-in, or to the TOTP step when it is due. */
    const withMember = <E, R>(
      v: Visit,
      then: (m: Member, session: string) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R> =>
      Option.match(v.member, {
        onNone: () => Effect.succeed(redirect(v, `${P}/sign-in`)),
        onSome: (m) => m.mfaDue ? Effect.succeed(redirect(v, `${P}/mfa`)) : then(m, v.session!)
      })

    /** A refusal on a page that is not a form's (another organization's: 404). */
    const refusedPage = (v: Visit) => (r: Refused) => Effect.succeed(html(v, r.status, "Not available", `<p>${escape(r.message)}</p>`))

    // ---- sign-in, sign-out ----

    const signInPage: Page = (v, m) =>
      Effect.succeed(html(
        v,
        m?.status ?? 200,
        "Sign in",
        form(`${P}/sign-in`, v.csrf, [
          { name: "email", label: "Email address", type: "email", autocomplete: "username" },
          { name: "password", label: "Password", type: "password", autocomplete: "current-password" }
        ], "Sign in") +
          site.signInNote,
        m?.text
      ))
    yield* get(`${P}/sign-in`, signInPage)
    yield* post(`${P}/sign-in`, (v, f) =>
      Effect.map(
        consoles.signIn({
          email: f["email"] ?? "",
          password: f["password"] ?? "",
          address: Option.getOrElse(v.request.remoteAddress, () => "unknown"),
          previous: v.request.cookies[SESSION_COOKIE],
          kind: site.kind
        }),
        (session) => {
          v.cookies.push([SESSION_COOKIE, session, 12 * 3600])
          return redirect(v, `${P}`)
        }
      ), signInPage)

    yield* router.post(
      `${P}/sign-out`,
      Effect.gen(function*() {
        const v = yield* visit
        if (Option.isNone(yield* posted(v))) {
          return forbidden(v)
        }
        if (v.session !== undefined) yield* consoles.signOut(v.session)
        v.cookies.push([SESSION_COOKIE, "", 0])
        return redirect(v, `${P}/sign-in`)
      }).pipe(Effect.orDie)
    )

    // ---- two-factor authentication ----

    const mfaPage: Page = (v, m) =>
      Option.match(v.member, {
        onNone: () => Effect.succeed(redirect(v, `${P}/sign-in`)),
        onSome: () =>
          Effect.succeed(html(
            v,
            m?.status ?? 200,
            "Two-factor authentication",
            form(`${P}/mfa`, v.csrf, [
              { name: "code", label: "Code from your authenticator app (or a recovery code)", type: "text", autocomplete: "one-time-code" }
            ], "Continue"),
            m?.text
          ))
      })
    yield* get(`${P}/mfa`, mfaPage)
    yield* post(`${P}/mfa`, (v, f) =>
      Option.match(v.member, {
        onNone: () => Effect.succeed(redirect(v, `${P}/sign-in`)),
        onSome: (m) => Effect.as(consoles.checkMfa(m, v.session!, f["code"] ?? ""), redirect(v, `${P}`))
      }), mfaPage)

    const enrolPage: Page = (v, msg) =>
      withMember(v, (m) =>
        Effect.map(consoles.beginEnrolment(m), (e) =>
          html(
            v,
            msg?.status ?? 200,
            "Set up two-factor authentication",
            `<section><p>Scan this QR code with an authenticator app (any RFC 6238 TOTP app), or enter the key by hand.</p>
<img class="qr" src="${e.qr}" alt="QR code of your two-factor key">
<p>Key: <code>${escape(e.secret.replace(/(.{4})/g, "$1 ").trim())}</code></p></section>` +
              form(`${P}/mfa/enrol`, v.csrf, [
                { name: "code", label: "Six-digit code from the app", type: "text", autocomplete: "one-time-code", inputmode: "numeric" }
              ], "Turn on two-factor authentication"),
            msg?.text
          ))).pipe(Effect.catchTag("Refused", () => Effect.succeed(redirect(v, `${P}`))))
    yield* get(`${P}/mfa/enrol`, enrolPage)
    yield* post(`${P}/mfa/enrol`, (v, f) =>
      withMember(v, (m, session) =>
        Effect.map(consoles.confirmEnrolment(m, session, f["code"] ?? ""), (codes) =>
          html(
            v,
            200,
            "Save your recovery codes",
            `<p class="note">Two-factor authentication is on. Each code below signs you in once if you lose your
authenticator. They are shown only now: keep them somewhere safe.</p><pre aria-label="Recovery codes">${codes.join("\n")}</pre>
<p><a href="${P}">Continue</a></p>`
          ))), enrolPage)

    return { consoles, config, visit, html, redirect, posted, forbidden, get, post, withMember, refusedPage } as const
  })
